"""Write ``megengine_rnn_refs.npz``: MegEngine 1.13's outputs for the layers of
tests/test_rnn.py, tests/test_attention.py, tests/test_lamb.py and tests/test_fused_modules.py.

Run with MegEngine's interpreter (never a test dependency; the tests only read the .npz)::

    /work/meg/bin/python tests/data/gen_megengine_rnn_refs.py

Every case stores its inputs, its weights (a MegEngine ``state_dict``, keys prefixed
``<case>/sd/``) and MegEngine's outputs, under keys ``<case>/<name>``.  The inputs are drawn from
a fixed numpy seed, so the file is the same on every run.
"""
import os

import numpy as np

import megengine as mge
import megengine.functional as F
import megengine.module as M

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "megengine_rnn_refs.npz")
rng = np.random.default_rng(20240601)
refs = {}


def f32(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype("float32")


def put(case, name, value):
    refs[f"{case}/{name}"] = np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def put_state(case, module):
    for k, v in module.state_dict().items():
        refs[f"{case}/sd/{k}"] = np.asarray(v)


def randomize(module, scale=0.5):
    # Fresh values for every parameter (and buffer), so the reference does not depend on
    # MegEngine's random generator.
    sd = {k: f32(*np.shape(v), scale=scale) if np.size(v) else np.asarray(v)
          for k, v in module.state_dict().items()}
    module.load_state_dict(sd)


# -- recurrent layers --------------------------------------------------------------------------

RNN_CASES = {
    # name: (kind, kwargs, seq_len, batch, with_state)
    "rnn_tanh": ("RNN", dict(input_size=3, hidden_size=4), 5, 2, True),
    "rnn_relu_2l_bi": ("RNN", dict(input_size=3, hidden_size=4, num_layers=2,
                                   bidirectional=True, nonlinearity="relu"), 4, 3, True),
    "rnn_nobias_bf": ("RNN", dict(input_size=3, hidden_size=5, bias=False, batch_first=True),
                      4, 2, False),
    "lstm": ("LSTM", dict(input_size=3, hidden_size=4), 5, 2, True),
    "lstm_2l_bi": ("LSTM", dict(input_size=3, hidden_size=4, num_layers=2, bidirectional=True),
                   4, 3, True),
    "lstm_3l_bf_nobias": ("LSTM", dict(input_size=2, hidden_size=3, num_layers=3, bias=False,
                                       batch_first=True), 3, 2, False),
}

for case, (kind, kwargs, seq_len, batch, with_state) in RNN_CASES.items():
    m = getattr(M, kind)(**kwargs)
    randomize(m)
    m.eval()
    d = 2 if kwargs.get("bidirectional") else 1
    layers = kwargs.get("num_layers", 1)
    shape = (batch, seq_len) if kwargs.get("batch_first") else (seq_len, batch)
    x = f32(*shape, kwargs["input_size"])
    put_state(case, m)
    put(case, "x", x)
    state_shape = (d * layers, batch, kwargs["hidden_size"])
    if kind == "RNN":
        h0 = f32(*state_shape) if with_state else None
        out, hn = m(mge.tensor(x), None if h0 is None else mge.tensor(h0))
        if h0 is not None:
            put(case, "h0", h0)
        put(case, "out", out)
        put(case, "hn", hn)
    else:
        hx = (f32(*state_shape), f32(*state_shape)) if with_state else None
        out, (hn, cn) = m(mge.tensor(x), None if hx is None else tuple(map(mge.tensor, hx)))
        if hx is not None:
            put(case, "h0", hx[0])
            put(case, "c0", hx[1])
        put(case, "out", out)
        put(case, "hn", hn)
        put(case, "cn", cn)

for case, cell, with_state in [("rnncell", M.RNNCell(3, 4), True),
                               ("rnncell_relu_nobias", M.RNNCell(3, 4, bias=False,
                                                                 nonlinearity="relu"), False),
                               ("lstmcell", M.LSTMCell(3, 4), True),
                               ("lstmcell_nobias", M.LSTMCell(3, 4, bias=False), False)]:
    randomize(cell)
    x = f32(2, 3)
    put_state(case, cell)
    put(case, "x", x)
    if isinstance(cell, M.LSTMCell):
        hx = (f32(2, 4), f32(2, 4)) if with_state else None
        h, c = cell(mge.tensor(x), None if hx is None else tuple(map(mge.tensor, hx)))
        if hx is not None:
            put(case, "h0", hx[0])
            put(case, "c0", hx[1])
        put(case, "h", h)
        put(case, "c", c)
    else:
        h0 = f32(2, 4) if with_state else None
        h = cell(mge.tensor(x), None if h0 is None else mge.tensor(h0))
        if h0 is not None:
            put(case, "h0", h0)
        put(case, "h", h)

# -- multi-head attention ----------------------------------------------------------------------

N, L, S, E, H = 2, 3, 4, 8, 2
MHA_CASES = {
    # name: (module kwargs, forward kwargs builder)
    "mha_self": (dict(embed_dim=E, num_heads=H), {}),
    "mha_kv_dims": (dict(embed_dim=E, num_heads=4, kdim=5, vdim=6), {}),
    "mha_nobias": (dict(embed_dim=E, num_heads=H, bias=False), {}),
    "mha_weights": (dict(embed_dim=E, num_heads=H), dict(need_weights=True)),
    "mha_avg_weights": (dict(embed_dim=E, num_heads=H),
                        dict(need_weights=True, average_attn_weights=True)),
    "mha_attn_mask": (dict(embed_dim=E, num_heads=H), dict(attn_mask="float2d")),
    # (no boolean masks: MegEngine 1.13's CPU conversion of them gives NaN rows for attn_mask
    # and is ignored for key_padding_mask; tests/test_attention.py checks mge's against -inf masks)
    "mha_mask3d_kpm": (dict(embed_dim=E, num_heads=H),
                       dict(attn_mask="float3d", key_padding_mask="float")),
    "mha_causal_with_mask": (dict(embed_dim=E, num_heads=H),
                             dict(attn_mask="float2d", is_causal=True)),
    "mha_kpm": (dict(embed_dim=E, num_heads=H), dict(key_padding_mask="float")),
}

for case, (mkw, fkw) in MHA_CASES.items():
    m = M.MultiHeadAttention(**mkw)
    m.io_weight_bias._reset(mge.tensor(f32(*m.io_weight_bias.shape, scale=0.3)))
    m.eval()
    kdim, vdim = mkw.get("kdim") or E, mkw.get("vdim") or E
    q, k, v = f32(N, L, E), f32(N, S, kdim), f32(N, S, vdim)
    if case == "mha_self":
        k = v = q
    put_state(case, m)
    put(case, "q", q)
    put(case, "k", k)
    put(case, "v", v)
    kwargs = dict(fkw)
    heads = mkw["num_heads"]
    if kwargs.get("attn_mask") == "float2d":
        kwargs["attn_mask"] = f32(L, L if case == "mha_self" else S)
    elif kwargs.get("attn_mask") == "float3d":
        kwargs["attn_mask"] = f32(N * heads, L, S)
    if kwargs.get("key_padding_mask") == "float":
        kpm = np.zeros((N, S), "float32")
        kpm[0, 3] = -1e9
        kpm[1, 0] = -1e9
        kwargs["key_padding_mask"] = kpm
    for name in ("attn_mask", "key_padding_mask"):
        if name in kwargs:
            put(case, name, kwargs[name])
            kwargs[name] = mge.tensor(kwargs[name])
    out, weights = m(mge.tensor(q), mge.tensor(k), mge.tensor(v), **kwargs)
    put(case, "out", out)
    if weights is not None:
        put(case, "weights", weights)

# The functional with projections switched off (qproj_size=0...): one head sees the whole input.
case = "mha_f_noproj_out"
q, k, v = f32(N, L, E), f32(N, S, E), f32(N, S, E)
w = f32(1, (E + E + E) * E, scale=0.3)  # q, k and v projections, no output projection
out, _ = F.nn.multi_head_attention(mge.tensor(q), mge.tensor(k), mge.tensor(v), E, H, 0.0, 0.0,
                                   mge.tensor(w), E, E, E, 0, training=False)
for name, value in dict(q=q, k=k, v=v, w=w, out=out).items():
    put(case, name, value)

# -- LAMB --------------------------------------------------------------------------------------

TARGET = np.linspace(-1.0, 1.5, 12, dtype="float32").reshape(3, 4)


def grad_of(p):
    # A fixed, parameter-dependent gradient: d/dp of 0.5 * sum((p - t)^2 * (1 + |t|)) + 0.1 p^3.
    return ((p - TARGET) * (1 + np.abs(TARGET)) + 0.3 * p * p).astype(p.dtype)


# MegEngine 1.13's ``optim.LAMB`` cannot be built (its ``_create_state`` passes ``dtype=`` to
# ``Optimizer._add_state``, which has no such argument: TypeError), so the trajectories come from
# its ``LAMBUpdate`` op, driven as ``LAMB._updates`` / ``LAMBFp16._updates`` drive it.
from megengine.core._imperative_rt.core2 import apply  # noqa: E402
from megengine.core.ops.builtin import LAMBUpdate  # noqa: E402

LAMB_CASES = {
    # name: (hyperparameters, param dtype)
    "lamb_default": (dict(lr=0.01), "float32"),
    "lamb_no_bias_correction": (dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6,
                                     bias_correction=False), "float32"),
    "lamb_fp16": (dict(lr=0.01), "float16"),
    # weight decay > 0 turns the trust ratio on; MegEngine's CPU kernel sums the squares of the
    # parameter in an int (std::accumulate with init 0), so its p_norm is off: kept to show it.
    "lamb_wd": (dict(lr=0.01, weight_decay=0.1), "float32"),
}
STEPS = 6
for case, (kwargs, dtype) in LAMB_CASES.items():
    lr = kwargs["lr"]
    beta0, beta1 = kwargs.get("betas", (0.9, 0.999))
    eps = kwargs.get("eps", 1e-8)
    wd = kwargs.get("weight_decay", 0.0)
    bc = kwargs.get("bias_correction", True)
    p0 = rng.uniform(-2, 2, size=(3, 4)).astype(dtype)
    p32 = mge.tensor(p0.astype("float32"))
    m = mge.tensor(np.zeros((3, 4), "float32"))
    v = mge.tensor(np.zeros((3, 4), "float32"))
    p = p0
    traj = []
    for step in range(1, STEPS + 1):
        g = mge.tensor(grad_of(p), dtype=dtype)
        op = LAMBUpdate(beta0, beta1, step, lr, wd, eps, bc, False)
        m, v, p32 = apply(op, m, v, p32, g)
        p = p32.numpy().astype(dtype)
        traj.append(p)
    put(case, "p0", p0)
    put(case, "traj", np.stack(traj))
    put(case, "exp_avg", m)
    put(case, "exp_avg_sq", v)

