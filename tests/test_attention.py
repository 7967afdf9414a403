"""MultiHeadAttention and F.nn.multi_head_attention: MegEngine 1.13's outputs for given weights
(tests/data/megengine_rnn_refs.npz), a float64 numpy reference for what MegEngine's CPU kernel
gets wrong or lacks (boolean masks, is_causal alone, unbatched input, bias_k/bias_v,
add_zero_attn), errors, and gradients against finite differences."""
import pathlib

import numpy as np
import pytest

import mge
import mge.functional as F
import mge.module as M
from gradcheck import check_grads

REFS = np.load(pathlib.Path(__file__).parent / "data" / "megengine_rnn_refs.npz")
E, H = 8, 2


def state(case):
    prefix = f"{case}/sd/"
    return {k[len(prefix):]: REFS[k] for k in REFS.files if k.startswith(prefix)}


def ref(case, name):
    key = f"{case}/{name}"
    return REFS[key] if key in REFS.files else None


CASES = {
    "mha_self": (dict(embed_dim=E, num_heads=H), {}),
    "mha_kv_dims": (dict(embed_dim=E, num_heads=4, kdim=5, vdim=6), {}),
    "mha_nobias": (dict(embed_dim=E, num_heads=H, bias=False), {}),
    "mha_weights": (dict(embed_dim=E, num_heads=H), dict(need_weights=True)),
    "mha_avg_weights": (dict(embed_dim=E, num_heads=H),
                        dict(need_weights=True, average_attn_weights=True)),
    "mha_attn_mask": (dict(embed_dim=E, num_heads=H), {}),
    "mha_mask3d_kpm": (dict(embed_dim=E, num_heads=H), {}),
    "mha_causal_with_mask": (dict(embed_dim=E, num_heads=H), dict(is_causal=True)),
    "mha_kpm": (dict(embed_dim=E, num_heads=H), {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_module_matches_megengine(case):
    mkw, fkw = CASES[case]
    m = M.MultiHeadAttention(**mkw)
    assert sorted(m.state_dict()) == sorted(state(case))
    m.load_state_dict(state(case))
    m.eval()
    kwargs = dict(fkw)
    for name in ("attn_mask", "key_padding_mask"):
        if ref(case, name) is not None:
            kwargs[name] = mge.tensor(ref(case, name))
    out, weights = m(*(mge.tensor(ref(case, n)) for n in "qkv"), **kwargs)
    np.testing.assert_allclose(out.numpy(), ref(case, "out"), rtol=1e-5, atol=1e-6)
    if ref(case, "weights") is None:
        assert weights is None
    else:
        np.testing.assert_allclose(weights.numpy(), ref(case, "weights"), rtol=1e-5, atol=1e-6)


def test_functional_without_output_projection_matches_megengine():
    c = "mha_f_noproj_out"
    out, w = F.nn.multi_head_attention(*(mge.tensor(ref(c, n)) for n in "qkv"), E, H, 0.0, 0.0,
                                       mge.tensor(ref(c, "w")), E, E, E, 0, training=False)
    assert w is None
    np.testing.assert_allclose(out.numpy(), ref(c, "out"), rtol=1e-5, atol=1e-6)
    assert F.multi_head_attention is F.nn.multi_head_attention


# -- a float64 numpy reference ------------------------------------------------------------------

def np_mha(q, k, v, w, heads, mask=None, bias_k=None, bias_v=None, zero_attn=False):
    n, lq, e = q.shape
    kd, vd = k.shape[2], v.shape[2]
    o = 0
    parts = []
    for rows in (e, kd, vd, e):
        parts.append(w[o:o + rows * e].reshape(rows, e))
        o += rows * e
    biases = [w[o + i * e:o + (i + 1) * e] for i in range(4)] if w.size > o else [0] * 4
    Q, K, V = q @ parts[0] + biases[0], k @ parts[1] + biases[1], v @ parts[2] + biases[2]
    if bias_k is not None:
        K = np.concatenate([K, np.broadcast_to(bias_k.reshape(1, 1, e), (n, 1, e))], 1)
        V = np.concatenate([V, np.broadcast_to(bias_v.reshape(1, 1, e), (n, 1, e))], 1)
    d = e // heads

    def split(x):
        return x.reshape(n, x.shape[1], heads, d).transpose(0, 2, 1, 3).reshape(n * heads, -1, d)
    Q, K, V = split(Q), split(K), split(V)
    if zero_attn:
        K = np.concatenate([K, np.zeros((n * heads, 1, d))], 1)
        V = np.concatenate([V, np.zeros((n * heads, 1, d))], 1)
    x = Q @ K.transpose(0, 2, 1) * d ** -0.5
    if mask is not None:
        x = x + mask
    x = np.exp(x - x.max(-1, keepdims=True))
    x /= x.sum(-1, keepdims=True)
    z = (x @ V).reshape(n, heads, lq, d).transpose(0, 2, 1, 3).reshape(n, lq, e)
    return z @ parts[3] + biases[3], x


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    n, lq, s = 2, 3, 4
    q, k, v = (rng.standard_normal((n, lq, E)), rng.standard_normal((n, s, E)),
               rng.standard_normal((n, s, E)))
    w = rng.standard_normal(4 * E * E + 4 * E) * 0.3
    return q, k, v, w


def T(a):
    return mge.tensor(a, dtype=np.asarray(a).dtype)


def _module(w, **kwargs):
    m = M.MultiHeadAttention(E, H, **kwargs)
    m.io_weight_bias = mge.Parameter(w.reshape(1, -1), dtype="float64")
    m.eval()
    return m


def test_bool_masks_are_minus_inf_masks(data):
    q, k, v, w = data
    m = _module(w)
    am = np.zeros((3, 4), bool)
    am[:, 1] = True
    am[0, 3] = True
    kpm = np.zeros((2, 4), bool)
    kpm[0, 2] = True
    kpm[1, 0] = True
    out, weights = m(*map(T, (q, k, v)), attn_mask=T(am),
                     key_padding_mask=T(kpm), need_weights=True)
    add = np.where(am, -np.inf, 0)[None] + np.where(kpm, -np.inf, 0)[:, None, :]
    expected, ew = np_mha(q, k, v, w, H, mask=np.repeat(add, H, axis=0))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(weights.numpy(), ew, rtol=1e-10, atol=1e-12)
    assert (weights.numpy()[:, :, 1] == 0).all()


def test_is_causal_without_mask(data):
    q, _, _, w = data
    m = _module(w)
    out, _ = m(*map(T, (q, q, q)), is_causal=True)
    causal = np.triu(np.full((3, 3), -np.inf), 1)
    expected, _ = np_mha(q, q, q, w, H, mask=causal)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10, atol=1e-12)


def test_unbatched_input(data):
    q, k, v, w = data
    m = _module(w)
    out, weights = m(*(T(a[0]) for a in (q, k, v)), need_weights=True)
    expected, ew = np_mha(q[:1], k[:1], v[:1], w, H)
    assert out.shape == (3, E) and weights.shape == (H, 3, 4)
    np.testing.assert_allclose(out.numpy(), expected[0], rtol=1e-10, atol=1e-12)
    _, avg = m(*(T(a[0]) for a in (q, k, v)), need_weights=True,
               average_attn_weights=True)
    np.testing.assert_allclose(avg.numpy(), ew.mean(0), rtol=1e-10, atol=1e-12)


def test_bias_kv_and_zero_attn(data):
    q, k, v, w = data
    mge.random.seed(1)
    m = M.MultiHeadAttention(E, H, add_bias_kv=True, add_zero_attn=True)
    assert m.bias_k.shape == m.bias_v.shape == (1, 1, E)
    m.io_weight_bias = mge.Parameter(w.reshape(1, -1), dtype="float64")
    bk, bv = m.bias_k.numpy().astype(np.float64), m.bias_v.numpy().astype(np.float64)
    m.bias_k, m.bias_v = T(bk), T(bv)
    m.eval()
    out, weights = m(*map(T, (q, k, v)), need_weights=True)
    expected, ew = np_mha(q, k, v, w, H, bias_k=bk, bias_v=bv, zero_attn=True)
    assert weights.shape == (2 * H, 3, 6)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-10, atol=1e-12)


def test_dropout_only_in_training(data):
    q, k, v, w = data
    m = _module(w, attn_dropout=0.5, out_dropout=0.5)
    assert m.attn_dropout == 0.5  # kept (MegEngine's reset_parameters zeroes them)
    a, _ = m(*map(T, (q, k, v)))
    b, _ = m(*map(T, (q, k, v)))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    m.train()
    c, _ = m(*map(T, (q, k, v)))
    assert (c.numpy() == 0).any() and not np.allclose(c.numpy(), a.numpy())


def test_init_and_layout():
    mge.random.seed(2)
    m = M.MultiHeadAttention(8, 2, kdim=5, vdim=6)
    assert m.io_weight_bias.shape == (1, (8 + 5 + 6 + 8) * 8 + 32)
    w = m.io_weight_bias.numpy()[0]
    assert not w[-32:].any() and w[:-32].std() > 0
    bound = np.sqrt(6 / (1 + w.size))  # xavier_uniform_ of a (1, len) tensor
    assert np.abs(w).max() <= bound
    assert M.MultiHeadAttention(8, 2, bias=False).io_weight_bias.shape == (1, 4 * 64)


def test_errors(data):
    q, k, v, w = data
    with pytest.raises(ValueError, match="embed_dim must be divisible by num_heads"):
        M.MultiHeadAttention(8, 3)
    m = _module(w)
    with pytest.raises(ValueError, match=r"multi_head_attention: attn_mask has shape \(2, 2\)"):
        m(*map(T, (q, k, v)), attn_mask=mge.tensor(np.zeros((2, 2))))
    with pytest.raises(ValueError, match="multi_head_attention: the batch sizes"):
        m(mge.tensor(q), mge.tensor(k[:1]), mge.tensor(v[:1]))
    with pytest.raises(ValueError, match="query must be a 2-D .* or 3-D"):
        m(mge.tensor(q[None]), mge.tensor(k), mge.tensor(v))
    with pytest.raises(NotImplementedError, match="maybe_cudnn_style_mask"):
        m(*map(T, (q, k, v)), maybe_cudnn_style_mask=True)
    with pytest.raises(ValueError, match="io_weight_bias has 10 elements"):
        F.nn.multi_head_attention(*map(T, (q, k, v)), E, H, 0.0, 0.0,
                                  mge.tensor(np.zeros((1, 10))))
    with pytest.raises(ValueError, match="query projection bias is true"):
        F.nn.multi_head_attention(*map(T, (q, k, v)), E, H, 0.0, 0.0,
                                  mge.tensor(w), qproj_size=0, qbias=True)


def test_gradients(data):
    q, k, v, w = data
    q, k, v = q[:, :2, :], k[:, :3, :], v[:, :3, :]
    mask = np.random.default_rng(3).standard_normal((2, 3))

    def fn(q, k, v, w, mask):
        out, weights = F.nn.multi_head_attention(q, k, v, E, H, 0.0, 0.0, w.reshape(1, -1),
                                                 qbias=True, kbias=True, vbias=True, obias=True,
                                                 attn_mask=mask, need_weights=True,
                                                 training=False)
        return out, weights
    check_grads(fn, q, k, v, w, mask, rtol=1e-5, atol=1e-7)
