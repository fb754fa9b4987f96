"""Op specs: the C table's arguments joined with _table.OPS, and the code generated from them.

kite.ops.<op> and the fakes of torch.ops.kite.<op> are small functions generated here as source
text, so a call does no per-call table lookups: kite.ops allocates the results, then makes one
call into kite._C. The torch kernels themselves are C (kite._C.torch_kernel) over the layout
kernel_layout gives: no Python frame between the dispatcher and kite.
"""
import re
from dataclasses import dataclass, field

from . import _C
from ._table import FAMILY_ROWS, OPS, REQUIRED


@dataclass
class Spec:
    name: str
    index: int
    args: list  # [(kind, name)] in the op table's order; kinds as kite._C.ops() gives them
    defaults: dict
    out: dict  # result name -> allocation expression
    extra: dict = field(default_factory=dict)  # name -> (schema type, default)
    scalars: dict = field(default_factory=dict)  # name -> dtype of the [B] tensor a number makes

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
    for index, (name, args, _op, family) in enumerate(_C.ops()):
        row = OPS.get(name, FAMILY_ROWS.get((family, tuple(k for k, _ in args))))
        if row is None:
            raise ImportError(f"kite: op {name} of kite._C has no row in kite/_table.py")
        required = set(row.get("required", ()))
        args = [(k.upper() if n in required else k, n) for k, n in args]
        s = Spec(name, index, args, dict(row.get("defaults", {})), dict(row.get("out", {})),
                 dict(row.get("extra", {})), dict(row.get("scalars", {})))
        names = {n for _, n in s.args}
        for n in list(s.defaults) + list(s.out) + list(s.scalars):
            if n not in names:
                raise ImportError(f"kite: _table.py row {name} names {n}, not an argument")
        for n, dt in s.scalars.items():
            if dict((a, k) for k, a in s.args)[n] != "t" or dt not in ("float32", "int32"):
                raise ImportError(f"kite: _table.py row {name}: scalars takes optional input "
                                  f"tensors of float32 or int32, not {n} ({dt})")
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


# The dtypes kite takes, by their torch / numpy names (kite_module.c's table).
DTYPE_NAMES = ("float32", "float16", "bfloat16", "float64", "int32", "int64", "int8", "uint8",
               "int16", "bool", "float8_e4m3fn")


def _batch_tensor(spec):
    """The first tensor argument: the one a number given for a scalars argument is broadcast
    over (its first dim) and placed beside (its device)."""
    return next(n for k, n in spec.args if k in "TW")


def source_ops(spec):
    """kite.ops.<op>(params..., *, out=None[, lse=None]) -> result(s).

    Numbers given for the row's scalars become [B] tensors first; then the results are
    allocated. A failure of either (an argument of the wrong type, a rank too small for the
    result's shape) is reworded by _bad, which names the op and the argument; kite's own
    exceptions pass through."""
    params = spec.params
    sig = _signature(spec, params)
    res, opt = spec.results, spec.optional_results
    kw = []
    if res:
        kw.append("out=None")
    kw += [f"{n}=None" for n in opt]
    head = ", ".join(sig + (["*"] + kw if kw else []))
    src = f"def {spec.name}({head}):\n    try:\n"
    body = ""
    first = _batch_tensor(spec)
    for n, dt in spec.scalars.items():
        body += f"        {n} = scalar({first}, {n}, {dt!r}, {spec.name + ': ' + n!r})\n"
    for n, (t, _) in spec.extra.items():
        if t == "str":  # a dtype name: one of kite's, not any the array library has
            body += f"        if {n} not in {DTYPE_NAMES!r}:\n            raise ValueError\n"
    if len(res) == 1:
        body += f"        {res[0]} = {spec.out[res[0]]} if out is None else out\n"
    elif res:
        body += "        if out is None:\n"
        for n in res:
            body += f"            {n} = {spec.out[n]}\n"
        body += "        elif not isinstance(out, (tuple, list)):\n            raise TypeError\n"
        body += f"        else:\n            {', '.join(res)} = out\n"
    for n in opt:
        body += f"        if {n} is True:\n            {n} = {spec.out[n]}\n"
    if body:
        names = [n for _, n in params] + list(spec.extra)
        src += body
        src += "    except _Error:\n        raise\n"
        src += "    except Exception as e:\n"
        src += f"        _bad({spec.index}, e, {'out' if res else 'None'}, {', '.join(names)})\n"
    else:
        src = f"def {spec.name}({head}):\n"
    src += _call_line(spec, "    ")
    ret = ", ".join(res)
    if opt:
        src += f"    if {' or '.join(f'{n} is not None' for n in opt)}:\n"
        src += f"        return ({ret}{', ' if ret else ''}{', '.join(opt)})\n"
    if len(res) > 1:
        ret = f"({ret})"
    src += f"    return {ret or 'None'}\n"
    return src


