"""RNNCell, LSTMCell, RNN and LSTM: MegEngine 1.13's outputs for given weights
(tests/data/megengine_rnn_refs.npz, written by tests/data/gen_megengine_rnn_refs.py), state-dict
keys, errors, and gradients against finite differences (float64)."""
import pathlib

import numpy as np
import pytest

import mge
import mge.module as M
from gradcheck import check_grads

REFS = np.load(pathlib.Path(__file__).parent / "data" / "megengine_rnn_refs.npz")


def state(case):
    prefix = f"{case}/sd/"
    return {k[len(prefix):]: REFS[k] for k in REFS.files if k.startswith(prefix)}


def ref(case, name):
    key = f"{case}/{name}"
    return REFS[key] if key in REFS.files else None


def t(a):
    return None if a is None else mge.tensor(a)


LAYERS = {
    "rnn_tanh": ("RNN", dict(input_size=3, hidden_size=4)),
    "rnn_relu_2l_bi": ("RNN", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True,
                                   nonlinearity="relu")),
    "rnn_nobias_bf": ("RNN", dict(input_size=3, hidden_size=5, bias=False, batch_first=True)),
    "lstm": ("LSTM", dict(input_size=3, hidden_size=4)),
    "lstm_2l_bi": ("LSTM", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True)),
    "lstm_3l_bf_nobias": ("LSTM", dict(input_size=2, hidden_size=3, num_layers=3, bias=False,
                                       batch_first=True)),
}


@pytest.mark.parametrize("case", sorted(LAYERS))
def test_layer_matches_megengine(case):
    kind, kwargs = LAYERS[case]
    m = getattr(M, kind)(**kwargs)
    assert sorted(m.state_dict()) == sorted(state(case))  # MegEngine's keys: checkpoints load
    m.load_state_dict(state(case))
    m.eval()
    x = t(ref(case, "x"))
    if kind == "RNN":
        out, hn = m(x, t(ref(case, "h0")))
    else:
        h0 = ref(case, "h0")
        out, (hn, cn) = m(x, None if h0 is None else (t(h0), t(ref(case, "c0"))))
        np.testing.assert_allclose(cn.numpy(), ref(case, "cn"), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.numpy(), ref(case, "out"), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hn.numpy(), ref(case, "hn"), rtol=1e-5, atol=1e-5)


CELLS = {
    "rnncell": lambda: M.RNNCell(3, 4),
    "rnncell_relu_nobias": lambda: M.RNNCell(3, 4, bias=False, nonlinearity="relu"),
    "lstmcell": lambda: M.LSTMCell(3, 4),
    "lstmcell_nobias": lambda: M.LSTMCell(3, 4, bias=False),
}


@pytest.mark.parametrize("case", sorted(CELLS))
def test_cell_matches_megengine(case):
    m = CELLS[case]()
    assert sorted(m.state_dict()) == sorted(state(case))
    m.load_state_dict(state(case))
    x = t(ref(case, "x"))
    if isinstance(m, M.LSTMCell):
        h0 = ref(case, "h0")
        h, c = m(x, None if h0 is None else (t(h0), t(ref(case, "c0"))))
        np.testing.assert_allclose(c.numpy(), ref(case, "c"), rtol=1e-5, atol=1e-6)
    else:
        h = m(x, t(ref(case, "h0")))
    np.testing.assert_allclose(h.numpy(), ref(case, "h"), rtol=1e-5, atol=1e-6)


def test_parameters_and_init():
    mge.random.seed(0)
    m = M.LSTM(3, 4, 2, bidirectional=True)
    shapes = {k: v.shape for k, v in m.state_dict().items()}
    assert shapes["_flatten_weights"] == (16, 46)
    assert shapes["cells.1.1.weight_ih"] == (16, 8)
    bound = 1 / np.sqrt(4)
    for p in m.parameters():
        v = p.numpy()
        assert v.dtype == np.float32 and np.all(np.abs(v) <= bound)
    assert M.RNN(3, 5, bias=False).state_dict()["_flatten_weights"].shape == (5, 8)
    cell = M.RNNCell(3, 4, bias=False)
    assert [n for n, _ in cell.named_parameters()] == ["weight_hh", "weight_ih"]
    assert not cell.bias_ih.numpy().any()  # a zero buffer, as in MegEngine


def test_default_states_and_batch_first():
    mge.random.seed(1)
    m = M.LSTM(3, 4, num_layers=2)
    x = np.random.default_rng(0).standard_normal((5, 2, 3)).astype("float32")
    out, (h, c) = m(mge.tensor(x))
    zeros = mge.tensor(np.zeros((2, 2, 4), "float32"))
    out2, (h2, c2) = m(mge.tensor(x), (zeros, zeros))
    np.testing.assert_array_equal(out.numpy(), out2.numpy())
    assert out.shape == (5, 2, 4) and h.shape == c.shape == (2, 2, 4)
    # the last time step of the last layer is its final hidden state
    np.testing.assert_allclose(out.numpy()[-1], h.numpy()[-1], rtol=1e-6)
    m.batch_first = True
    out3, _ = m(mge.tensor(x.transpose(1, 0, 2)))
    np.testing.assert_allclose(out3.numpy(), out.numpy().transpose(1, 0, 2), rtol=1e-6)


def test_bidirectional_reverse_direction():
    # the backward direction's output at t=0 is its final state, stored at h_n[1]
    mge.random.seed(2)
    m = M.RNN(2, 3, bidirectional=True)
    out, hn = m(mge.tensor(np.random.default_rng(1).standard_normal((4, 2, 2)).astype("float32")))
    np.testing.assert_allclose(out.numpy()[0, :, 3:], hn.numpy()[1], rtol=1e-6)
    np.testing.assert_allclose(out.numpy()[-1, :, :3], hn.numpy()[0], rtol=1e-6)


