"""``mge.jit.trace``: traced calls give the eager results, bit for bit, call after call.

The first call of a traced function records its ops; later calls run the function's Python again,
match each op against the recording and answer with placeholders whose values come from compiled
programs.  Every test here compares a traced function with the same function run eagerly on the
same inputs (new input values on each call), checks that divergence is a ``TraceError`` that
leaves the runtime usable, and covers ``capture_as_const``, ``exclude_from_trace``/``is_tracing``,
reads inside a replay, kernel errors in a replay and the decorator forms.
"""
import gc
import weakref

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
from mge.autodiff import GradManager
from mge.core import AsyncError, UnusableTensorError
from mge.jit import TraceError, exclude_from_trace, is_tracing, trace
from mge.optimizer import SGD, Adam

from helpers import arr, check, exact_tensor, indices, mge_sync, raises_at_run

CALLS = 4  # calls of each traced function: one recording, then replays

@pytest.fixture(params=[False, True], ids=["imperative", "symbolic"])
def symbolic(request):
    return request.param


@pytest.fixture
def async0():
    saved = mge.config.async_level
    mge.config.async_level = 0
    yield
    mge.config.async_level = saved


def _flat(obj):
    """The tensors of a (nested) result, in order, and its structure with tensors as "T"."""
    out = []

    def walk(o):
        if isinstance(o, mge.Tensor):
            out.append(o)
            return "T"
        if isinstance(o, (list, tuple)):
            return (type(o).__name__, tuple(walk(x) for x in o))
        if isinstance(o, dict):
            return ("dict", tuple((k, walk(o[k])) for k in sorted(o)))
        return ("const", o)

    return walk(obj), out


def _same(got, want):
    """``got`` has ``want``'s structure, and each tensor its shape, dtype and bits."""
    g_tree, g = _flat(got)
    w_tree, w = _flat(want)
    assert g_tree == w_tree
    for a, b in zip(g, w):
        check(a, b.numpy())


def _traced_vs_eager(fn, make_arrays, symbolic, calls=CALLS):
    """``trace(fn)`` on ``calls`` sets of arrays (new values each call, same shapes) gives what
    ``fn`` gives eagerly; all calls after the first replay the first call's recording."""
    tf = trace(fn, symbolic=symbolic)
    recording = None
    for seed in range(calls):
        arrays = make_arrays(seed)
        got = tf(*[exact_tensor(a) for a in arrays])
        if recording is None:
            recording = tf.recording
            assert recording is not None and len(recording.ops) > 0
        assert tf.recording is recording  # a replay, not a new recording
        want = fn(*[exact_tensor(a) for a in arrays])
        _same(got, want)
    return tf


# -- 1. op families -------------------------------------------------------------------------------
def _pos(shape, seed):
    return np.abs(arr(shape, seed=seed)) + 0.5


def _ints(shape, seed, low=-20, high=20):
    return np.random.default_rng(seed).integers(low, high, shape).astype("int32")