_TENSOR_KINDS = {"T": "a tensor", "W": "a tensor", "t": "a tensor or None", "w": "a tensor or None"}


def _tensor_like(v):
    return hasattr(v, "__dlpack__") or type(v).__module__.startswith("torch")


def _type_error(spec, values, out):
    """(argument name, message[, False]) for the first argument of the wrong type (False: of
    the right type but a value that cannot be), or None."""
    import numbers
    names = [(k, n) for k, n in spec.params] + [("x" + t, n) for n, (t, _) in spec.extra.items()]
    for (k, n), v in zip(names, values):
        if k in _TENSOR_KINDS:
            if v is None and k in "tw":
                continue
            if n in spec.scalars and isinstance(v, numbers.Number):
                continue
            if v is None:
                return n, "a tensor is required, got None"
            if not _tensor_like(v):
                what = "a tensor (torch, numpy or another DLPack producer)"
                if n in spec.scalars:
                    what = "a number, " + what
                return n, f"expected {what}{' or None' if k in 'tw' else ''}, got " \
                          f"{type(v).__name__}"
        elif k == "f":
            if isinstance(v, (str, bytes)) or not (hasattr(v, "__float__") or
                                                   hasattr(v, "__index__")):
                return n, f"expected a number, got {type(v).__name__}"
        elif k in ("i", "u", "xint"):
            if not hasattr(v, "__index__"):
                return n, f"expected an integer, got {type(v).__name__}"
        elif k == "xstr":
            if not isinstance(v, str):
                return n, f"expected a dtype name (a str), got {type(v).__name__}"
            if v not in DTYPE_NAMES:
                return n, f"{v!r} is not a dtype kite takes ({', '.join(DTYPE_NAMES)})", False
    res = spec.results
    if out is not None and len(res) > 1 and (not isinstance(out, (tuple, list)) or
                                             len(out) != len(res)):
        return "out", (f"expected a tuple of {len(res)} tensors ({', '.join(res)}), got "
                       f"{type(out).__name__}")
    return None


def bad_arguments(spec, exc, out, values, type_error, invalid):
    """The exception that replaces exc, raised while kite.ops.<op> converted its arguments or
    allocated its results: type_error naming the argument of the wrong type, else invalid
    naming the op and the shapes the results were to be sized from, else exc itself (out of
    memory, ...)."""
    found = _type_error(spec, values, out)
    if found:
        return (type_error if len(found) == 2 else invalid)(f"{spec.name}: {found[0]}: {found[1]}")
    names = [(k, n) for k, n in spec.params] + [("x" + t, n) for n, (t, _) in spec.extra.items()]
    exprs = [spec.out[n] for n in spec.results + spec.optional_results]
    for (k, n), v in zip(names, values):
        if (k in ("i", "xint") and v < 0 and
                any(re.search(rf"\b{n}\b", e) for e in exprs)):
            return invalid(f"{spec.name}: {n}: {v} is negative (it is a size of a result)")
    if isinstance(exc, (AttributeError, IndexError, TypeError, ValueError)) or (
            isinstance(exc, RuntimeError) and "memory" not in str(exc).lower()):
        names = [n for _, n in spec.params] + list(spec.extra)
        shapes = ", ".join(f"{n} {list(v.shape)}" for n, v in zip(names, values)
                           if hasattr(v, "shape"))
        exprs = "; ".join(f"{n} = {spec.out[n]}" for n in spec.results + spec.optional_results)
        return invalid(f"{spec.name}: cannot allocate the results ({exprs}) from {shapes}: "
                       f"{type(exc).__name__}: {exc}; the shapes kite.h gives are in "
                       f"help(kite.ops.{spec.name}), or pass out=")
    return exc


