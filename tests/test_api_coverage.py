"""MegEngine 1.13's public API in mge: names, and the signatures of callables.

``tests/data/megengine_api.json`` was generated from the megengine==1.13.0 CPU wheel (MegEngine is
Apache-2.0; see the file's ``_about``): each module's public names with ``inspect.signature``'s text
of each callable.  The modules and names left out are those of mge's scope notes (quantization,
distributed, traced_module, XLA, vendor hardware), as ``api_coverage.py`` of the project's peer
tools leaves them out.

A signature matches when the parameters agree one by one in name, kind (positional-only,
positional-or-keyword, ``*args``, keyword-only, ``**kwargs``) and default; annotations and return
annotations are not compared.  Defaults compare by value where both are Python literals, a class or
module default (``<class 'megengine.logger.X'>``) by its name, anything else by its text.
"""
import ast
import importlib
import inspect
import json
import os
import re

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
EXCLUDED_MODULES = ("quantization", "distributed", "traced_module", "xla", "module.qat",
                    "module.quantized", "functional.quantized", "utils.network")
VENDOR = ("atlas", "cambricon", "tensorrt", "rocm", "magicmind", "cndev")
BAR = 90.0


def _api():
    with open(os.path.join(HERE, "data", "megengine_api.json")) as f:
        return json.load(f)


def _entries():
    """(module, name, signature text or None, mge module or None) of every counted name."""
    out = []
    for mod, names in sorted(_api().items()):
        if mod.startswith("_") or any(x in mod for x in EXCLUDED_MODULES):
            continue
        try:
            m = importlib.import_module("mge" + mod[len("megengine"):])
        except Exception:
            m = None
        for n, sig in names.items():
            if any(v in n.lower() for v in VENDOR) or n in ("distributed", "quantization",
                                                              "traced_module"):
                continue
            out.append((mod, n, sig, m))
    return out


_OBJ = re.compile(r"<(class|module|function) '([^']*)'[^>]*>")
_INST = re.compile(r"<([\w.]+) object at 0x[0-9a-fA-F]+>")


def _parse(text):
    """MegEngine's signature text -> [(name, kind, default text or None)]."""
    src = _OBJ.sub(lambda mt: repr(f"<{mt.group(1)} {mt.group(2).rsplit('.', 1)[-1]}>"), text)
    src = _INST.sub(lambda mt: repr(f"<object {mt.group(1).rsplit('.', 1)[-1]}>"), src)
    src = re.sub(r"<([A-Za-z_.]+): [^>]*>", r"\1", src)  # <Enum.X: 1> -> Enum.X
    fn = ast.parse(f"def f{src}: pass").body[0]
    a = fn.args
    out = []
    pos = a.posonlyargs + a.args
    defaults = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    for i, (p, d) in enumerate(zip(pos, defaults)):
        kind = "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD"
        out.append((p.arg, kind, None if d is None else ast.unparse(d)))
    if a.vararg:
        out.append((a.vararg.arg, "VAR_POSITIONAL", None))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((p.arg, "KEYWORD_ONLY", None if d is None else ast.unparse(d)))
    if a.kwarg:
        out.append((a.kwarg.arg, "VAR_KEYWORD", None))
    return out


def _default_text(v):
    if inspect.isclass(v):
        return repr(f"<class {v.__name__}>")
    if inspect.ismodule(v):
        return repr(f"<module {v.__name__.rsplit('.', 1)[-1]}>")
    if inspect.isfunction(v):
        return repr(f"<function {v.__name__}>")
    r = repr(v)
    if _INST.fullmatch(r):
        return repr(f"<object {type(v).__name__}>")
    return r


def _same_default(theirs, ours):
    if theirs == ours:
        return True
    try:
        return ast.literal_eval(theirs) == ast.literal_eval(ours)
    except (ValueError, SyntaxError, TypeError):
        return False


def _compare(text, obj):
    """None when ``obj``'s signature matches MegEngine's ``text``, else a description."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "no signature"
    ours = [(p.name, p.kind.name,
             None if p.default is inspect.Parameter.empty else _default_text(p.default))
            for p in sig.parameters.values()]
    theirs = _parse(text)
    if [(n, k) for n, k, _ in ours] != [(n, k) for n, k, _ in theirs]:
        return f"parameters {sig} != MegEngine's {text}"
    for (n, _, d1), (_, _, d2) in zip(theirs, ours):
        if (d1 is None) != (d2 is None) or (d1 is not None and not _same_default(d1, d2)):
            return f"default of {n}: {d2} != MegEngine's {d1}"
    return None


def _figures():
    have, sig_ok, missing, mismatches = 0, 0, [], []
    entries = _entries()
    for mod, n, text, m in entries:
        if m is None or not hasattr(m, n):
            missing.append(f"{mod}.{n}")
            continue
        have += 1
        obj = getattr(m, n)
        if isinstance(text, str) and text.startswith("(") and callable(obj):
            why = _compare(text, obj)
            if why is not None:
                mismatches.append(f"{mod}.{n}: {why}")
                continue
        sig_ok += 1
    return len(entries), have, sig_ok, missing, mismatches


def test_parse_signature_text():
    assert _parse("(a, b: int = 1, *args, c=None, **kw) -> int") == [
        ("a", "POSITIONAL_OR_KEYWORD", None), ("b", "POSITIONAL_OR_KEYWORD", "1"),
        ("args", "VAR_POSITIONAL", None), ("c", "KEYWORD_ONLY", "None"),
        ("kw", "VAR_KEYWORD", None)]
    assert _parse("(f, pickle_module=<module 'pickle' from '/x.py'>)")[1][2] == \
        repr("<module pickle>")
    assert _parse("(name=None, formatter=<class 'megengine.logger.F'>)")[1][2] == \
        repr("<class F>")


def test_compare_signatures():
    def f(a, b=1, *, c="x"):
        pass
    assert _compare("(a, b=1, *, c='x')", f) is None
    assert "default of b" in _compare("(a, b=2, *, c='x')", f)
    assert "parameters" in _compare("(a, b=1, c='x')", f)


def test_api_names_and_signatures():
    total, have, sig_ok, missing, mismatches = _figures()
    report = "\n".join(["missing:"] + missing + ["signature mismatches:"] + mismatches)
    print(report)
    names_pct = 100.0 * have / total
    sig_pct = 100.0 * sig_ok / total
    print(f"names {have}/{total} = {names_pct:.1f}%, with MegEngine's signature "
          f"{sig_ok}/{total} = {sig_pct:.1f}%")
    assert names_pct >= BAR, report
    assert sig_pct >= BAR, report


if __name__ == "__main__":
    t, h, s, miss, mis = _figures()
    print("\n".join(miss + mis))
    print(f"names {h}/{t}, signatures {s}/{t}")