ELEMWISE = {
    "unary": (lambda x: (F.exp(F.tanh(x)), F.abs(x), F.sqrt(F.abs(x)), F.log(F.abs(x) + 1),
                         -x, F.sigmoid(x), F.floor(x), F.sin(x)),
              lambda s: [arr((3, 5), seed=s)]),
    "binary": (lambda x, y: (x + y, x - y, x * y, x / y, F.maximum(x, y), F.minimum(x, y),
                             x ** 2, F.pow(F.abs(x), y / 10)),
               lambda s: [arr((3, 5), seed=s), _pos((3, 5), s + 100)]),
    "broadcast": (lambda x, y: (x + y, x * y - 1),
                  lambda s: [arr((4, 1, 3), seed=s), arr((5, 1), seed=s + 100)]),
    "python_scalars": (lambda x: (2 * x + 1.5, 1 - x, x / 3, 7.0 / (F.abs(x) + 1), x ** 3,
                                  (x * 0.5) - 0.25),
                       lambda s: [arr((2, 6), seed=s)]),
    "comparisons": (lambda x, y: (x > y, x <= 0.5, F.equal(x, y), x != 0, F.greater_equal(x, y),
                                  F.logical_and(x > 0, y > 0)),
                    lambda s: [np.round(arr((4, 4), seed=s)), np.round(arr((4, 4), seed=s + 9))]),
    "where_clip": (lambda x, y: (F.where(x > 0, x, y), F.clip(x, -1.0, 1.0), F.clip(y, lower=0.0),
                                 F.where(x > y, x * 2, y - 1)),
                   lambda s: [arr((3, 4), seed=s), arr((3, 4), seed=s + 1)]),
    "int32": (lambda a, b: (a + 1, a * b, a // 3, a % 7, F.abs(a), a > b, -a),
              lambda s: [_ints((3, 4), s), _ints((3, 4), s + 50, 1, 9)]),
    "float64": (lambda x: (x * 3 + 1, F.exp(x / 10)),
                lambda s: [arr((5,), "float64", seed=s)]),
    "mixed_dtypes": (lambda x, a: (x + a, a * 0.5, (a + 1).astype("float32") * x),
                     lambda s: [arr((3, 4), seed=s), _ints((3, 4), s)]),
}


@pytest.mark.parametrize("case", sorted(ELEMWISE))
def test_elemwise(case, symbolic):
    fn, make = ELEMWISE[case]
    _traced_vs_eager(fn, make, symbolic)


REDUCE = {
    "sum": lambda x: (F.sum(x), F.sum(x, axis=1), F.sum(x, axis=0, keepdims=True), x.sum()),
    "mean": lambda x: (F.mean(x), F.mean(x, axis=1, keepdims=True), x.mean(axis=0)),
    "max_min": lambda x: (F.max(x), F.max(x, axis=0), F.min(x, axis=1, keepdims=True), x.max()),
    "argmax": lambda x: (F.argmax(x), F.argmax(x, axis=1), F.argmin(x, axis=0, keepdims=True)),
    "chain": lambda x: (F.sum(x * x, axis=1) / F.max(F.abs(x)) + F.mean(x),),
}


@pytest.mark.parametrize("case", sorted(REDUCE))
def test_reductions(case, symbolic):
    _traced_vs_eager(REDUCE[case], lambda s: [arr((4, 6), seed=s)], symbolic)


MATMUL = {
    "matmul": (lambda a, b: F.matmul(a, b),
               lambda s: [arr((4, 5), seed=s), arr((5, 3), seed=s + 1)]),
    "batched": (lambda a, b: F.matmul(a, b),
                lambda s: [arr((2, 4, 5), seed=s), arr((2, 5, 3), seed=s + 1)]),
    "transposed": (lambda a, b: F.matmul(a, b, transpose_b=True) * 2,
                   lambda s: [arr((4, 5), seed=s), arr((3, 5), seed=s + 1)]),
    "linear": (lambda x, w, b: F.relu(F.linear(x, w, b)),
               lambda s: [arr((6, 5), seed=s), arr((3, 5), seed=s + 1), arr((3,), seed=s + 2)]),
}


@pytest.mark.parametrize("case", sorted(MATMUL))
def test_matmul(case, symbolic):
    fn, make = MATMUL[case]
    _traced_vs_eager(fn, make, symbolic)


def test_linear_with_captured_weights(symbolic):
    w = exact_tensor(arr((3, 5), seed=77))
    b = exact_tensor(arr((3,), seed=78))
    _traced_vs_eager(lambda x: F.linear(x, w, b) + 1, lambda s: [arr((6, 5), seed=s)], symbolic)


SHAPE = {
    "reshape": lambda x, y: (F.reshape(x, (6, 4)), x.reshape(-1), x.reshape(2, -1) + 1),
    "transpose": lambda x, y: (F.transpose(x, (1, 0, 2)), x.transpose(2, 0, 1), x.T),
    "concat_stack": lambda x, y: (F.concat([x, y], axis=0), F.concat([x, y * 2], axis=2),
                                  F.stack([x, y], axis=1)),
    "broadcast_expand": lambda x, y: (F.broadcast_to(x[:, :1], (2, 3, 4)), F.expand_dims(x, 0),
                                      F.expand_dims(y, (1, 3))),
    "squeeze_flatten": lambda x, y: (F.squeeze(F.expand_dims(x, 1), 1), F.flatten(x),
                                     F.flatten(y, 1), x.flatten()),
}


@pytest.mark.parametrize("case", sorted(SHAPE))
def test_shape_ops(case, symbolic):
    _traced_vs_eager(SHAPE[case], lambda s: [arr((2, 3, 4), seed=s), arr((2, 3, 4), seed=s + 1)],
                     symbolic)


def _get_slices(x, idx):
    return x[1:3], x[:, ::2], x[-1], x[1, 2:4], x[..., 0]


def _get_tensor_index(x, idx):
    return x[idx], x[:, idx], x[idx, 1:3]


def _get_mask(x, idx):
    return (x[x > 1.0],)


def _set_slice(x, idx):
    y = x * 1
    y[1:3] = x[0] * 2
    y[:, 0] = x[:, 4]
    return y


def _set_slice_scalar(x, idx):
    y = x * 1
    y[1:3] = 0.0
    return y


def _set_tensor_index(x, idx):
    y = x + 0
    y[idx] = x[0] * 10
    return y


def _set_add(x, idx):
    y = x - 1
    y[:, 1] += 5.0
    y[idx, 2] -= x[idx, 3]
    return y


INDEXING = [pytest.param(f, id=f.__name__[1:]) for f in (
    _get_slices, _get_tensor_index, _get_mask, _set_slice, _set_slice_scalar, _set_tensor_index,
    _set_add)]


@pytest.mark.parametrize("fn", INDEXING)
def test_indexing(fn, symbolic):
    def make(s):
        x = arr((5, 5), seed=s)
        idx = np.random.default_rng(s).permutation(5)[:2].astype("int32")  # a new index each call
        return [x, idx]

    _traced_vs_eager(fn, make, symbolic)


def test_indexing_one_hot_and_mask_of_another_count(symbolic):
    # the mask keeps another number of elements on each call
    def fn(x, idx):
        return F.indexing_one_hot(x, idx, 1), x[x > 0]

    def make(s):
        return [arr((4, 5), seed=s), np.random.default_rng(s).integers(0, 5, 4).astype("int32")]

    _traced_vs_eager(fn, make, symbolic)


def _conv_inputs(s):
    return [arr((2, 3, 8, 8), seed=s), arr((4, 3, 3, 3), seed=s + 1) * 0.2,
            arr((1, 4, 1, 1), seed=s + 2)]


NN = {
    "relu_softmax": (lambda x: (F.relu(x), F.nn.softmax(x, axis=1), F.nn.log_softmax(x, axis=1),
                                F.nn.softmax(x, axis=0)),
                     lambda s: [arr((4, 6), seed=s)]),
    "conv2d": (lambda x, w, b: (F.conv2d(x, w, b, stride=1, padding=1),
                                F.conv2d(x, w, stride=2)),
               _conv_inputs),
    "pooling": (lambda x: (F.max_pool2d(x, 2), F.avg_pool2d(x, 3, stride=2, padding=1),
                           F.max_pool2d(x, kernel_size=3, stride=1, padding=1)),
                lambda s: [arr((2, 3, 8, 8), seed=s)]),
    "conv_relu_pool": (lambda x, w, b: F.max_pool2d(F.relu(F.conv2d(x, w, b, padding=1)), 2),
                       _conv_inputs),
    "batch_norm_inference": (
        lambda x, m, v, w, b: F.nn.batch_norm(x, m, v, w, b, training=False),
        lambda s: [arr((2, 3, 4, 4), seed=s), arr((1, 3, 1, 1), seed=s + 1),
                   _pos((1, 3, 1, 1), s + 2), arr((1, 3, 1, 1), seed=s + 3),
                   arr((1, 3, 1, 1), seed=s + 4)]),
    "layer_norm": (lambda x, w, b: (F.nn.layer_norm(x, (6,), True, w, b),
                                    F.nn.layer_norm(x, (4, 6), False)),
                   lambda s: [arr((3, 4, 6), seed=s), arr((6,), seed=s + 1),
                              arr((6,), seed=s + 2)]),
    "dropout_eval": (lambda x: F.nn.dropout(x, 0.5, training=False) * 2,
                     lambda s: [arr((4, 6), seed=s)]),
    "cross_entropy": (lambda x, y: (F.nn.cross_entropy(x, y),
                                    F.nn.cross_entropy(x, y, reduction="none"),
                                    F.nn.cross_entropy(F.nn.softmax(x, 1), y, with_logits=False)),
                      lambda s: [arr((5, 4), seed=s),
                                 np.random.default_rng(s).integers(0, 4, 5).astype("int32")]),
}


@pytest.mark.parametrize("case", sorted(NN))
def test_nn(case, symbolic):
    fn, make = NN[case]
    _traced_vs_eager(fn, make, symbolic)


def test_modules_in_eval_mode(symbolic):
    mge.random.seed(3)
    net = M.Sequential(M.Conv2d(3, 4, 3, padding=1), M.BatchNorm2d(4), M.ReLU(),
                       M.MaxPool2d(2), M.Dropout(0.5))
    net.eval()
    _traced_vs_eager(lambda x: net(x), lambda s: [arr((2, 3, 6, 6), seed=s)], symbolic)


def test_in_place_on_a_tensor_made_inside(symbolic):
    def fn(x):
        y = x * 1
        y += 1
        y *= x
        y -= 0.5
        z = F.zeros((2, 3))
        z += y[:, :3]
        return y, z

    _traced_vs_eager(fn, lambda s: [arr((2, 4), seed=s)], symbolic)


def test_tensors_made_by_ops_inside(symbolic):
    def fn(x):
        return x * F.ones((4,)) + F.arange(4).astype("float32") + F.full((3, 1), 2.0)

    _traced_vs_eager(fn, lambda s: [arr((3, 4), seed=s)], symbolic)


def test_tensor_created_inside(symbolic):
    # docs/differences.rst: a tensor the function makes itself is read as it is now
    def fn(x):
        c = mge.tensor(np.arange(4, dtype="float32"))
        return x * c

    _traced_vs_eager(fn, lambda s: [arr((3, 4), seed=s)], symbolic)


def test_a_long_elementwise_chain(symbolic):
    # long enough for the fused float32 chains of the compiler, small arrays and large ones
    def fn(x, y):
        z = x
        for k in range(40):
            z = (z * 0.9 + y) - z / 3 if k % 2 else -z + 1.5 * y
        return z

    _traced_vs_eager(fn, lambda s: [arr((7, 9), seed=s), arr((7, 9), seed=s + 1)], symbolic)
    _traced_vs_eager(fn, lambda s: [arr((40, 30), seed=s), arr((40, 30), seed=s + 1)], symbolic)


# -- 2. training steps ----------------------------------------------------------------------------
def _mlp():
    return M.Sequential(M.Linear(8, 16), M.ReLU(), M.Linear(16, 3))


def _convnet(pool=M.MaxPool2d):
    return M.Sequential(M.Conv2d(3, 4, 3, padding=1), M.BatchNorm2d(4), M.ReLU(),
                        pool(2), M.Conv2d(4, 2, 3), M.BatchNorm2d(2), M.ReLU())


class _ConvClassifier(M.Module):
    def __init__(self, pool=M.MaxPool2d):
        super().__init__()
        self.body = _convnet(pool)
        self.head = M.Linear(2, 3)

    def forward(self, x):
        return self.head(F.flatten(F.mean(self.body(x), axis=(2, 3), keepdims=True), 1))


def _twin_models(build, seed):
    """Two models with the same initial weights (and buffers)."""
    a, b = build(), build()
    rng = np.random.RandomState(seed)
    for (na, pa), (nb, pb) in zip(a.named_parameters(), b.named_parameters()):
        assert na == nb
        v = (rng.randn(*pa.shape) * 0.3).astype("float32")
        pa._reset(mge.tensor(v))
        pb._reset(mge.tensor(v))
    return a, b


def _state(model):
    return {name: t.numpy() for name, t in model.named_tensors()}


def _make_step(model, opt_cls, opt_kwargs, scaler=None, autocast=False):
    gm = GradManager().attach(model.parameters())
    opt = opt_cls(model.parameters(), **opt_kwargs)

    def step(x, y):
        with gm:
            if autocast:
                with mge.amp.autocast():
                    logits = model(x)
            else:
                logits = model(x)
            loss = F.nn.cross_entropy(logits, y)
            if scaler is None:
                gm.backward(loss)
            else:
                scaler.backward(gm, loss)
        opt.step().clear_grad()
        return loss

    return step, opt


def _batch(kind, s):
    rng = np.random.RandomState(100 + s)
    shape = (6, 8) if kind == "mlp" else (4, 3, 8, 8)
    return (rng.randn(*shape).astype("float32"),
            rng.randint(0, 3, shape[0]).astype("int32"))


def _train_both(kind, opt_cls, opt_kwargs, symbolic, steps=5, scaler_kwargs=None, autocast=False,
                lr_schedule=None, without_host=False):
    build = {"mlp": _mlp, "conv_bn": _ConvClassifier,
             "conv_bn_avgpool": lambda: _ConvClassifier(M.AvgPool2d)}[kind]
    traced_model, eager_model = _twin_models(build, seed=7)
    traced_model.train()
    eager_model.train()
    scalers = [None, None] if scaler_kwargs is None else [mge.amp.GradScaler(**scaler_kwargs)
                                                         for _ in range(2)]
    t_step, t_opt = _make_step(traced_model, opt_cls, opt_kwargs, scalers[0], autocast)
    e_step, e_opt = _make_step(eager_model, opt_cls, opt_kwargs, scalers[1], autocast)
    t_step = trace(t_step, symbolic=symbolic, without_host=without_host)
    assert _state(traced_model).keys() == _state(eager_model).keys()
    for s in range(steps):
        if lr_schedule is not None:
            for opt in (t_opt, e_opt):
                opt.param_groups[0]["lr"] = lr_schedule(s)
        x, y = _batch(kind, s)
        lt = t_step(mge.tensor(x), mge.tensor(y))
        le = e_step(mge.tensor(x), mge.tensor(y))
        check(lt, le.numpy())
        st, se = _state(traced_model), _state(eager_model)
        for name in se:
            np.testing.assert_array_equal(st[name], se[name], err_msg=f"{name} after step {s}")
    assert len(t_step.recording.ops) > 0
    return traced_model, eager_model, t_step


@pytest.mark.parametrize("kind", ["mlp", "conv_bn"])
def test_training_sgd_momentum(kind, symbolic):
    traced_model, _, _ = _train_both(kind, SGD, dict(lr=0.05, momentum=0.9), symbolic)
    if kind == "conv_bn":  # the running statistics moved, identically in both (checked above)
        assert not np.array_equal(traced_model.body[1].running_var.numpy(), np.ones((1, 4, 1, 1)))


@pytest.mark.parametrize("kind", ["mlp", "conv_bn"])
def test_training_adam(kind, symbolic):
    _train_both(kind, Adam, dict(lr=0.01, weight_decay=1e-4), symbolic)


@pytest.mark.parametrize("kind", ["mlp", "conv_bn"])
@pytest.mark.parametrize("opt_cls, opt_kwargs", [(SGD, dict(lr=0.05, momentum=0.9)),
                                                 (Adam, dict(lr=0.01))], ids=["sgd", "adam"])
def test_training_without_host(kind, opt_cls, opt_kwargs, symbolic):
    # Later calls run only the compiled program: parameters, optimizer states and BatchNorm's
    # running statistics still take the values the function's in-place updates give them.
    _train_both(kind, opt_cls, opt_kwargs, symbolic, without_host=True)


def test_a_replayed_training_step_leaves_no_reference_cycles():
    # A replay's objects (its layer, its match, the tape's records) die with their last
    # reference, not at the next garbage collection: collecting them cost a traced MLP step
    # about 10% of its Python.
    model = _mlp()
    step, _ = _make_step(model, SGD, dict(lr=0.05))
    step = trace(step, symbolic=True)
    x, y = (mge.tensor(v) for v in _batch("mlp", 0))
    for _ in range(3):
        step(x, y).numpy()
    gc.collect()
    for _ in range(4):
        step(x, y).numpy()
    assert gc.collect() == 0



class _Box:
    pass


@pytest.mark.parametrize("ending", ["returns", "diverges"])
def test_placeholders_kept_in_reference_cycles_are_still_collected(ending):
    # A replay keeps its placeholders out of the cyclic collector while the call runs (a young
    # collection every few hundred ops cost a long chain a quarter of its time); those the
    # call's code keeps in a cycle go back to it, whether the call returns or fails.
    boxes = []
    diverge = []

    @trace(symbolic=True)
    def f(x):
        y = x * 2
        box = _Box()
        box.y, y.box = y, box  # a cycle through the placeholder
        boxes.append(weakref.ref(box))
        z = y + 1
        return z * 3 if diverge else z  # (another op than recorded: TraceError)

    x = mge.tensor(arr((3,)))
    f(x).numpy()
    gc.collect()
    boxes.clear()
    for _ in range(3):
        if ending == "returns":
            check(f(x), arr((3,)) * 2 + 1)
        else:
            diverge.append(True)
            with pytest.raises(TraceError):
                f(x)
            diverge.clear()
    gc.collect()
    assert len(boxes) == 3 and all(ref() is None for ref in boxes)
    check(f(x), arr((3,)) * 2 + 1)  # (and the trace still replays)

def test_without_host_skips_the_python_and_keeps_the_result_structure():
    calls = []

    @trace(without_host=True)
    def f(x, y):
        calls.append(1)
        return {"sum": x + y, "parts": [x * y, F.relu(x - y)]}

    for s in range(4):
        a, b = arr((3, 4), seed=s), arr((3, 4), seed=s + 9)
        out = f(mge.tensor(a), mge.tensor(b))
        assert set(out) == {"sum", "parts"} and len(out["parts"]) == 2
        check(out["sum"], a + b)
        check(out["parts"][0], a * b)
        check(out["parts"][1], np.maximum(a - b, 0))
    assert calls == [1]  # the Python ran once, when recorded


def test_training_conv_with_average_pooling(symbolic):
    _train_both("conv_bn_avgpool", SGD, dict(lr=0.05, momentum=0.9), symbolic, steps=3)


def test_average_pooling_backward():
    # the backward rule of average pooling reads dy in place of y when y is gone: the recording
    # and the replays must make the same choice
    w = mge.tensor(np.ones((1, 1, 4, 4), "float32"))
    gm = GradManager().attach([w])

    @trace
    def step(x):
        with gm:
            y = F.sum(F.avg_pool2d(x * w, 2))
            gm.backward(y)
        g = w.grad
        w.grad = None
        return y, g

    for k in range(4):
        x = mge.tensor(arr((1, 1, 4, 4), seed=k))
        y, g = step(x)
        check(y, F.sum(F.avg_pool2d(x, 2)).numpy())
        check(g, (x.numpy() * 0.25).astype("float32"))


def test_training_sgd_weight_decay_nesterov():
    _train_both("mlp", SGD, dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=1e-3), True)