_LEGEND = ("like(x): a new tensor of x's shape and dtype on x's device; new(x, shape[, dtype]): "
           "a new tensor of that shape on x's device, of x's dtype unless given")


def doc_ops(spec, text):
    """The docstring of kite.ops.<op>: the Python signature, what it returns, the numbers it
    takes in place of tensors, then kite.h's text of the op (text, from kite/_docs.py)."""
    params = spec.params
    res, opt = spec.results, spec.optional_results
    kw = (["out=None"] if res else []) + [f"{n}=None" for n in opt]
    head = ", ".join(_signature(spec, params) + (["*"] + kw if kw else []))
    ret = "None" if not res else res[0] if len(res) == 1 else "(" + ", ".join(res) + ")"
    lines = [f"{spec.name}({head}) -> {ret}", ""]
    inplace = [n for k, n in spec.args if k in "Ww" and n not in spec.out]
    if len(res) == 1:
        lines.append(f"Returns {res[0]} = {spec.out[res[0]]}, or writes out= and returns it.")
    elif res:
        lines.append(f"Returns ({', '.join(res)}) = "
                     f"({', '.join(spec.out[n] for n in res)}), or writes out= (a tuple of "
                     f"{len(res)} tensors) and returns it.")
    for n in opt:
        lines.append(f"{n} (optional result) is computed when given a tensor to write, or True "
                     f"for {n} = {spec.out[n]}; the call then returns "
                     f"({', '.join(res + [n])}).")
    if inplace:
        lines.append(f"Updates {', '.join(inplace)} in place"
                     + ("; returns None." if not res else "."))
    if res or opt:
        lines.append(f"({_LEGEND}.)")
    for n, dt in spec.scalars.items():
        kind = "an int" if dt == "int32" else "a float"
        lines.append(f"{n}: a [B] tensor ({dt}), None, or {kind} for every row (made into a "
                     f"[B] {dt} tensor on the device of {_batch_tensor(spec)}, B its first dim).")
    for n, (t, d) in spec.extra.items():
        lines.append(f"{n} ({t}): Python only, for the results' allocation.")
    lines += ["", "Arguments in kite.h's order; None where kite.h says NULL; an option struct "
              "of kite.h (kite_attn_opts, kite_ce_opts, kite_sampling_params, ...) is given as "
              "its fields. Errors raise kite.InvalidArgument (a ValueError; "
              "kite.ArgumentTypeError, also a TypeError, for an argument of the wrong type) "
              "naming the op and the argument."]
    import textwrap
    wrapped = lines[:1] + [textwrap.fill(ln, 100, subsequent_indent="  ") if ln else ln
                           for ln in lines[1:]]
    return "\n".join(wrapped + ["", "kite.h:", "", text])


def doc_torch(spec, text):
    """The docstring of torch.ops.kite.<op>: its schemas, then kite.h's text of the op."""
    lines = [f"torch.ops.kite.{schema_functional(spec)}"]
    if spec.results or spec.optional_results:
        lines.append(f"torch.ops.kite.{schema_out(spec)}")
    lines += ["", "kite.h:", "", text]
    return "\n".join(lines)


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
