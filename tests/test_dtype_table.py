"""Result dtypes of mixed-dtype ops against MegEngine 1.13's, case by case.

``tests/dtype_cases.py`` holds the cases (elementwise ops on every pair of dtypes and with Python
numbers, unary ops and reductions, ``where``, ``concat``, ``stack``, ``matmul``);
``tests/data/megengine_1_13_dtypes.json`` holds MegEngine 1.13's answers, recorded by running that
file under MegEngine.  mge must give the same dtype, or refuse where MegEngine refuses (mge raises
``TypeError`` where MegEngine raises ``RuntimeError``), except for the deliberate differences
below, which ``docs/differences.rst`` lists.
"""
import json
import os

import pytest

import mge

from dtype_cases import DTYPES, run

_TABLE = os.path.join(os.path.dirname(__file__), "data", "megengine_1_13_dtypes.json")

_NARROW_INTS = ("int8", "int16", "uint8")
# Deliberate differences: mge computes what MegEngine refuses.
DIFFERENCES = {
    # Integer matrix products accumulate in int32 for every integer dtype (MegEngine: int8 only).
    **{f"matmul({a},{b})": "int32" for a in ("int8", "int16", "int32") for b in ("int8", "int16", "int32")
       if (a, b) != ("int8", "int8")},
    "matmul(uint8,uint8)": "int32",
    # Bool tensors compute like numpy's bools where MegEngine has no bool kernel.
    "cumsum(bool)": "int32",
    "exp(bool)": "float32",
    "sqrt(bool)": "float32",
    "truediv(bool,bool)": "float32",
    "pow(bool,bool)": "float32",
    "maximum(bool,bool)": "bool",
    "where(bool,bool)": "bool",
}


@pytest.fixture(scope="module")
def tables():
    with open(_TABLE) as f:
        megengine = json.load(f)
    return megengine, run(mge)


def _agrees(theirs, ours):
    if theirs.startswith("error:"):
        return ours.startswith("error:")  # both refuse (the exception types differ, see above)
    return ours == theirs


def test_every_case_has_megengine_answer(tables):
    megengine, ours = tables
    assert set(ours) == set(megengine), "tests/dtype_cases.py changed: record the table again"


@pytest.mark.parametrize("op", ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "maximum",
                                "eq", "lt", "where", "concat", "stack", "matmul", "unary"])
def test_dtypes_match_megengine(tables, op):
    megengine, ours = tables
    names = [k for k in megengine if k.split("(")[0] == op
             or (op == "unary" and k.count(",") == 0 and "(" in k)]
    assert names
    wrong = []
    for name in names:
        want = DIFFERENCES.get(name, megengine[name])
        if not _agrees(want, ours[name]):
            wrong.append(f"{name}: MegEngine {megengine[name]}, mge {ours[name]}")
    assert not wrong, "\n".join(wrong)


def test_the_listed_differences_are_still_differences(tables):
    megengine, _ = tables
    for name, ours in DIFFERENCES.items():
        assert megengine[name] != ours, f"{name} now agrees with MegEngine: drop it from DIFFERENCES"


def test_float16_meets_narrow_integers_in_float32_but_where_keeps_float16():
    # The two reported cases (issue 11 item 8), spelled out.
    import numpy as np
    import mge.functional as F
    h = mge.tensor(np.ones(3), dtype="float16")
    for d in _NARROW_INTS:
        assert (h + mge.tensor([1, 2, 3], dtype=d)).dtype == np.float32
    mask = mge.tensor([True, False, True])
    y = F.where(mask, h, mge.tensor([4, 5, 6], dtype="int32"))
    assert y.dtype == np.float16 and y.numpy().tolist() == [1.0, 5.0, 1.0]


def test_int8_products_accumulate_in_int32():
    import numpy as np
    import mge.functional as F
    a = np.full((3, 4), 100, dtype="int8")
    y = F.matmul(mge.tensor(a, dtype="int8"), mge.tensor(a.T.copy(), dtype="int8"))
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y.numpy(), a.astype("int32") @ a.T.astype("int32"))