def _has_float16(step):
    return any(np.dtype(d[1]) == np.float16 for d in step.recording.descs)


def test_training_under_autocast_with_grad_scaler(symbolic):
    if symbolic:  # a dynamic scale reads whether the gradients were finite: not inferable
        with pytest.raises(ValueError, match="symbolic=True.*CheckNonFinite"):
            _train_both("mlp", SGD, dict(lr=0.05, momentum=0.9), symbolic, steps=4,
                        scaler_kwargs=dict(init_scale=64.0), autocast=True)
        return
    _, _, step = _train_both("mlp", SGD, dict(lr=0.05, momentum=0.9), symbolic, steps=4,
                             scaler_kwargs=dict(init_scale=64.0), autocast=True)
    assert _has_float16(step)  # autocast was on in the recording


def test_training_conv_under_autocast(symbolic):
    _, _, step = _train_both("conv_bn", SGD, dict(lr=0.05, momentum=0.9), symbolic, steps=3,
                             scaler_kwargs=dict(init_scale=16.0, growth_interval=0),
                             autocast=True)
    assert _has_float16(step)


def test_training_with_a_growing_grad_scale():
    # growth_interval=2: the scale doubles after every second step, in both twins
    _train_both("mlp", SGD, dict(lr=0.05, momentum=0.9), False, steps=5,
                scaler_kwargs=dict(init_scale=4.0, growth_interval=2), autocast=True)


# -- 3. hyperparameters between calls -------------------------------------------------------------
@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_learning_rate_change_is_honoured(opt, symbolic):
    lrs = [0.1, 0.1, 0.02, 0.3, 0.0, 0.05]
    opt_cls, kwargs = (SGD, dict(lr=0.1, momentum=0.9)) if opt == "sgd" else (Adam, dict(lr=0.1))
    _train_both("mlp", opt_cls, kwargs, symbolic, steps=len(lrs), lr_schedule=lambda s: lrs[s])


def test_learning_rate_zero_freezes_the_weights():
    model = _mlp()
    step, opt = _make_step(model, SGD, dict(lr=0.1))
    step = trace(step)
    x, y = _batch("mlp", 0)
    for _ in range(2):
        step(mge.tensor(x), mge.tensor(y))
    opt.param_groups[0]["lr"] = 0.0
    before = _state(model)
    step(mge.tensor(x), mge.tensor(y))
    after = _state(model)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])


# -- 4. divergence --------------------------------------------------------------------------------
def _runtime_still_works():
    a = mge.tensor(np.array([1.0, 2.0, 3.0], "float32"))
    check(a * 2 + 1, np.array([3.0, 5.0, 7.0], "float32"))
    check(F.matmul(F.reshape(a, (1, 3)), F.reshape(a, (3, 1))), np.array([[14.0]], "float32"))
    assert not is_tracing()


def _diverge(fn, flag_values, match, symbolic=False, **trace_kwargs):
    """Calls ``trace(fn)(x)`` with ``FLAG["on"]`` set to each of ``flag_values`` in turn (a
    Python value the function reads, not an argument: arguments are part of the signature): the
    last call raises ``TraceError`` matching ``match``; plain ops work after it."""
    tf = trace(lambda x: fn(x, FLAG["on"]), symbolic=symbolic, **trace_kwargs)
    for k, flag in enumerate(flag_values[:-1]):
        FLAG["on"] = flag
        x = exact_tensor(arr((3, 4), seed=k))
        _same(tf(x), fn(x, flag))
    FLAG["on"] = flag_values[-1]
    with pytest.raises(TraceError, match=match):
        tf(exact_tensor(arr((3, 4), seed=99)))
    _runtime_still_works()
    return tf


