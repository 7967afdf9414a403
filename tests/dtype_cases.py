"""Mixed-dtype cases whose result dtypes mge must share with MegEngine 1.13.

Each case is a small function of the framework's module (``mge`` or ``megengine``); running it gives
the result's dtype name, or ``"error:<ExceptionType>"`` when the framework refuses the mix.  The
table of MegEngine's answers lives in ``tests/data/megengine_1_13_dtypes.json`` and is made by
running this file under MegEngine 1.13::

    python tests/dtype_cases.py --fw megengine > tests/data/megengine_1_13_dtypes.json

``tests/test_dtype_table.py`` runs the same cases on mge and compares.  A deliberate difference is
listed there (``DIFFERENCES``) and in ``docs/differences.rst``.
"""
import argparse
import importlib
import itertools
import json
import sys

import numpy as np

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "float16", "float32"]
SCALARS = {"int": 3, "float": 2.5, "bool": True}
_VALUES = [1, 2, 3, 4]


def _tensor(fw, dtype):
    return fw.tensor(np.array(_VALUES).astype(dtype), dtype=dtype)


def _binary_ops(F):
    return {
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "truediv": lambda a, b: a / b,
        "floordiv": lambda a, b: a // b,
        "mod": lambda a, b: a % b,
        "pow": lambda a, b: a ** b,
        "maximum": lambda a, b: F.maximum(a, b),
        "eq": lambda a, b: a == b,
        "lt": lambda a, b: a < b,
    }


def _unary_ops(F):
    return {
        "neg": lambda a: -a,
        "abs": F.abs,
        "exp": F.exp,
        "sqrt": F.sqrt,
        "floor": F.floor,
        "relu": F.relu,
        "sum": F.sum,
        "mean": F.mean,
        "prod": F.prod,
        "max": F.max,
        "argmax": F.argmax,
        "cumsum": lambda a: F.cumsum(a, 0),
        "clip_int": lambda a: F.clip(a, 1, 3),
        "clip_float": lambda a: F.clip(a, 0.5, 3.5),
    }


def cases(fw):
    """``{name: thunk}``: every case, as a function of no arguments giving the result tensor."""
    F = fw.functional
    out = {}
    for name, op in _binary_ops(F).items():
        for da, db in itertools.product(DTYPES, repeat=2):
            out[f"{name}({da},{db})"] = (lambda op=op, da=da, db=db:
                                         op(_tensor(fw, da), _tensor(fw, db)))
        for da, (sname, s) in itertools.product(DTYPES, SCALARS.items()):
            out[f"{name}({da},{sname})"] = lambda op=op, da=da, s=s: op(_tensor(fw, da), s)
            out[f"{name}({sname},{da})"] = lambda op=op, da=da, s=s: op(s, _tensor(fw, da))
    for name, op in _unary_ops(F).items():
        for da in DTYPES:
            out[f"{name}({da})"] = lambda op=op, da=da: op(_tensor(fw, da))
    for da, db in itertools.product(DTYPES, repeat=2):
        mask = lambda: fw.tensor(np.array([True, False, True, False]))
        out[f"where({da},{db})"] = (lambda da=da, db=db:
                                    F.where(mask(), _tensor(fw, da), _tensor(fw, db)))
        out[f"concat({da},{db})"] = (lambda da=da, db=db:
                                     F.concat([_tensor(fw, da), _tensor(fw, db)]))
        out[f"stack({da},{db})"] = (lambda da=da, db=db:
                                    F.stack([_tensor(fw, da), _tensor(fw, db)]))
        out[f"matmul({da},{db})"] = (lambda da=da, db=db: F.matmul(
            fw.tensor(np.ones((2, 2)).astype(da), dtype=da),
            fw.tensor(np.ones((2, 2)).astype(db), dtype=db)))
    return out


def run(fw):
    """``{name: dtype name or "error:<type>"}`` for every case on framework ``fw``."""
    table = {}
    for name, thunk in cases(fw).items():
        try:
            y = thunk()
            y.numpy()  # errors of asynchronous kernels count as refusals too
            table[name] = np.dtype(y.dtype).name
        except Exception as e:  # the table records refusals
            table[name] = f"error:{type(e).__name__}"
    return table


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fw", default="mge", help="the framework module to import (mge or megengine)")
    args = p.parse_args(argv)
    fw = importlib.import_module(args.fw)
    json.dump(run(fw), sys.stdout, indent=0, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
