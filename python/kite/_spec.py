"""Op specs: the C table's arguments joined with _table.OPS, and the code generated from them.

kite.ops.<op> and the fakes of torch.ops.kite.<op> are small functions generated here as source
text, so a call does no per-call table lookups: kite.ops allocates the results, then makes one
call into kite._C. The torch kernels themselves are C (kite._C.torch_kernel) over the layout
kernel_layout gives: no Python frame between the dispatcher and kite.
"""
import re
from dataclasses import dataclass, field

from . import _C
from ._table import OPS, REQUIRED


@dataclass
class Spec:
    name: str
    index: int
    args: list  # [(kind, name)] in the op table's order; kinds as kite._C.ops() gives them
    defaults: dict
    out: dict  # result name -> allocation expression
    extra: dict = field(default_factory=dict)  # name -> (schema type, default)

    @property
    def results(self):
        """Written tensors that are results, required ones (kind W) first in C order."""
        return [n for k, n in self.args if n in self.out and k == "W"]

    @property
    def optional_results(self):
        return [n for k, n in self.args if n in self.out and k == "w"]

    @property
    def params(self):
        """Arguments of the functional form: every C argument that is not a result."""
        return [(k, n) for k, n in self.args if n not in self.out]

    def param_default(self, i, params):
        """The default of params[i], or a sentinel when it must stay required."""
        for _, n in params[i:]:
            if n not in self.defaults:
                return _REQUIRED
        return self.defaults[params[i][1]]


_REQUIRED = REQUIRED  # a parameter without default (also in _table.py's extra)


def specs():
    out = []
    for index, (name, args, _op) in enumerate(_C.ops()):
        row = OPS.get(name)
        if row is None:
            raise ImportError(f"kite: op {name} of kite._C has no row in kite/_table.py")
        required = set(row.get("required", ()))
        args = [(k.upper() if n in required else k, n) for k, n in args]
        s = Spec(name, index, args, dict(row.get("defaults", {})), dict(row.get("out", {})),
                 dict(row.get("extra", {})))
        names = {n for _, n in s.args}
        for n in list(s.defaults) + list(s.out):
            if n not in names:
                raise ImportError(f"kite: _table.py row {name} names {n}, not an argument")
        out.append(s)
    stale = set(OPS) - {s.name for s in out}
    if stale:
        raise ImportError(f"kite: _table.py has rows for ops kite._C does not bind: {sorted(stale)}")
    return out


def _signature(spec, params, with_extra=True):
    parts = []
    for i, (_, n) in enumerate(params):
        d = spec.param_default(i, params)
        parts.append(n if d is _REQUIRED else f"{n}={d!r}")
    if with_extra:
        parts += [n if d is _REQUIRED else f"{n}={d!r}" for n, (_, d) in spec.extra.items()]
    return parts


def _call_line(spec, indent):
    first = spec.args[0][1]
    names = ", ".join(n for _, n in spec.args)
    return f"{indent}_call({spec.index}, _stream({first}), {names})\n"


def source_ops(spec):
    """kite.ops.<op>(params..., *, out=None[, lse=None]) -> result(s)."""
    params = spec.params
    sig = _signature(spec, params)
    res, opt = spec.results, spec.optional_results
    kw = []
    if res:
        kw.append("out=None")
    kw += [f"{n}=None" for n in opt]
    head = ", ".join(sig + (["*"] + kw if kw else []))
    src = f"def {spec.name}({head}):\n"
    if len(res) == 1:
        src += f"    {res[0]} = {spec.out[res[0]]} if out is None else out\n"
    elif res:
        src += "    if out is None:\n"
        for n in res:
            src += f"        {n} = {spec.out[n]}\n"
        src += f"    else:\n        {', '.join(res)} = out\n"
    for n in opt:
        src += f"    if {n} is True:\n        {n} = {spec.out[n]}\n"
    src += _call_line(spec, "    ")
    ret = ", ".join(res)
    if opt:
        src += f"    if {' or '.join(f'{n} is not None' for n in opt)}:\n"
        src += f"        return ({ret}{', ' if ret else ''}{', '.join(opt)})\n"
    if len(res) > 1:
        ret = f"({ret})"
    src += f"    return {ret or 'None'}\n"
    return src