FLAG = {"on": False, "k": 1.0}
LOG = []


def test_another_op_is_a_trace_error(symbolic):
    def fn(x, flag):
        y = x * 2
        return F.exp(y) if flag else F.log(F.abs(y))

    _diverge(fn, [True, True, False], r"diverged at op #\d+.*", symbolic)


def test_more_ops_is_a_trace_error(symbolic):
    def fn(x, flag):
        y = x + 1
        if flag:
            y = y * 3
        return y

    _diverge(fn, [False, False, True], r"more ops than it did when recorded", symbolic)


def test_fewer_ops_is_a_trace_error(symbolic):
    def fn(x, flag):
        y = x + 1
        z = y * 2
        if not flag:
            LOG.append(F.relu(y) * 3)  # ops at the end whose results are not returned
        return z

    _diverge(fn, [False, False, True], r"issued 2 ops where 4 were recorded \(next expected: "
             r"op #2 of the recording, Elemwise.relu", symbolic)
    LOG.clear()


def test_fewer_ops_with_another_output_is_a_trace_error(symbolic):
    def fn(x, flag):
        y = x + 1
        if not flag:
            y = F.relu(y) * 3
        return y

    _diverge(fn, [False, False, True], r"output 0 is not the value recorded as output 0", symbolic)


def test_another_number_of_outputs_is_a_trace_error(symbolic):
    def fn(x, flag):
        y = x + 1
        z = y * 2
        return (y, z) if not flag else (y, z, z)

    _diverge(fn, [False, True], r"returned .* where it returned .* when recorded", symbolic)


def test_another_output_structure_is_a_trace_error(symbolic):
    def fn(x, flag):
        y = x + 1
        z = y * 2
        return {"y": y, "z": z} if not flag else [y, z]

    _diverge(fn, [False, False, True], r"returned .* where it returned .* when recorded", symbolic)


def test_another_output_value_is_a_trace_error():
    def fn(x, flag):
        y = x + 1
        z = y * 2
        return z if not flag else y

    _diverge(fn, [False, True], r"output 0 is not the value recorded")


def test_another_input_is_a_trace_error():
    def fn(x, flag):
        y = x + 1
        z = x - 1
        return y * (z if not flag else y)

    _diverge(fn, [False, True], r"input 1 is not the tensor recorded")


@pytest.mark.parametrize("where", [
    "binary", "clip", "fill"])
def test_another_python_scalar(where, symbolic):
    # A Python scalar the function reads (not an argument) changes between calls: the replay
    # uses the new value (it is never a stale one).
    def fn(x, k):
        if where == "binary":
            return x * k
        if where == "clip":
            return F.clip(x, -k, k)
        return x + F.full(x.shape, k)

    tf = trace(lambda x: fn(x, FLAG["k"]), symbolic=symbolic)
    for k in [2.0, 2.0, 3.0, 0.5]:
        FLAG["k"] = k
        x = exact_tensor(arr((3, 4), seed=int(k * 2)))
        _same(tf(x), fn(x, k))


def test_the_trace_still_replays_after_a_trace_error(symbolic):
    def fn(x, flag):
        y = x * 2
        return F.exp(y) if flag else F.abs(y)

    tf = _diverge(fn, [True, True, False], "diverged", symbolic)
    FLAG["on"] = True
    for s in range(3):
        a = arr((3, 4), seed=s)
        check(tf(mge.tensor(a)), F.exp(mge.tensor(a) * 2).numpy())


def test_nested_traced_calls_are_a_trace_error():
    inner = trace(lambda x: x + 1)

    @trace
    def outer(x):
        return inner(x) * 2

    with pytest.raises(TraceError, match="do not nest"):
        outer(mge.tensor([1.0]))
    _runtime_still_works()


@pytest.mark.parametrize("change", ["shape", "dtype"])
def test_another_input_signature_records_a_new_trace(change, symbolic):
    fn = lambda x: (F.sum(x * 2, axis=0), x.reshape(-1) + 1)
    tf = trace(fn, symbolic=symbolic)
    first = exact_tensor(arr((3, 4)))
    other = exact_tensor(arr((5, 2), seed=1) if change == "shape" else arr((3, 4), "float64", 1))
    for k, x in enumerate([first, first, other, other, first, other]):
        x = exact_tensor(x.numpy() + k)
        _same(tf(x), fn(x))


def test_fixed_shapes_make_another_shape_a_trace_error(symbolic):
    tf = trace(lambda x: x * 2, symbolic=symbolic, symbolic_shape=False)
    check(tf(mge.tensor(arr((3, 4)))), arr((3, 4)) * 2)
    check(tf(mge.tensor(arr((3, 4), seed=1))), arr((3, 4), seed=1) * 2)
    with pytest.raises(TraceError, match=r"symbolic_shape=False.*\(5, 4\)"):
        tf(mge.tensor(arr((5, 4))))
    _runtime_still_works()
    check(tf(mge.tensor(arr((3, 4), seed=2))), arr((3, 4), seed=2) * 2)


# -- 5. capture_as_const --------------------------------------------------------------------------
def test_capture_as_const_replays(symbolic):
    w = exact_tensor(arr((3, 4), seed=50))
    b = exact_tensor(arr((4,), seed=51))
    _traced_vs_eager(lambda x: F.matmul(x, w) + b, lambda s: [arr((2, 3), seed=s)], symbolic)
    tf = trace(lambda x: F.matmul(x, w) + b, symbolic=symbolic, capture_as_const=True)
    for k in range(4):
        x = exact_tensor(arr((2, 3), seed=k))
        _same(tf(x), F.matmul(x, w) + b)


def test_capture_as_const_keeps_the_recorded_value(symbolic):
    w = mge.tensor(np.array([1.0, 2.0, 3.0], "float32"))
    tf = trace(lambda x: x * w + 1, symbolic=symbolic, capture_as_const=True)
    x = mge.tensor(np.array([1.0, 1.0, 1.0], "float32"))
    check(tf(x), np.array([2.0, 3.0, 4.0], "float32"))
    w._reset(mge.tensor(np.array([10.0, 20.0, 30.0], "float32")))
    check(tf(x), np.array([2.0, 3.0, 4.0], "float32"))
    w[:] = 0.0
    check(tf(x + 1), np.array([3.0, 5.0, 7.0], "float32"))
    check(w, np.zeros(3, "float32"))  # the captured tensor itself is changed


def test_without_capture_as_const_a_changed_capture_is_read_anew():
    w = mge.tensor(np.array([1.0, 2.0, 3.0], "float32"))
    tf = trace(lambda x: x * w + 1)
    x = mge.tensor(np.array([1.0, 1.0, 1.0], "float32"))
    check(tf(x), np.array([2.0, 3.0, 4.0], "float32"))
    check(tf(x), np.array([2.0, 3.0, 4.0], "float32"))
    w._reset(mge.tensor(np.array([10.0, 20.0, 30.0], "float32")))
    check(tf(x), np.array([11.0, 21.0, 31.0], "float32"))


def test_capture_as_const_rejects_non_tensor_arguments():
    tf = trace(lambda x, k: x * k, capture_as_const=True)
    with pytest.raises(TypeError, match="capture_as_const"):
        tf(mge.tensor([1.0]), 2.0)
    _runtime_still_works()
    check(tf(mge.tensor([1.0]), mge.tensor([3.0])), np.array([3.0], "float32"))


def test_dump_needs_capture_as_const(tmp_path):
    tf = trace(lambda x: x + 1)
    tf(mge.tensor([1.0]))
    with pytest.raises(ValueError, match="capture_as_const"):
        tf.dump(str(tmp_path / "model.mge"))


# -- 6. is_tracing and exclude_from_trace ---------------------------------------------------------
def test_is_tracing_inside_and_outside(symbolic):
    seen = []

    @trace(symbolic=symbolic)
    def fn(x):
        seen.append(("in", is_tracing()))
        y = x + 1
        with exclude_from_trace():
            seen.append(("excluded", is_tracing()))
        seen.append(("after", is_tracing()))
        return y

    assert not is_tracing()
    for _ in range(3):
        fn(mge.tensor([1.0]))
        assert not is_tracing()
    assert seen == [("in", True), ("excluded", False), ("after", True)] * 3


GLOBAL = {"scale": 1.0}


def test_excluded_ops_run_eagerly_each_call(symbolic):
    log = []

    @trace(symbolic=symbolic)
    def fn(x):
        y = x * 2
        with exclude_from_trace():
            # a Python value that changes between calls; reads y, computed before
            side = y * GLOBAL["scale"] + F.ones(y.shape)
            log.append(side.numpy())
        return y + 1, side

    # (symbolic: the ops recorded before the block run at its start, so it reads y; MegEngine
    # raises ValueError there -- docs/differences.rst)
    for k in range(4):
        GLOBAL["scale"] = float(k + 1)
        a = arr((2, 3), seed=k)
        y, side = fn(mge.tensor(a))
        ref_y = mge.tensor(a) * 2
        check(y, (ref_y + 1).numpy())
        want = (ref_y * GLOBAL["scale"] + F.ones((2, 3))).numpy()
        np.testing.assert_array_equal(log[-1], want)
        check(side, want)  # a result computed in the excluded block, returned as it is
    assert len(log) == 4


