"""mge.autodiff.Function: user-defined gradients (MegEngine 1.13's behaviour and messages)."""
import numpy as np
import pytest

import mge.functional as F
from mge.autodiff import Function, GradManager
from helpers import close, float_tensor as t


class Sigmoid(Function):
    def forward(self, x):
        y = 1 / (1 + F.exp(-x))
        self.y = y
        return y

    def backward(self, dy):
        y = self.y
        return dy * y * (1 - y)


class StraightThrough(Function):
    """round() forward, identity backward: the gradient is the custom one, not round's."""

    def forward(self, x):
        return F.round(x)

    def backward(self, dy):
        return dy


class Mul(Function):
    def forward(self, a, b):
        self.a, self.b = a, b
        return a * b

    def backward(self, dy):
        return dy * self.b, None        # no gradient for b


class SumProd(Function):
    seen = []

    def forward(self, a, b):
        self.a, self.b = a, b
        return a + b, a * b

    def backward(self, d_sum, d_prod):
        SumProd.seen.append((d_sum is None, d_prod is None))
        ga = gb = None
        if d_sum is not None:
            ga, gb = d_sum, d_sum
        if d_prod is not None:
            pa, pb = d_prod * self.b, d_prod * self.a
            ga = pa if ga is None else ga + pa
            gb = pb if gb is None else gb + pb
        return ga, gb


def test_custom_gradient_replaces_the_ops_gradient():
    x = t([0.0, 2.0])
    gm = GradManager().attach(x)
    with gm:
        gm.backward(Sigmoid()(x).sum())
    s = 1 / (1 + np.exp(-np.array([0.0, 2.0])))
    close(x.grad, s * (1 - s))
    x = t([0.4, 1.6])
    gm = GradManager().attach(x)
    with gm:
        gm.backward(StraightThrough()(x).sum())
    close(x.grad, [1.0, 1.0])


def test_outside_a_recording_it_is_just_forward():
    close(StraightThrough()(t([0.4, 1.6])), [0.0, 2.0])
    out = SumProd()(t([1.0]), t([2.0]))
    assert isinstance(out, tuple) and len(out) == 2


def test_none_gradient_for_an_input():
    a, b = t([1.0, 2.0]), t([3.0, 4.0])
    gm = GradManager().attach([a, b])
    with gm:
        gm.backward(Mul()(a, b).sum())
    close(a.grad, [3.0, 4.0])
    assert b.grad is None


def test_outputs_without_gradient_get_none():
    a, b = t([1.0, 2.0]), t([3.0, 4.0])
    gm = GradManager().attach([a, b])
    SumProd.seen.clear()
    with gm:
        s, p = SumProd()(a, b)
        gm.backward(s.sum())
    assert SumProd.seen == [(False, True)]
    close(a.grad, [1.0, 1.0])
    close(b.grad, [1.0, 1.0])
    with gm:
        s, p = SumProd()(a, b)
        gm.backward(p.sum())
    assert SumProd.seen[-1] == (True, False)
    close(a.grad, [1.0 + 3.0, 1.0 + 4.0])
    close(b.grad, [1.0 + 1.0, 1.0 + 2.0])


def test_non_tensor_inputs_are_megengines_type_error():
    with pytest.raises(TypeError, match=r"^op Function expect type Tensor as inputs, got <class 'float'>$"):
        Mul()(t([1.0]), 2.0)


def test_wrong_number_of_gradients_is_a_clear_error():
    class Bad(Function):
        def forward(self, a):
            return a * 2

        def backward(self, dy):
            return dy, dy

    a = t([1.0, 2.0])
    gm = GradManager().attach(a)
    with gm:
        with pytest.raises(ValueError, match="Bad.backward returned 2 gradients for 1 inputs"):
            gm.backward(Bad()(a).sum())
    assert a.grad is None


def test_forward_ops_are_not_recorded():
    class Counting(Function):
        def forward(self, a):
            return F.exp(a) * 2

        def backward(self, dy):
            return dy * 7

    a = t([1.0, 2.0])
    gm = GradManager().attach(a)
    with gm:
        y = Counting()(a)
        assert gm._grad._impl.is_attached_to(y)
        gm.backward(y.sum())
    close(a.grad, [7.0, 7.0])


def test_input_updated_in_place_inside_forward():
    # checked against MegEngine 1.13: the gradient goes to the attached (original) value
    class Inplace(Function):
        def forward(self, x):
            x += 1
            return x * 2

        def backward(self, dy):
            return dy * 5

    x = t([1.0, 2.0])
    gm = GradManager().attach(x)
    with gm:
        gm.backward(Inplace()(x).sum())
    close(x.grad, [5.0, 5.0])
    close(x, [2.0, 3.0])


def test_second_order_through_a_custom_backward():
    class Cube(Function):
        def forward(self, x):
            self.x = x
            return x ** 3

        def backward(self, dy):
            return dy * 3 * self.x ** 2

    x = t([1.0, 2.0])
    g1, g2 = GradManager().attach(x), GradManager().attach(x)
    with g1:
        with g2:
            g2.backward(Cube()(x).sum())
        g = x.grad
        close(g, [3.0, 12.0])
        x.grad = None
        g1.backward(g.sum())
    close(x.grad, [6.0, 12.0])


def test_function_inside_a_group():
    a, b = t([1.0, 2.0]), t([3.0, 4.0])
    ga, gb = GradManager().attach(a), GradManager().attach(b)
    with ga | gb:
        y = Mul()(a, b).sum()
        ga.backward(y)
        gb.backward(y)
    close(a.grad, [3.0, 4.0])
    assert b.grad is None                # Mul.backward gives b nothing


def test_function_pickles():
    import pickle

    f = Sigmoid()
    f.extra = 3
    g = pickle.loads(pickle.dumps(f))
    assert g.extra == 3