# -- fused modules -----------------------------------------------------------------------------

FUSED = {
    "convbn2d": (M.ConvBn2d, dict(in_channels=3, out_channels=4, kernel_size=3, padding=1),
                 (2, 3, 5, 5)),
    "convbnrelu2d": (M.ConvBnRelu2d, dict(in_channels=3, out_channels=4, kernel_size=3,
                                          stride=2, bias=False), (2, 3, 6, 6)),
    "convtransposebn2d": (M.ConvTransposeBn2d, dict(in_channels=3, out_channels=2,
                                                    kernel_size=3, stride=2), (2, 3, 3, 3)),
    "convtransposebnrelu2d": (M.ConvTransposeBnRelu2d, dict(in_channels=3, out_channels=2,
                                                            kernel_size=2), (2, 3, 3, 3)),
    "linearbn1d": (M.LinearBn1d, dict(in_features=5, out_features=3), (6, 5)),
    "linearbnrelu1d": (M.LinearBnRelu1d, dict(in_features=5, out_features=3, bias=False),
                       (6, 5)),
}
for case, (cls, kwargs, shape) in FUSED.items():
    m = cls(**kwargs)
    sd = {}
    for k, v in m.state_dict().items():
        if k.endswith("running_var"):
            sd[k] = rng.uniform(0.5, 2.0, size=np.shape(v)).astype("float32")
        else:
            sd[k] = f32(*np.shape(v), scale=0.5)
    m.load_state_dict(sd)
    put_state(case, m)
    x = f32(*shape)
    put(case, "x", x)
    m.eval()
    put(case, "eval_out", m(mge.tensor(x)))
    m.train()
    put(case, "train_out", m(mge.tensor(x)))
    put(case, "running_mean", m.bn.running_mean)
    put(case, "running_var", m.bn.running_var)

np.savez_compressed(OUT, **refs)
print(f"wrote {len(refs)} arrays to {OUT}")