def test_excluded_block_feeding_the_trace(symbolic):
    # a tensor made in the excluded block and read by a later traced op: taken as it is now
    @trace(symbolic=symbolic)
    def fn(x):
        with exclude_from_trace():
            offset = mge.tensor(np.full((3,), GLOBAL["scale"], "float32"))
        return x + offset

    for k in range(4):
        GLOBAL["scale"] = float(10 * k)
        a = arr((3,), seed=k)
        check(fn(mge.tensor(a)), a + np.float32(10 * k))


def test_excluded_block_cuts_the_trace(symbolic):
    # (MegEngine's test_exclude_from_trace) the block replaces a value in some calls only: the
    # op after it takes what it is given, in every call
    flip = [False]

    @trace(symbolic=symbolic)
    def fn(x):
        x = -x
        with exclude_from_trace():
            if flip[0]:
                x = -x
        return x * 3

    x = mge.tensor([1.0, 2.0])
    for k in range(6):
        flip[0] = k % 2 == 1
        want = [3.0, 6.0] if flip[0] else [-3.0, -6.0]
        check(fn(x), np.array(want, "float32"))


def test_excluded_block_reads_values_computed_before_it(symbolic):
    # a symbolic recording runs its ops at the block's start (MegEngine raises ValueError)
    seen = []

    @trace(symbolic=symbolic)
    def fn(x):
        y = x + 1
        with exclude_from_trace():
            seen.append(y.numpy().tolist())
        return y * 2

    for k in range(3):
        check(fn(mge.tensor([float(k)])), np.array([2.0 * (k + 1)], "float32"))
    assert seen == [[1.0], [2.0], [3.0]]


@pytest.mark.parametrize("normal, other, reason", [
    ("a + b + c", "a + b - c", "operator mismatch"),
    ("((a + b), (b + c))[0]", "a + b", "mismature end"),
    ("a + b + c", "c + (a + b)", "expect internal node, got external"),
    ("c + (a + b)", "a + b + c", "expect external node, got internal"),
    ("a + b + c", "a + b + c + c", "too many instructions"),
    ("((a + b), (b + c))[1]", "((a + b), (b + c))[0]", "data unreadable"),
    ("((a + b), (b + c))[1] + a", "((a + b), (b + c))[0] + a", "input id mismatch"),
])
def test_divergence_messages_are_megengines(symbolic, normal, reason, other):
    # str(e) is MegEngine's text; mge's account of the divergence is the exception's note
    a, b, c = (mge.tensor(np.array(v, "int32")) for v in ([1, 2], [5, 6], [9, 0]))
    use = [normal]

    @trace(symbolic=symbolic)
    def fn(a, b, c):
        return eval(use[0])

    for _ in range(2):
        fn(a, b, c)
    use[0] = other
    with pytest.raises(TraceError) as info:
        fn(a, b, c)
    assert str(info.value) == f"trace error because {reason}"
    assert info.value.__notes__ and "trace" in info.value.__notes__[0]
    use[0] = normal  # the trace is still good
    np.testing.assert_array_equal(fn(a, b, c).numpy(), eval(normal).numpy())


def test_capture_as_const_refuses_other_arguments_with_megengines_message():
    traced = trace(lambda a: a * 2, capture_as_const=True)
    with pytest.raises(TypeError) as info:
        traced(1)
    assert str(info.value) == "Only support tensor type args when capture_as_const is enabled"
    assert "argument 0 is a int" in info.value.__notes__[0]


# -- 7. reading values during a replay ------------------------------------------------------------
def test_reading_values_inside_a_replay():
    # (values read inside: symbolic=True cannot, tests/test_trace_symbolic.py)
    symbolic = False
    reads = []

    def fn(x, y):
        z = F.matmul(x, y)
        s = F.sum(z)
        reads.append((s.item(), z.numpy().copy()))
        w = F.relu(z) * 2 - s
        m = F.max(w)
        reads.append((float(m.numpy()),))
        return w / (F.abs(m) + 1), z

    tf = trace(fn, symbolic=symbolic)
    for k in range(4):
        a, b = arr((3, 4), seed=k), arr((4, 2), seed=k + 10)
        reads.clear()
        got = tf(mge.tensor(a), mge.tensor(b))
        traced_reads = list(reads)
        reads.clear()
        want = fn(mge.tensor(a), mge.tensor(b))
        _same(got, want)
        assert traced_reads[0][0] == reads[0][0]
        np.testing.assert_array_equal(traced_reads[0][1], reads[0][1])
        assert traced_reads[1] == reads[1]


def test_several_reads_inside_a_replay():
    # (values read inside: symbolic=True cannot, tests/test_trace_symbolic.py)
    symbolic = False
    # reads of temporaries and of locals, one after another, each running the program further
    reads = []

    def fn(x):
        a = x * 2
        reads.append(F.sum(a).numpy())       # a temporary, read at once
        reads.append(F.sum(a + 1).numpy())   # another one
        s = F.sum(a)
        reads.append(s.item())
        w = a - s
        m = F.max(w)
        reads.append(m.numpy())              # a local whose value depends on the earlier read
        return w / m

    tf = trace(fn, symbolic=symbolic)
    for k in range(6):
        x = exact_tensor(arr((3, 2), seed=k))
        reads.clear()
        got = tf(x)
        traced_reads = list(reads)
        reads.clear()
        want = fn(x)
        _same(got, want)
        assert len(traced_reads) == len(reads) == 4
        for r, e in zip(traced_reads, reads):
            np.testing.assert_array_equal(r, e)
            assert np.shape(r) == np.shape(e)


def test_a_python_branch_on_a_read_value():
    # (values read inside: symbolic=True cannot, tests/test_trace_symbolic.py)
    symbolic = False
    # the value read decides which ops follow: a divergence when the branch changes
    @trace(symbolic=symbolic)
    def fn(x):
        s = F.sum(x)
        if s.item() > 0:
            return x * s
        return F.relu(x)

    check(fn(mge.tensor([1.0, 2.0])), np.array([3.0, 6.0], "float32"))
    check(fn(mge.tensor([3.0, 2.0])), np.array([15.0, 10.0], "float32"))
    with pytest.raises(TraceError, match=r"diverged at op #1 of the recording, Elemwise.mul"):
        fn(mge.tensor([-3.0, 2.0]))
    _runtime_still_works()
    check(fn(mge.tensor([1.0, 1.0])), np.array([2.0, 2.0], "float32"))


def test_a_result_read_after_the_call_and_kept_across_calls(symbolic):
    tf = trace(lambda x: (x * 2, F.sum(x)), symbolic=symbolic)
    kept = []
    for k in range(4):
        a = arr((3,), seed=k)
        kept.append((a, tf(mge.tensor(a))))
    for a, (y, s) in kept:  # earlier results keep their values after later calls
        check(y, a * 2)
        check(s, F.sum(mge.tensor(a)).numpy())


# -- 8. kernel errors during a replay -------------------------------------------------------------
def _bad_index_call(tf, n):
    x = mge.tensor(np.arange(20, dtype="float32").reshape(4, 5))
    return tf(x, mge.tensor(indices([0, 1, n, 2])))


def _one_hot_ref(n, scale, shift):
    return (np.arange(20, dtype="float32").reshape(4, 5)[np.arange(4), [0, 1, n, 2]] * scale
            + shift).astype("float32")


def test_a_kernel_error_in_a_replay_surfaces(symbolic):
    # the index, an argument, is out of range only on the third call
    tf = trace(lambda x, i: F.indexing_one_hot(x, i, 1) * 2 + 1, symbolic=symbolic)
    check(_bad_index_call(tf, 3), _one_hot_ref(3, 2, 1))
    check(_bad_index_call(tf, 4), _one_hot_ref(4, 2, 1))
    raises_at_run(IndexError, r"IndexingOneHot: index out of range .*index range \[0, 7\]",
                  lambda: _bad_index_call(tf, 7).numpy())
    mge_sync()  # reported once: nothing left
    _runtime_still_works()
    check(_bad_index_call(tf, 1), _one_hot_ref(1, 2, 1))  # the trace still replays


def test_a_kernel_error_in_a_replay_at_async_level_0(async0, symbolic):
    tf = trace(lambda x, i: F.indexing_one_hot(x, i, 1) + 1, symbolic=symbolic)
    check(_bad_index_call(tf, 3), _one_hot_ref(3, 1, 1))
    check(_bad_index_call(tf, 4), _one_hot_ref(4, 1, 1))
    with pytest.raises(IndexError, match=r"IndexingOneHot: index out of range"):
        _bad_index_call(tf, 9)  # the original error, raised by the call
    mge_sync()
    _runtime_still_works()
    check(_bad_index_call(tf, 0), _one_hot_ref(0, 1, 1))