def test_dropout_between_layers_only_in_training():
    mge.random.seed(3)
    m = M.LSTM(3, 8, num_layers=2, dropout=0.5)
    x = mge.tensor(np.random.default_rng(2).standard_normal((4, 2, 3)).astype("float32"))
    m.eval()
    a, _ = m(x)
    b, _ = m(x)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    m.train()
    c, _ = m(x)
    assert not np.allclose(c.numpy(), a.numpy())
    single = M.LSTM(3, 8, num_layers=1, dropout=0.5)  # no layer after which to drop
    single.train()
    d1, _ = single(x)
    single.eval()
    d2, _ = single(x)
    np.testing.assert_array_equal(d1.numpy(), d2.numpy())


def test_errors():
    with pytest.raises(ValueError, match="Dropout should be a float"):
        M.LSTM(3, 4, dropout=1.5)
    with pytest.raises(ValueError, match="proj_size has to be smaller"):
        M.LSTM(3, 4, proj_size=4)
    with pytest.raises(NotImplementedError, match="proj_size"):
        M.LSTM(3, 4, proj_size=2)
    with pytest.raises(ValueError, match="RNNCell: nonlinearity"):
        M.RNNCell(3, 4, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="RNN: nonlinearity"):
        M.RNN(3, 4, nonlinearity="gelu")
    m = M.LSTM(3, 4, num_layers=2)
    with pytest.raises(ValueError, match=r"LSTM: input has shape \(5, 2, 7\).*input_size=3"):
        m(mge.tensor(np.zeros((5, 2, 7), "float32")))
    with pytest.raises(ValueError, match=r"LSTM: h_0 has shape \(1, 2, 4\), expected \(2, 2, 4\)"):
        z = mge.tensor(np.zeros((1, 2, 4), "float32"))
        m(mge.tensor(np.zeros((5, 2, 3), "float32")), (z, z))
    with pytest.raises(TypeError, match="LSTM: hx must be a tuple"):
        m(mge.tensor(np.zeros((5, 2, 3), "float32")), mge.tensor(np.zeros((2, 2, 4), "float32")))
    with pytest.raises(ValueError, match=r"RNNCell: input has shape \(2, 5\)"):
        M.RNNCell(3, 4)(mge.tensor(np.zeros((2, 5), "float32")))


def _with_flat(module, w):
    module._flatten_weights = w
    return module


@pytest.mark.parametrize("kind,kwargs", [
    ("RNN", dict(num_layers=2, bidirectional=True)),
    ("RNN", dict(nonlinearity="relu", bias=False)),
    ("LSTM", dict(num_layers=2)),
    ("LSTM", dict(bidirectional=True, batch_first=True)),
])
def test_layer_gradients(kind, kwargs):
    mge.random.seed(4)
    m = getattr(M, kind)(2, 3, **kwargs)
    m.eval()
    rng = np.random.default_rng(5)
    w = m._flatten_weights.numpy().astype(np.float64)
    d = 2 if kwargs.get("bidirectional") else 1
    states = d * kwargs.get("num_layers", 1)
    x = rng.standard_normal((2, 3, 2) if kwargs.get("batch_first") else (3, 2, 2))
    h0 = rng.standard_normal((states, 2, 3)) * 0.5
    if kind == "RNN":
        def fn(x, h0, w):
            out, hn = _with_flat(m, w)(x, h0)
            return out, hn
        check_grads(fn, x, h0, w, rtol=1e-5, atol=1e-7)
    else:
        c0 = rng.standard_normal((states, 2, 3)) * 0.5

        def fn(x, h0, c0, w):
            out, (hn, cn) = _with_flat(m, w)(x, (h0, c0))
            return out, hn, cn
        check_grads(fn, x, h0, c0, w, rtol=1e-5, atol=1e-7)


def test_cell_gradients():
    mge.random.seed(6)
    rng = np.random.default_rng(7)
    cell = M.LSTMCell(3, 2)

    def lstm(x, h, c, wih, whh, bih):
        cell.weight_ih, cell.weight_hh, cell.bias_ih = wih, whh, bih
        return cell(x, (h, c))
    check_grads(lstm, rng.standard_normal((2, 3)), rng.standard_normal((2, 2)),
                rng.standard_normal((2, 2)), rng.standard_normal((8, 3)) * 0.5,
                rng.standard_normal((8, 2)) * 0.5, rng.standard_normal(8) * 0.1)
    rnn = M.RNNCell(3, 2)

    def rnn_fn(x, h, wih):
        rnn.weight_ih = wih
        return rnn(x, h)
    check_grads(rnn_fn, rng.standard_normal((2, 3)), rng.standard_normal((2, 2)),
                rng.standard_normal((2, 3)) * 0.5)


def test_training_step_reduces_loss():
    import mge.functional as F
    import mge.optimizer as optim
    from mge.autodiff import GradManager
    mge.random.seed(8)
    m = M.LSTM(2, 4)
    x = mge.tensor(np.random.default_rng(9).standard_normal((5, 3, 2)).astype("float32"))
    target = mge.tensor(np.full((5, 3, 4), 0.3, "float32"))
    opt = optim.Adam(m.parameters(), lr=0.05)
    gm = GradManager().attach(m.parameters())
    losses = []
    for _ in range(5):
        with gm:
            out, _ = m(x)
            loss = F.mean((out - target) ** 2)
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    # forward reads _flatten_weights only (as in MegEngine): the cells get no gradient
    assert m.cells[0][0].weight_ih.grad is None
