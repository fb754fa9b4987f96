#!/usr/bin/env python3
"""Writes python/kite/_docs.py: the text of kite.h that documents each op function, for the
docstrings of kite.ops.<op> and torch.ops.kite.<op> (the wheel does not ship kite.h).

    python3 scripts/gen_py_docs.py          # rewrites python/kite/_docs.py
    python3 scripts/gen_py_docs.py --check  # exits 1 when _docs.py is not what kite.h gives

For each op function of include/kite/ops.def that the Python extension binds (every row without
a kite_comm argument) the text is, in kite.h's order:
- the section comment the function sits in ("--- Norms over the last dim ---" and its body),
  when it has a body;
- each kite type the function's parameters use (option structs, enums), with the comment just
  above its typedef, and the types those use in turn;
- the comment just above the function's declaration (shared by a group of declarations that
  follow one comment);
- the C declaration itself.
python/tests/test_docs.py fails when _docs.py is stale.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KITE_H = os.path.join(ROOT, "include", "kite", "kite.h")
OPS_DEF = os.path.join(ROOT, "include", "kite", "ops.def")
OUT = os.path.join(ROOT, "python", "kite", "_docs.py")

# Types whose definition tells a Python caller nothing (the ctx, the status, the op enum built
# from ops.def, the communicator); kite_op gets a note instead.
SKIP_TYPES = {"kite_ctx", "kite_status", "kite_op", "kite_comm"}
KITE_OP_NOTE = ("kite_op (act): an op id, the index of the op's name in kite._C.op_names() "
                "(kite._C.op_names().index(\"silu\")).")


def bound_ops(ops_def):
    """Names of the op functions of ops.def in table order, without the ones that take a
    kite_comm (the Python extension does not bind those)."""
    rows = list(re.finditer(r"^KITE_OP\(\s*\w+\s*,\s*(\w+)\s*,|^KITE_FN\(\s*(\w+)\s*,", ops_def,
                            re.M))
    names = []
    for i, m in enumerate(rows):
        end = rows[i + 1].start() if i + 1 < len(rows) else len(ops_def)
        if "KITE_S(COMM" not in ops_def[m.start():end]:
            names.append(m.group(1) or m.group(2))
    return names


def items(header):
    """kite.h as a list of (kind, text, name): kind comment, decl (a KITE_API declaration, name
    the function), typedef (name the type), blank or other."""
    lines = header.split("\n")
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        s = line.strip()
        if not s:
            out.append(("blank", "", None))
            i += 1
        elif s.startswith("/*"):
            j = i
            while "*/" not in lines[j]:
                j += 1
            out.append(("comment", "\n".join(lines[i:j + 1]), None))
            i = j + 1
        elif s.startswith("KITE_API"):
            j = i
            while not lines[j].rstrip().endswith(";"):
                j += 1
            text = "\n".join(lines[i:j + 1])
            m = re.search(r"(\w+)\s*\(", text)
            out.append(("decl", text, m.group(1)))
            i = j + 1
        elif s.startswith("typedef"):
            j, depth = i, 0
            while True:
                depth += lines[j].count("{") - lines[j].count("}")
                if depth == 0 and lines[j].rstrip().endswith(";"):
                    break
                j += 1
            text = "\n".join(lines[i:j + 1])
            out.append(("typedef", text, re.search(r"(\w+)\s*;\s*$", text).group(1)))
            i = j + 1
        else:
            out.append(("other", line, None))
            i += 1
    return out


def is_section(text):
    return re.match(r"/\* -{3}", text) is not None


def comment_text(text, section=False):
    """The words of a C comment, without its frame; a section comment's rules dropped and its
    title line kept without dashes."""
    lines = text.split("\n")
    out = []
    for k, line in enumerate(lines):
        s = line.strip()
        if k == 0:
            s = s[2:]
        if s.endswith("*/"):
            s = s[:-2].rstrip()
        if k > 0:
            if s.startswith("* "):
                s = s[2:]
            elif s.startswith("*"):
                s = s[1:]
        if section and re.fullmatch(r"\s*-*\s*", s):
            continue
        if section and s.lstrip().startswith("---"):
            s = s.strip().strip("-").strip()
        out.append(s.rstrip() if k else s.strip())
    while out and not out[0]:
        out.pop(0)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


def comment_above(its, i):
    """The index of the comment that documents item i: the one just above it, across the
    declarations and typedefs that directly follow that comment; None when a blank line or other
    text comes first."""
    j = i - 1
    while j >= 0 and its[j][0] in ("decl", "typedef"):
        j -= 1
    return j if j >= 0 and its[j][0] == "comment" else None


def section_of(its, i):
    for j in range(i - 1, -1, -1):
        if its[j][0] == "comment" and is_section(its[j][1]):
            return j
    return None


def section_has_body(text):
    return len(comment_text(text, section=True).split("\n")) > 1


def doc_for(its, typedefs, name):
    idx = next((i for i, it in enumerate(its) if it[0] == "decl" and it[2] == "kite_" + name),
               None)
    if idx is None:
        raise SystemExit(f"gen_py_docs: kite_{name} of ops.def is not declared in kite.h")
    decl = its[idx][1]
    picked = set()
    sec = section_of(its, idx)
    if sec is not None and section_has_body(its[sec][1]):
        picked.add(sec)
    own = comment_above(its, idx)
    if own is not None:
        picked.add(own)
    params = decl[decl.index("("):]
    notes = []
    todo = [t for t in re.findall(r"\bkite_\w+\b", params)]
    if "kite_op" in todo:
        notes.append(KITE_OP_NOTE)
    seen = set()
    while todo:
        t = todo.pop(0)
        if t in seen or t in SKIP_TYPES or t not in typedefs:
            continue
        seen.add(t)
        ti = typedefs[t]
        picked.add(ti)
        c = comment_above(its, ti)
        if c is not None and (not is_section(its[c][1]) or section_has_body(its[c][1])):
            picked.add(c)
        body = its[ti][1]
        todo += [u for u in re.findall(r"\bkite_\w+\b", body) if u != t]
    parts = []
    for i in sorted(picked):
        kind, text, _ = its[i]
        if kind == "comment":
            parts.append(comment_text(text, section=is_section(text)))
        else:
            parts.append(text)
    parts += notes
    c = "C: " + re.sub(r"\s+", " ", decl[len("KITE_API "):]).replace("( ", "(")
    lines = [""]
    for k, piece in enumerate(c.split(", ")):  # wrapped at 100 columns between parameters
        piece += ", " if k < c.count(", ") else ""
        if lines[-1] and len(lines[-1] + piece.rstrip()) > 100:
            lines[-1] = lines[-1].rstrip()
            lines.append("    ")
        lines[-1] += piece
    parts.append("\n".join(lines))
    return parts


def generate(header, ops_def):
    its = items(header)
    typedefs = {it[2]: i for i, it in enumerate(its) if it[0] == "typedef"}
    out = ['"""The documentation of each op function in include/kite/kite.h, for the docstrings',
           "of kite.ops.<op> and torch.ops.kite.<op>. Generated by scripts/gen_py_docs.py from",
           'kite.h; do not edit (python/tests/test_docs.py fails when it is stale). A text that',
           'several ops share (a section, an option struct) is written once in _PARTS."""', "",
           "_PARTS = ["]
    parts, index = [], {}
    for name in bound_ops(ops_def):
        ids = []
        for part in doc_for(its, typedefs, name):
            if part not in parts:
                parts.append(part)
            ids.append(parts.index(part))
        index[name] = ids
    for part in parts:
        out.append("    (")
        lines = part.split("\n")
        for k, line in enumerate(lines):
            out.append(f"        {(line + chr(10) if k + 1 < len(lines) else line)!r}")
        out.append("    ),")
    out.append("]")
    out.append("")
    out.append("# op -> its parts, in order")
    out.append("_INDEX = {")
    for name, ids in index.items():
        out.append(f"    {name!r}: {tuple(ids)!r},")
    out.append("}")
    out.append("")
    out.append('DOCS = {name: "\\n\\n".join(_PARTS[i] for i in ids) for name, ids in _INDEX.items()}')
    return "\n".join(out) + "\n"


def main(argv):
    with open(KITE_H) as f:
        header = f.read()
    with open(OPS_DEF) as f:
        ops_def = f.read()
    text = generate(header, ops_def)
    if "--check" in argv:
        with open(OUT) as f:
            if f.read() != text:
                print("gen_py_docs: python/kite/_docs.py is stale: run python3 "
                      "scripts/gen_py_docs.py", file=sys.stderr)
                return 1
        return 0
    with open(OUT, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