def _step_with_an_index(symbolic):
    model = _mlp()
    gm = GradManager().attach(model.parameters())
    opt = SGD(model.parameters(), lr=0.1)

    @trace(symbolic=symbolic)
    def step(x, y, i):
        with gm:
            loss = F.nn.cross_entropy(model(x), y) + F.sum(F.indexing_one_hot(x, i, 1))
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    return model, step


@pytest.mark.parametrize("level", [2, 0])
def test_a_kernel_error_in_a_training_replay(level, symbolic):
    saved = mge.config.async_level
    mge.config.async_level = level
    try:
        model, step = _step_with_an_index(symbolic)
        x, y = (mge.tensor(a) for a in _batch("mlp", 0))
        good = mge.tensor(np.zeros(6, "int32"))
        for _ in range(2):
            step(x, y, good)
        raises_at_run(IndexError, "index out of range",
                      lambda: step(x, y, mge.tensor(np.full(6, 99, "int32"))).numpy())
        mge_sync()
        _runtime_still_works()
        # the failed step's updates never ran: the parameters are unusable, as after an eager
        # step whose forward fails at async_level=2, and say so
        with pytest.raises((UnusableTensorError, AsyncError)):
            model[0].weight.numpy()
        mge_sync()
    finally:
        mge.config.async_level = saved
    # another model trains
    _train_both("mlp", SGD, dict(lr=0.05, momentum=0.9), symbolic, steps=3)


# -- 9. decorator forms and result structures -----------------------------------------------------
def test_decorator_forms():
    @trace
    def a(x):
        return x + 1

    @trace(symbolic=True)
    def b(x):
        return x + 2

    def c_(x):
        return x + 3

    c = trace(c_)
    assert isinstance(a, trace) and isinstance(b, trace) and isinstance(c, trace)
    assert a.__name__ == "a" and b.__name__ == "b" and c.__name__ == "c_"
    assert b.symbolic and not a.symbolic
    for k in range(3):
        x = arr((2, 2), seed=k)
        for f, d in ((a, 1), (b, 2), (c, 3)):
            check(f(mge.tensor(x)), x + np.float32(d))


def test_trace_rejects_non_callables():
    with pytest.raises(TypeError):
        trace(3)


class _Net:
    def __init__(self):
        self.w = mge.tensor(arr((4,), seed=5))

    def as_tuple(self, x):
        return x + self.w, x * self.w

    def as_list(self, x):
        return [x - 1, [x * 2, F.sum(x)]]

    def as_dict(self, x):
        return {"a": x + 1, "b": (x * self.w, x), "n": 3}


class _DecoratedNet(_Net):
    as_tuple = trace(_Net.as_tuple)
    as_list = trace(symbolic=True)(_Net.as_list)

    @trace
    def as_dict(self, x):
        return super().as_dict(x)


@pytest.mark.parametrize("method", ["as_tuple", "as_list", "as_dict"])
def test_decorated_methods(method):
    nets = [_DecoratedNet(), _DecoratedNet()]
    nets[1].w = mge.tensor(arr((4,), seed=6))
    for k in range(4):
        for net in nets:  # each object is its own signature: its own trace
            x = mge.tensor(arr((4,), seed=k))
            got = getattr(net, method)(x)
            want = getattr(_Net, method)(net, x)
            assert type(got) is type(want)
            _same(got, want)


@pytest.mark.parametrize("method", ["as_tuple", "as_list", "as_dict"])
def test_structured_results(method, symbolic):
    net = _Net()
    plain = getattr(net, method)
    traced = trace(plain, symbolic=symbolic)  # a bound method
    for k in range(4):
        x = mge.tensor(arr((4,), seed=k))
        got = traced(x)
        want = plain(x)
        assert type(got) is type(want)
        _same(got, want)
    if method == "as_dict":
        assert got["n"] == 3 and list(got) == ["a", "b", "n"]


def test_a_traced_module():
    mge.random.seed(1)
    net = M.Sequential(M.Linear(4, 3), M.ReLU())
    traced = trace(net)
    for k in range(3):
        x = mge.tensor(arr((2, 4), seed=k))
        check(traced(x), net(x).numpy())


def test_keyword_and_nested_arguments(symbolic):
    @trace(symbolic=symbolic)
    def fn(xs, scale=None, *, bias):
        return xs[0] * scale + xs[1] - bias["b"]

    for k in range(4):
        a, b, c, d = (arr((3,), seed=k + j) for j in range(4))
        got = fn([mge.tensor(a), mge.tensor(b)], scale=mge.tensor(c), bias={"b": mge.tensor(d)})
        check(got, (mge.tensor(a) * mge.tensor(c) + mge.tensor(b) - mge.tensor(d)).numpy())


def test_an_argument_returned_as_is(symbolic):
    tf = trace(lambda x, y: (x, y * 2), symbolic=symbolic)
    for k in range(3):
        a = arr((3,), seed=k)
        x = mge.tensor(a)
        got_x, got_y = tf(x, x)
        check(got_x, a)
        check(got_y, a * 2)


def test_get_profile_counts_the_replayed_kernel_calls():
    import json

    f = trace(lambda x: F.relu(F.matmul(x, x)) * 2, profiling=True)
    x = mge.tensor(arr((8, 8)))
    for _ in range(4):
        f(x).numpy()
    prof = f.get_profile()["profiler"]
    calls = {row["op"]: row["calls"] for row in prof["ops"]}
    assert calls == {"MatrixMul": 3, "Elemwise.relu": 3, "Elemwise.mul": 3}  # 3 replays
    assert all(row["time_ms"] >= 0 and row["mean_ms"] >= 0 for row in prof["ops"])
    json.dumps(f.get_profile())  # a JSON-compatible object, as MegEngine's
    assert trace(lambda x: x + 1).get_profile() is None  # without profiling, as in MegEngine


# -- paired matrix products in programs -----------------------------------------------------------
def test_paired_products_give_the_eager_bits(monkeypatch):
    # a backward pass's two large independent products run at once (MatrixMulPair)
    from mge.jit import program
    monkeypatch.setattr(program, "PAIR_PRODUCTS", True)
    lin = M.Linear(256, 256)
    gm = GradManager().attach(lin.parameters())

    def step(x):
        with gm:
            gm.backward(F.relu(lin(F.relu(lin(x)))).sum())
        grads = [p.grad for p in lin.parameters()]
        for p in lin.parameters():
            p.grad = None
        return grads

    traced = trace(step, profiling=True)
    for k in range(CALLS):
        x = mge.tensor(arr((128, 256), seed=k))
        want = step(x)
        got = traced(x)
        for a, b in zip(got, want):
            check(a, b.numpy())
    ops = {e["op"] for e in traced.get_profile()["profiler"]["ops"]}
    assert "MatrixMulPair" in ops


def test_two_products_at_once_equal_one_after_the_other():
    from mge._core import _accel
    cpu = _accel.load("mge._core.device.cpu.handoff").CPU
    rng = np.random.RandomState(3)
    for dtype in ("float32", "float64"):
        a1, b1 = rng.randn(96, 200).astype(dtype), rng.randn(150, 200).astype(dtype)
        a2, b2 = rng.randn(96, 130).astype(dtype), rng.randn(96, 170).astype(dtype)
        both = cpu.gemm2(a1, b1, False, True, a2, b2, True, False)
        if both is None:  # the pure-Python twin (or no CBLAS): the caller runs them in turn
            assert cpu.gemm(a1, b1, False, True) is None
            continue
        np.testing.assert_array_equal(both[0], cpu.gemm(a1, b1, False, True))
        np.testing.assert_array_equal(both[1], cpu.gemm(a2, b2, True, False))
        np.testing.assert_allclose(both[0], a1 @ b1.T, rtol=1e-4, atol=1e-4)


def test_two_products_at_once_in_a_forked_child():
    # the second GEMM thread is the parent's; a child starts its own
    import os

    from mge._core import _accel
    cpu = _accel.load("mge._core.device.cpu.handoff").CPU
    a = np.random.RandomState(0).randn(64, 128).astype("float32")
    cpu.gemm2(a, a, False, True, a, a, True, False)
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        ok = False
        try:
            both = cpu.gemm2(a, a, False, True, a, a, True, False)
            ok = both is None or np.array_equal(both[1], cpu.gemm(a, a, True, False))
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