def source_fake(spec):
    """The functional torch op's fake: allocates the required results, runs nothing."""
    params = spec.params
    head = ", ".join(_signature(spec, params))
    src = f"def {spec.name}_fake({head}):\n"
    for n in spec.results:
        src += f"    {n} = {spec.out[n]}\n"
    res = spec.results
    src += f"    return {'(' + ', '.join(res) + ')' if len(res) > 1 else (res[0] if res else 'None')}\n"
    return src


SRC_NONE = -100  # kite_module.c: an argument the functional form passes as None


def kernel_layout(spec):
    """What kite._C.torch_kernel takes for the functional torch op: (defaults, src, like,
    alloc source). The schema's arguments are spec.params then spec.extra; defaults gives each
    one's default (None where required: the dispatcher leaves out only trailing defaults); src
    maps each C argument to a schema argument (>= 0), a result (-1 - k) or None; like is the
    schema argument whose empty_like is the one result, or -1, and then the alloc source (None
    without results) defines <op>_alloc(schema arguments) -> the result(s)."""
    params = [n for _, n in spec.params] + list(spec.extra)
    defaults = []
    for i in range(len(spec.params)):
        d = spec.param_default(i, spec.params)
        defaults.append(None if d is _REQUIRED else d)
    defaults += [None if d is _REQUIRED else d for _, d in spec.extra.values()]
    res = spec.results
    src = tuple(-1 - res.index(n) if n in res else
                SRC_NONE if n in spec.optional_results else params.index(n)
                for _, n in spec.args)
    m = re.fullmatch(r"like\((\w+)\)", spec.out[res[0]]) if len(res) == 1 else None
    like = params.index(m.group(1)) if m and m.group(1) in params else -1
    alloc = None
    if res and like < 0:
        exprs = ", ".join(spec.out[n] for n in res)
        alloc = (f"def {spec.name}_alloc({', '.join(params)}):\n"
                 f"    return {exprs if len(res) == 1 else '(' + exprs + ')'}\n")
    return tuple(defaults), src, like, alloc


def out_layout(spec):
    """kernel_layout's (defaults, src) for the .out form: every C argument, in order."""
    return (None,) * len(spec.args), tuple(range(len(spec.args)))


_SCHEMA_TYPE = {"T": "Tensor", "t": "Tensor?", "f": "float", "i": "int", "u": "int"}


def _schema_default(v):
    if v is None:
        return "None"
    if isinstance(v, str):
        return '"' + v + '"'
    return repr(v)


def schema_functional(spec):
    alias = iter("abcdefghijklmnop")
    params = spec.params
    parts = []
    for i, (k, n) in enumerate(params):
        if k == "W":
            t = f"Tensor({next(alias)}!)"
        elif k == "w":
            t = f"Tensor({next(alias)}!)?"
        else:
            t = _SCHEMA_TYPE[k]
        d = spec.param_default(i, params)
        parts.append(f"{t} {n}" + ("" if d is _REQUIRED else f"={_schema_default(d)}"))
    for n, (t, d) in spec.extra.items():
        parts.append(f"{t} {n}" + ("" if d is _REQUIRED else f"={_schema_default(d)}"))
    res = spec.results
    ret = "()" if not res else ("Tensor" if len(res) == 1 else "(" + ", ".join(["Tensor"] * len(res)) + ")")
    return f"{spec.name}({', '.join(parts)}) -> {ret}"


def schema_out(spec):
    alias = iter("abcdefghijklmnop")
    parts = []
    for k, n in spec.args:
        if k in "Ww":
            parts.append(f"Tensor({next(alias)}!){'?' if k == 'w' else ''} {n}")
        else:
            parts.append(f"{_SCHEMA_TYPE[k]} {n}")
    return f"{spec.name}.out({', '.join(parts)}) -> ()"


def compile_source(src, namespace):
    exec(compile(src, "<kite generated>", "exec"), namespace)