# -- SGD steps folded into their gradients' products (MatrixMulUpdate) ----------------------------
def _mlp_sgd(sizes=(300, 256, 200), lr=0.05, seed=0, **sgd):
    rng = np.random.RandomState(seed)
    layers = []
    for i, o in zip(sizes[:-1], sizes[1:]):
        lin = M.Linear(i, o)
        lin.weight._reset(mge.tensor(rng.randn(o, i).astype("float32") * 0.1))
        layers.append(lin)
    params = [p for lin in layers for p in lin.parameters()]
    gm = GradManager().attach(params)
    opt = SGD(params, lr=lr, **sgd)

    def step(x, y):
        with gm:
            h = x
            for lin in layers:
                h = F.relu(lin(h))
            loss = F.nn.cross_entropy(h, y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    return layers, step


def _sgd_batches(n, batch=64, width=300, classes=200):
    rng = np.random.RandomState(7)
    return [(mge.tensor(rng.randn(batch, width).astype("float32")),
             mge.tensor(rng.randint(0, classes, batch).astype("int32"))) for _ in range(n)]


def _weights(layers):
    return [lin.weight.numpy() for lin in layers] + [lin.bias.numpy() for lin in layers]


@pytest.mark.parametrize("fold", [False, True])
def test_sgd_updates_folded_into_products_train_as_eager(monkeypatch, symbolic, fold):
    # folded, the update is CBLAS's C += alpha * A @ B: within float32 rounding of eager's
    # param - lr * grad (a fused multiply-add where numpy rounds twice); not folded, the same bits
    from mge.jit import program
    monkeypatch.setattr(program, "FOLD_UPDATES", fold)
    batches = _sgd_batches(5)
    eager_layers, eager_step = _mlp_sgd()
    traced_layers, step = _mlp_sgd()
    traced = trace(step, symbolic=symbolic, profiling=True)
    for x, y in batches:
        want = eager_step(x, y).numpy()
        got = traced(x, y).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5)
    for a, b in zip(_weights(traced_layers), _weights(eager_layers)):
        if fold:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(a, b)
    from mge._core import _accel
    folds = fold and _accel.load("mge._core.device.cpu.handoff").CPU.has_blas
    calls = {e["op"]: e["calls"] for e in traced.get_profile()["profiler"]["ops"]}
    # per replay: the two weights' updates are folded (alone or in a pair) into their products,
    # the two biases' into their gradients' sums (same bits: not FOLD_UPDATES's to switch)
    runs = calls["SoftmaxCrossEntropy"]  # (one per run)
    assert calls["BiasSGDUpdate"] == 2 * runs
    assert calls.get("SGDUpdate", 0) == (0 if folds else 2) * runs
    assert ("MatrixMulUpdate" in calls or "MatrixMulPair" in calls) if folds else (
        "MatrixMulUpdate" not in calls)


def _trains_with_eagers_bits(opt_level, **sgd):
    """Four traced and eager steps of ``_mlp_sgd(**sgd)``: the same losses and weights, bit for
    bit; returns the traced program's kernel calls by op name (``profiling=True``)."""
    eager_layers, eager_step = _mlp_sgd(**sgd)
    traced_layers, step = _mlp_sgd(**sgd)
    traced = trace(step, symbolic=True, profiling=True, opt_level=opt_level)
    for x, y in _sgd_batches(4):
        np.testing.assert_array_equal(traced(x, y).numpy(), eager_step(x, y).numpy())
    for a, b in zip(_weights(traced_layers), _weights(eager_layers)):
        np.testing.assert_array_equal(a, b)
    return {e["op"]: e["calls"] for e in traced.get_profile()["profiler"]["ops"]}


@pytest.mark.parametrize("opt_level", [0, 2])
def test_bias_and_relu_run_as_one_pass_with_eagers_bits(opt_level):
    # the layers' add(x @ W.T, b) and the relu that reads it become one BiasAct at opt_level >= 1
    # (the last layer's relu too: each is the sum's only reader); the training gives eager's bits
    from mge.jit import program
    calls = _trains_with_eagers_bits(opt_level, lr=0.01, momentum=0.9)
    runs = calls["SoftmaxCrossEntropy"]
    if opt_level:
        assert calls["BiasAct"] == 2 * runs and "Elemwise.relu" not in calls
    else:
        assert "BiasAct" not in calls and calls["Elemwise.relu"] == 2 * runs
    assert program.BiasAct.get(True).relu is True


@pytest.mark.parametrize("opt_level", [0, 1])
def test_bias_updates_folded_into_their_sums_keep_eagers_bits(opt_level):
    # a plain SGD step of a bias and the column sums of its gradient become one BiasSGDUpdate at
    # opt_level >= 1 (at 1 no weight update is folded into a product: every bit is eager's)
    calls = _trains_with_eagers_bits(opt_level, lr=0.02)
    runs = calls["SoftmaxCrossEntropy"]
    assert calls.get("BiasSGDUpdate", 0) == (2 * runs if opt_level else 0)
    assert calls["SGDUpdate"] == (2 if opt_level else 4) * runs


def test_folded_updates_leave_a_parameter_that_is_still_read_alone(monkeypatch):
    # the program writes over a parameter's buffer only when nothing else sees it: a tensor
    # still holding the old value keeps it (the program updates a copy)
    from mge.jit import program
    monkeypatch.setattr(program, "FOLD_UPDATES", True)
    batches = _sgd_batches(4)
    eager_layers, eager_step = _mlp_sgd()
    layers, step = _mlp_sgd()
    traced = trace(step, symbolic=True)
    olds = []
    for x, y in batches:
        old = layers[0].weight.detach()
        before = old.numpy().copy()
        traced(x, y)
        eager_step(x, y)
        olds.append((old, before))
    for old, before in olds:
        np.testing.assert_array_equal(old.numpy(), before)
    np.testing.assert_allclose(layers[0].weight.numpy(), eager_layers[0].weight.numpy(),
                               rtol=1e-5, atol=1e-6)


def test_momentum_and_weight_decay_updates_are_not_folded(monkeypatch):
    from mge.jit import program
    monkeypatch.setattr(program, "FOLD_UPDATES", True)
    batches = _sgd_batches(3)
    for kwargs in (dict(momentum=0.9), dict(weight_decay=1e-3)):
        eager_layers, eager_step = _mlp_sgd(**kwargs)
        layers, step = _mlp_sgd(**kwargs)
        traced = trace(step, symbolic=True, profiling=True)
        for x, y in batches:
            np.testing.assert_array_equal(traced(x, y).numpy(), eager_step(x, y).numpy())
        for a, b in zip(_weights(layers), _weights(eager_layers)):
            np.testing.assert_array_equal(a, b)
        assert "MatrixMulUpdate" not in {e["op"] for e in traced.get_profile()["profiler"]["ops"]}


def test_gemm_update_adds_the_scaled_product_in_place():
    from mge._core import _accel
    cpu = _accel.load("mge._core.device.cpu.handoff").CPU
    rng = np.random.RandomState(5)
    for dtype in ("float32", "float64"):
        a, b = rng.randn(64, 120).astype(dtype), rng.randn(64, 150).astype(dtype)
        c0 = rng.randn(120, 150).astype(dtype)
        c = c0.copy()
        if not cpu.gemm_update(a, b, True, False, c, -0.01):  # the pure-Python twin, no CBLAS
            assert not cpu.has_blas
            np.testing.assert_array_equal(c, c0)
            continue
        want = c0.astype("float64") - 0.01 * (a.T.astype("float64") @ b.astype("float64"))
        np.testing.assert_allclose(c, want, rtol=1e-5 if dtype == "float32" else 1e-12,
                                   atol=1e-5 if dtype == "float32" else 1e-12)
        # a pair of updates gives each one's bits
        c1, c2 = c0.copy(), c0.copy()
        both = cpu.gemm2(a, b, True, False, a, b, True, False, c1, -0.01, None, 1.0)
        assert both[0] is c1
        np.testing.assert_array_equal(c1, c)
        np.testing.assert_array_equal(both[1], cpu.gemm(a, b, True, False))
        assert cpu.gemm_update(a, b, True, False, c2, -0.01)
        np.testing.assert_array_equal(c2, c)
        # refused: a c of another shape, not contiguous, read-only, or one that the operands share
        assert not cpu.gemm_update(a, b, True, False, c0[:, :100].copy(), 1.0)
        assert not cpu.gemm_update(a, b, True, False, np.asfortranarray(c0), 1.0)
        ro = c0.copy()
        ro.flags.writeable = False
        assert not cpu.gemm_update(a, b, True, False, ro, 1.0)
        sq = rng.randn(64, 64).astype(dtype)
        assert not cpu.gemm_update(sq, sq.copy(), False, False, sq, 1.0)


# -- large products overlapped with the small steps beside them -----------------------------------
def _handoff_cpu():
    from mge._core import _accel
    return _accel.load("mge._core.device.cpu.handoff").CPU


@pytest.mark.parametrize("overlap", [False, True])
def test_products_overlapped_with_small_steps_give_the_eager_bits(monkeypatch, symbolic, overlap):
    # forced on (this machine may measure its hand-over too slow to pay): the same kernels on
    # the same values, a product started on the second thread while the small steps run
    from mge.jit import program
    monkeypatch.setattr(program, "OVERLAP_PRODUCTS", overlap)
    monkeypatch.setattr(program, "FOLD_UPDATES", False)  # (folded updates round differently)
    cpu = _handoff_cpu()
    batches = _sgd_batches(4, width=512, classes=256)
    eager_layers, eager_step = _mlp_sgd(sizes=(512, 512, 256))
    layers, step = _mlp_sgd(sizes=(512, 512, 256))
    traced = trace(step, symbolic=symbolic)
    starts = cpu.starts
    for x, y in batches:
        np.testing.assert_array_equal(traced(x, y).numpy(), eager_step(x, y).numpy())
    for a, b in zip(_weights(layers), _weights(eager_layers)):
        np.testing.assert_array_equal(a, b)
    assert (cpu.starts > starts) == (overlap and cpu.has_blas)
    assert not cpu.started


def test_a_kernel_error_beside_an_overlapped_product_surfaces(monkeypatch):
    # the failing step runs while the product is on the second thread: the product is waited
    # for, the error names the step, and the runtime (the second thread too) goes on
    from mge.jit import program
    monkeypatch.setattr(program, "OVERLAP_PRODUCTS", True)
    cpu = _handoff_cpu()
    w = mge.tensor(arr((512, 512), seed=1))

    def f(x, src, i):
        return F.matmul(x, w), F.indexing_one_hot(src, i, 1) * 2

    tf = trace(f, symbolic=True)
    x, src = mge.tensor(arr((64, 512))), mge.tensor(arr((4, 5)))
    good = mge.tensor(np.array([0, 1, 2, 3], "int32"))
    for _ in range(2):
        y, z = tf(x, src, good)
        check(y, x.numpy() @ w.numpy())
        check(z, src.numpy()[np.arange(4), [0, 1, 2, 3]] * 2)
    starts = cpu.starts
    bad = mge.tensor(np.array([0, 1, 7, 3], "int32"))
    raises_at_run(IndexError, "IndexingOneHot: index out of range",
                  lambda: tf(x, src, bad)[1].numpy())
    mge_sync()
    assert not cpu.started and cpu.starts == starts + (1 if cpu.has_blas else 0)
    _runtime_still_works()
    y, z = tf(x, src, good)  # the trace still replays, overlapping again
    check(y, x.numpy() @ w.numpy())
    check(z, src.numpy()[np.arange(4), [0, 1, 2, 3]] * 2)


def test_gemm_start_runs_one_product_on_the_second_thread():
    cpu = _handoff_cpu()
    rng = np.random.RandomState(8)
    a, b = rng.randn(96, 200).astype("float32"), rng.randn(150, 200).astype("float32")
    out = cpu.gemm_start(a, b, False, True)
    if out is None:  # the pure-Python twin, or no CBLAS
        assert not cpu.has_blas and not cpu.started
        cpu.gemm_join()  # (nothing to wait for)
        return
    assert cpu.started
    assert cpu.gemm_start(a, b, False, True) is None  # one at a time
    assert cpu.gemm2(a, b, False, True, a, b, False, True) is None  # its thread is busy
    cpu.gemm_join()
    assert not cpu.started
    np.testing.assert_array_equal(out, cpu.gemm(a, b, False, True))
    c0 = rng.randn(96, 150).astype("float32")
    c = c0.copy()
    assert cpu.gemm_start(a, b, False, True, c, -0.5) is c
    cpu.gemm_join()
    want = c0.copy()
    assert cpu.gemm_update(a, b, False, True, want, -0.5)
    np.testing.assert_array_equal(c, want)
    cpu.gemm_join()  # (nothing to wait for)


def test_a_fork_waits_for_a_started_product():
    # a fork waits for the product its thread started (OpenBLAS must not be copied mid-product);
    # the child starts and joins products of its own
    import os

    cpu = _handoff_cpu()
    a = np.random.RandomState(0).randn(64, 128).astype("float32")
    out = cpu.gemm_start(a, a, False, True)
    started = out is not None
    pid = os.fork()
    assert not cpu.started
    if pid == 0:  # pragma: no cover (the child)
        ok = False
        try:
            cpu.gemm_join()  # the parent's: nothing to wait for here
            out = cpu.gemm_start(a, a, True, False)
            cpu.gemm_join()
            ok = out is None or np.array_equal(out, cpu.gemm(a, a, True, False))
        finally:
            os._exit(0 if ok else 1)
    cpu.gemm_join()  # (already joined by the fork)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert started == cpu.has_blas
    if started:
        np.testing.assert_array_equal(out, cpu.gemm(a, a, False, True))


# -- compiler passes: common subexpressions, constant folding --------------------------------------
def _kernel_calls(traced):
    return {e["op"]: e["calls"] for e in traced.get_profile()["profiler"]["ops"]}


def test_common_subexpressions_run_once(symbolic):
    def fn(x):
        a = F.exp(x) * 2
        b = F.exp(x) * 2          # the same ops on the same input
        r1 = mge.random.normal(size=(3,))
        r2 = mge.random.normal(size=(3,))  # random numbers are never merged
        return a + b, r1 - r2

    traced = trace(fn, symbolic=symbolic, profiling=True)
    for k in range(CALLS):
        x = mge.tensor(arr((3,), seed=k))
        mge.random.seed(k)
        got = traced(x)
        mge.random.seed(k)
        want = fn(x)
        _same(got, want)
        assert np.all(got[1].numpy() != 0)
    calls = _kernel_calls(traced)
    runs = CALLS if symbolic else CALLS - 1  # (an imperative first call runs op by op)
    assert calls["Elemwise.exp"] == runs
    assert calls["GaussianRNG"] == 2 * runs


def test_constants_are_folded_when_compiled(symbolic):
    def fn(x):
        c = F.ones((3, 4)) + F.arange(4, dtype="float32")  # no input: computed once
        return x * c

    traced = trace(fn, symbolic=symbolic, profiling=True)
    for k in range(CALLS):
        x = mge.tensor(arr((3, 4), seed=k))
        _same(traced(x), fn(x))
    calls = _kernel_calls(traced)
    assert "Fill" not in calls and "Arange" not in calls and "Elemwise.add" not in calls
    assert calls["Elemwise.mul"] >= CALLS - 1


def test_a_folded_constant_returned_or_updated_is_not_shared():
    # a constant the function returns is computed by each run (nobody may hold the program's)
    w = mge.Parameter(np.zeros((2,), "float32"))

    @trace
    def fn(x):
        c = F.full((2,), 3.0)
        w._reset(w + c)
        return c, x + c

    outs = [fn(mge.tensor([1.0, 2.0])) for _ in range(CALLS)]
    for c, y in outs:
        check(c, np.array([3.0, 3.0], "float32"))
        check(y, np.array([4.0, 5.0], "float32"))
    check(w, np.full((2,), 3.0 * CALLS, "float32"))


@pytest.mark.parametrize("without_host", [False, True], ids=["replay", "without_host"])
def test_random_numbers_are_new_in_every_call_as_eagerly(symbolic, without_host):
    # each call draws its own seeds from the global stream, in the eager order (dropout in a
    # training step): no divergence, no recompiling, the eager values
    def fn(x):
        keep = F.dropout(x, 0.5, training=True)
        return keep + mge.random.uniform(size=(4,)), mge.random.normal(size=(2, 2))

    traced = trace(fn, symbolic=symbolic, without_host=without_host)
    mge.random.seed(11)
    got = [traced(mge.tensor(arr((4,), seed=k))) for k in range(CALLS)]
    mge.random.seed(11)
    want = [fn(mge.tensor(arr((4,), seed=k))) for k in range(CALLS)]
    for g, w in zip(got, want):
        _same(g, w)
    assert not np.array_equal(got[1][1].numpy(), got[2][1].numpy())
    assert traced._last.programs.compiled <= 2


def test_dtr_config_evicts_and_recomputes_inside_traced_steps(symbolic):
    # dtr_config: the replay issues the recorded ops one by one, so DTR evicts activations over
    # the budget and recomputes them in backward; the results stay bit-identical
    import warnings

    from mge.jit import DTRConfig

    def make():
        mge.random.seed(0)
        net = M.Sequential(*[M.Linear(128, 128) for _ in range(5)])
        return net, GradManager().attach(net.parameters()), SGD(net.parameters(), lr=0.01)

    def step(net, gm, opt, x):
        with gm:
            h = x
            for layer in net:
                h = F.relu(layer(h))
            loss = (h ** 2).mean()
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    eager, traced_state = make(), make()
    traced = trace(lambda x: step(*traced_state, x), symbolic=symbolic,
                   dtr_config=DTRConfig(eviction_threshold=1 << 19, evictee_minimum_size=1 << 12))
    before = mge.core.get_option("enable_dtr_auto_drop")
    mge.dtr.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (a budget this small: DTR says so)
        for k in range(3):
            x = mge.tensor(arr((256, 128), seed=k))
            want = step(*eager, x).numpy()
            got = traced(x).numpy()
            np.testing.assert_array_equal(got, want)
    stats = mge.dtr.stats()
    assert stats["evictions"] > 0 and stats["recomputations"] > 0
    assert mge.core.get_option("enable_dtr_auto_drop") == before  # only during the calls
    for p, q in zip(eager[0].parameters(), traced_state[0].parameters()):
        check(q, p.numpy())
