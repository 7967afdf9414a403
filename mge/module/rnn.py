r"""Recurrent layers: ``RNNCell``, ``LSTMCell``, ``RNN`` and ``LSTM`` (MegEngine 1.13's
``megengine.module.rnn``).

The layers compute with :mod:`mge.functional` ops (``linear``, ``tanh``, ``sigmoid``, ``split``,
``stack``, ``concat``, indexing), so autodiff, tracing and DTR see every step as ordinary ops.

As in MegEngine, ``RNN`` and ``LSTM`` keep all their weights in one parameter,
``_flatten_weights`` of shape ``(gate_hidden_size, sum_cells(in_size + hidden_size) + 2 * cells)``
(the last term only with ``bias``), and ``forward`` reads only that parameter.  Its memory is the
concatenation, cell after cell (layer-major, then direction), of the flattened ``weight_ih``
``(G, in)``, ``weight_hh`` ``(G, H)``, ``bias_ih`` ``(G,)`` and ``bias_hh`` ``(G,)``.  The per-cell
modules in ``cells[layer][direction]`` exist too, with their own parameters, because MegEngine has
them: they give MegEngine's ``state_dict`` keys (``cells.0.0.weight_ih``...), so its checkpoints
load, but ``forward`` does not use them.  MegEngine 1.13 has no GRU.
"""
import math
import numbers

import numpy as np

from ..functional import concat, linear, relu, sigmoid, split, stack, tanh, zeros
from ..functional.nn import dropout as _dropout
from ..tensor import Parameter, Tensor
from . import init
from .module import Module

__all__ = ["RNNCell", "LSTMCell", "RNN", "LSTM"]

_NONLINEARITIES = {"tanh": tanh, "relu": relu}


def _nonlinearity(owner, name):
    try:
        return _NONLINEARITIES[name]
    except (KeyError, TypeError):
        raise ValueError(f"{owner}: nonlinearity must be 'tanh' or 'relu', got {name!r}") from None


def _check_shape(owner, what, tensor, expected):
    shape = tuple(tensor.shape)
    if shape != tuple(expected):
        raise ValueError(f"{owner}: {what} has shape {shape}, expected {tuple(expected)}")


class RNNCellBase(Module):
    """The parameters of one recurrent cell: ``weight_ih`` ``(G, input_size)``, ``weight_hh``
    ``(G, hidden_size)`` and, with ``bias``, ``bias_ih`` and ``bias_hh`` ``(G,)``, where ``G`` is
    ``num_chunks * hidden_size`` (the gates).  Without ``bias`` the biases are zero buffers, as in
    MegEngine (they appear in ``state_dict``).  Every parameter starts uniform in
    :math:`[-1/\\sqrt{H}, 1/\\sqrt{H}]`."""

    def __init__(self, input_size, hidden_size, bias, num_chunks):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        self.gate_hidden_size = num_chunks * hidden_size
        self.weight_ih = Parameter(np.zeros((self.gate_hidden_size, input_size), dtype=np.float32))
        self.weight_hh = Parameter(np.zeros((self.gate_hidden_size, hidden_size), dtype=np.float32))
        if bias:
            self.bias_ih = Parameter(np.zeros((self.gate_hidden_size,), dtype=np.float32))
            self.bias_hh = Parameter(np.zeros((self.gate_hidden_size,), dtype=np.float32))
        else:
            self.bias_ih = zeros(shape=(self.gate_hidden_size,))
            self.bias_hh = zeros(shape=(self.gate_hidden_size,))
        self.reset_parameters()

    def reset_parameters(self):
        """Draw every parameter uniformly from :math:`[-1/\\sqrt{H}, 1/\\sqrt{H}]`."""
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def _check_input(self, input):
        owner = type(self).__name__
        if input.ndim != 2 or input.shape[1] != self.input_size:
            raise ValueError(f"{owner}: input has shape {tuple(input.shape)}, expected "
                             f"(batch, {self.input_size})")

    def forward(self, input, hx=None):
        raise NotImplementedError(f"{type(self).__name__}.forward is not implemented")

    def _module_info_string(self):
        return "input_size={}, hidden_size={}, bias={}".format(
            self.input_size, self.hidden_size, self.bias)


def _rnn_step(x_proj, h, weight_hh, act):
    return act(x_proj + linear(h, weight_hh))


def _lstm_step(x_proj, h, c, weight_hh):
    gates = x_proj + linear(h, weight_hh)
    i, f, g, o = split(gates, 4, axis=1)
    c = sigmoid(f) * c + sigmoid(i) * tanh(g)
    return sigmoid(o) * tanh(c), c


class RNNCell(RNNCellBase):
    r"""An Elman RNN cell with tanh or ReLU non-linearity.

    .. math::

        h' = \tanh(W_{ih} x + b_{ih}  +  W_{hh} h + b_{hh})

    Args:
        input_size: the number of features of the input ``x``.
        hidden_size: the number of features of the hidden state ``h``.
        bias: if ``False``, the cell has no ``b_ih`` and ``b_hh`` (they are zero). Default: ``True``
        nonlinearity: ``'tanh'`` or ``'relu'``. Default: ``'tanh'``

    Inputs: ``input`` ``(batch, input_size)`` and ``hx`` ``(batch, hidden_size)`` (zeros when
    ``None``).  Output: the next hidden state ``(batch, hidden_size)``.

    Example:
        >>> import numpy as np, mge, mge.module as M
        >>> m = M.RNNCell(10, 20)
        >>> m(mge.tensor(np.random.randn(3, 10).astype("float32"))).shape
        (3, 20)
    """

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh"):
        self.nonlinearity = nonlinearity
        _nonlinearity("RNNCell", nonlinearity)
        super().__init__(input_size, hidden_size, bias, num_chunks=1)

    def forward(self, input, hx=None):
        self._check_input(input)
        if hx is None:
            hx = zeros(shape=(input.shape[0], self.gate_hidden_size), dtype=input.dtype)
        else:
            _check_shape("RNNCell", "hx", hx, (input.shape[0], self.hidden_size))
        act = _nonlinearity("RNNCell", self.nonlinearity)
        x_proj = linear(input, self.weight_ih, self.bias_ih + self.bias_hh)
        return _rnn_step(x_proj, hx, self.weight_hh, act)

    def _module_info_string(self):
        return super()._module_info_string() + f", nonlinearity={self.nonlinearity}"


class LSTMCell(RNNCellBase):
    r"""A long short-term memory (LSTM) cell.

    .. math::

        \begin{array}{ll}
        i = \sigma(W_{ii} x + b_{ii} + W_{hi} h + b_{hi}) \\
        f = \sigma(W_{if} x + b_{if} + W_{hf} h + b_{hf}) \\
        g = \tanh(W_{ig} x + b_{ig} + W_{hg} h + b_{hg}) \\
        o = \sigma(W_{io} x + b_{io} + W_{ho} h + b_{ho}) \\
        c' = f * c + i * g \\
        h' = o * \tanh(c') \\
        \end{array}

    The gates are stacked in ``weight_ih`` / ``weight_hh`` in the order ``i, f, g, o``
    (``(4 * hidden_size, ...)``).

    Args:
        input_size: the number of features of the input ``x``.
        hidden_size: the number of features of the hidden and cell states.
        bias: if ``False``, the cell has no ``b_ih`` and ``b_hh``. Default: ``True``

    Inputs: ``input`` ``(batch, input_size)`` and ``hx = (h_0, c_0)``, each
    ``(batch, hidden_size)`` (zeros when ``None``).  Outputs: ``(h_1, c_1)``.

    Example:
        >>> import numpy as np, mge, mge.module as M
        >>> m = M.LSTMCell(10, 20)
        >>> h, c = m(mge.tensor(np.random.randn(3, 10).astype("float32")))
        >>> h.shape, c.shape
        ((3, 20), (3, 20))
    """

    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__(input_size, hidden_size, bias, num_chunks=4)

    def forward(self, input, hx=None):
        self._check_input(input)
        shape = (input.shape[0], self.hidden_size)
        if hx is None:
            h = zeros(shape=shape, dtype=input.dtype)
            c = zeros(shape=shape, dtype=input.dtype)
        else:
            if not isinstance(hx, (tuple, list)) or len(hx) != 2:
                raise TypeError("LSTMCell: hx must be a tuple (h, c), got "
                                f"{type(hx).__name__}")
            h, c = hx
            _check_shape("LSTMCell", "h", h, shape)
            _check_shape("LSTMCell", "c", c, shape)
        x_proj = linear(input, self.weight_ih, self.bias_ih + self.bias_hh)
        return _lstm_step(x_proj, h, c, self.weight_hh)


class RNNBase(Module):
    """What ``RNN`` and ``LSTM`` share: the arguments, the cells, ``_flatten_weights`` and the
    layer/direction loop of ``forward``."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0, bidirectional=False, proj_size=0):
        super().__init__()
        owner = type(self).__name__
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        if (not isinstance(dropout, numbers.Number) or isinstance(dropout, bool)
                or not 0 <= dropout <= 1):
            raise ValueError(
                "Dropout should be a float in [0, 1], which indicates the probability "
                "of an element to be zero")
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.num_directions = 2 if bidirectional else 1
        self.proj_size = proj_size
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        elif proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        elif proj_size > 0:
            # MegEngine 1.13 accepts proj_size and silently ignores it (its kernels and
            # _flatten_weights have no projection); mge says so instead of computing without it.
            raise NotImplementedError(
                f"{owner}: proj_size={proj_size} (LSTM with projections) is not implemented: "
                "MegEngine 1.13 ignores it, and mge does not silently do the same")
        if int(num_layers) != num_layers or num_layers < 1:
            raise ValueError(f"{owner}: num_layers must be a positive integer, got {num_layers!r}")

        self.cells = []
        for layer in range(self.num_layers):
            self.cells.append([])
            for _ in range(self.num_directions):
                self.cells[layer].append(self.create_cell(layer))
        self._flatten_parameters(self.cells)

    def _flatten_parameters(self, cells):
        gate_hidden_size = cells[0][0].gate_hidden_size
        size_dim1 = 0
        for layer in range(self.num_layers):
            for direction in range(self.num_directions):
                size_dim1 += cells[layer][direction].weight_ih.shape[1]
                size_dim1 += cells[layer][direction].weight_hh.shape[1]
        if self.bias:
            size_dim1 += 2 * self.num_directions * self.num_layers
        self._flatten_weights = Parameter(np.zeros((gate_hidden_size, size_dim1), dtype=np.float32))
        self.reset_parameters()

    def reset_parameters(self):
        """Draw every parameter (``_flatten_weights`` and the cells') uniformly from
        :math:`[-1/\\sqrt{H}, 1/\\sqrt{H}]`."""
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def create_cell(self, layer):
        raise NotImplementedError(f"{type(self).__name__}.create_cell is not implemented")

    def _cell_input_size(self, layer):
        return self.input_size if layer == 0 else self.num_directions * self.hidden_size

    def _cell_weights(self):
        """``[(weight_ih, weight_hh, bias)]`` per cell (layer-major), views of
        ``_flatten_weights`` (``bias`` is ``bias_ih + bias_hh``, or ``None``)."""
        flat = self._flatten_weights.flatten()
        gate = self._flatten_weights.shape[0]
        expected = 0
        for layer in range(self.num_layers):
            per_cell = self._cell_input_size(layer) + self.hidden_size + (2 if self.bias else 0)
            expected += self.num_directions * gate * per_cell
        if flat.shape[0] != expected:
            raise ValueError(f"{type(self).__name__}: _flatten_weights has shape "
                             f"{tuple(self._flatten_weights.shape)}, which does not hold the "
                             f"weights of {self.num_layers} layer(s) x {self.num_directions} "
                             f"direction(s)")
        out = []
        offset = 0
        for layer in range(self.num_layers):
            in_size = self._cell_input_size(layer)
            for _ in range(self.num_directions):
                w_ih = flat[offset:offset + gate * in_size].reshape(gate, in_size)
                offset += gate * in_size
                w_hh = flat[offset:offset + gate * self.hidden_size]
                w_hh = w_hh.reshape(gate, self.hidden_size)
                offset += gate * self.hidden_size
                b = None
                if self.bias:
                    b = flat[offset:offset + gate] + flat[offset + gate:offset + 2 * gate]
                    offset += 2 * gate
                out.append((w_ih, w_hh, b))
        return out

    def _check_input(self, input):
        owner = type(self).__name__
        layout = "(batch, seq_len, input_size)" if self.batch_first else \
            "(seq_len, batch, input_size)"
        if input.ndim != 3 or input.shape[2] != self.input_size:
            raise ValueError(f"{owner}: input has shape {tuple(input.shape)}, expected {layout} "
                             f"with input_size={self.input_size} (batch_first={self.batch_first})")

    def _state_shape(self, batch_size):
        return (self.num_directions * self.num_layers, batch_size, self.hidden_size)

    def init_hidden(self, batch_size, dtype="float32"):
        raise NotImplementedError(f"{type(self).__name__}.init_hidden is not implemented")

    def _run_direction(self, x_proj, states, w_hh, reverse):
        raise NotImplementedError

    def _run(self, input, states):
        """The layers over ``input`` ``(T, B, in)``; ``states`` is a list (one per state kind) of
        ``(D * L, B, H)`` tensors.  Returns the output and the final states as such a list."""
        seq_len, batch = input.shape[0], input.shape[1]
        weights = self._cell_weights()
        finals = [[] for _ in states]
        x = input
        for layer in range(self.num_layers):
            if layer > 0 and self.training and self.dropout > 0:
                # MegEngine's CPU kernel ignores dropout; mge applies it as documented (and as
                # cuDNN does): on every layer's output but the last, in training only.
                x = _dropout(x, self.dropout, training=True)
            in_size = x.shape[2]
            outs = []
            for d in range(self.num_directions):
                idx = layer * self.num_directions + d
                w_ih, w_hh, b = weights[idx]
                x_proj = linear(x.reshape(seq_len * batch, in_size), w_ih, b)
                x_proj = x_proj.reshape(seq_len, batch, w_ih.shape[0])
                init_states = [s[idx] for s in states]
                out, last = self._run_direction(x_proj, init_states, w_hh, reverse=d == 1)
                outs.append(out)
                for f, s in zip(finals, last):
                    f.append(s)
            x = outs[0] if len(outs) == 1 else concat(outs, axis=2)
        return x, [stack(f, axis=0) for f in finals]

    def _states(self, hx, batch_size, dtype):
        raise NotImplementedError

    def forward(self, input, hx=None):
        self._check_input(input)
        if self.batch_first:
            batch_size = input.shape[0]
            input = input.transpose((1, 0, 2))
        else:
            batch_size = input.shape[1]
        states = self._states(hx, batch_size, input.dtype)
        output, finals = self._run(input, states)
        if self.batch_first:
            output = output.transpose((1, 0, 2))
        return output, self._pack_states(finals)

    def _module_info_string(self):
        s = "{}, {}".format(self.input_size, self.hidden_size)
        if self.num_layers != 1:
            s += ", num_layers={}".format(self.num_layers)
        if self.bias is not True:
            s += ", bias={}".format(self.bias)
        if self.batch_first is not False:
            s += ", batch_first={}".format(self.batch_first)
        if self.dropout != 0:
            s += ", dropout={}".format(self.dropout)
        if self.bidirectional is not False:
            s += ", bidirectional={}".format(self.bidirectional)
        return s


def _time_steps(x_proj, reverse):
    steps = list(range(x_proj.shape[0]))
    return steps[::-1] if reverse else steps


class RNN(RNNBase):
    r"""A multi-layer Elman RNN with :math:`\tanh` or :math:`\text{ReLU}` non-linearity.

    For each element of the input sequence each layer computes

    .. math::
        h_t = \tanh(W_{ih} x_t + b_{ih} + W_{hh} h_{(t-1)} + b_{hh})

    Args:
        input_size: the number of features of the input ``x``.
        hidden_size: the number of features of the hidden state ``h``.
        num_layers: the number of stacked recurrent layers. Default: 1
        nonlinearity: ``'tanh'`` or ``'relu'``. Default: ``'tanh'``
        bias: if ``False``, the layers have no ``b_ih`` and ``b_hh``. Default: ``True``
        batch_first: if ``True``, input and output are ``(batch, seq, feature)`` instead of
            ``(seq, batch, feature)`` (not the hidden state). Default: ``False``
        dropout: if non-zero, dropout with this probability on the outputs of every layer but
            the last, in training mode. Default: 0
        bidirectional: if ``True``, a bidirectional RNN. Default: ``False``

    Inputs: ``input`` ``(L, N, H_in)`` (or ``(N, L, H_in)`` with ``batch_first``) and ``h_0``
    ``(D * num_layers, N, H_out)`` (zeros when ``None``), ``D`` being 2 if bidirectional else 1.
    Outputs: ``output`` ``(L, N, D * H_out)`` (``(N, L, D * H_out)`` with ``batch_first``) and
    ``h_n`` ``(D * num_layers, N, H_out)``.

    Example:
        >>> import numpy as np, mge, mge.module as M
        >>> m = M.RNN(10, 20, 2, nonlinearity="relu", bidirectional=True)
        >>> out, hn = m(mge.tensor(np.random.randn(6, 3, 10).astype("float32")))
        >>> out.shape, hn.shape
        ((6, 3, 40), (4, 3, 20))
    """

    def __init__(self, *args, **kwargs):
        self.nonlinearity = kwargs.pop("nonlinearity", "tanh")
        _nonlinearity("RNN", self.nonlinearity)
        super().__init__(*args, **kwargs)

    def create_cell(self, layer):
        return RNNCell(self._cell_input_size(layer), self.hidden_size, self.bias, self.nonlinearity)

    def init_hidden(self, batch_size, dtype="float32"):
        """Zeros of shape ``(D * num_layers, batch_size, hidden_size)``."""
        return zeros(shape=self._state_shape(batch_size), dtype=dtype)

    def get_output_from_hidden(self, hx):
        """The hidden state itself (an RNN has no cell state)."""
        return hx

    def _states(self, hx, batch_size, dtype):
        if hx is None:
            hx = self.init_hidden(batch_size, dtype)
        elif not isinstance(hx, Tensor):
            raise TypeError(f"RNN: hx must be a Tensor, got {type(hx).__name__}")
        _check_shape("RNN", "hx", hx, self._state_shape(batch_size))
        return [hx]

    def _pack_states(self, finals):
        return finals[0]

    def _run_direction(self, x_proj, states, w_hh, reverse):
        act = _nonlinearity("RNN", self.nonlinearity)
        (h,) = states
        outs = [None] * x_proj.shape[0]
        for t in _time_steps(x_proj, reverse):
            h = _rnn_step(x_proj[t], h, w_hh, act)
            outs[t] = h
        return stack(outs, axis=0), [h]

    def _module_info_string(self):
        s = super()._module_info_string()
        if self.nonlinearity != "tanh":
            s += ", nonlinearity={}".format(self.nonlinearity)
        return s


class LSTM(RNNBase):
    r"""A multi-layer long short-term memory (LSTM) network.

    For each element of the input sequence each layer computes

    .. math::
        \begin{array}{ll} \\
            i_t = \sigma(W_{ii} x_t + b_{ii} + W_{hi} h_{t-1} + b_{hi}) \\
            f_t = \sigma(W_{if} x_t + b_{if} + W_{hf} h_{t-1} + b_{hf}) \\
            g_t = \tanh(W_{ig} x_t + b_{ig} + W_{hg} h_{t-1} + b_{hg}) \\
            o_t = \sigma(W_{io} x_t + b_{io} + W_{ho} h_{t-1} + b_{ho}) \\
            c_t = f_t \odot c_{t-1} + i_t \odot g_t \\
            h_t = o_t \odot \tanh(c_t) \\
        \end{array}

    Args:
        input_size: the number of features of the input ``x``.
        hidden_size: the number of features of the hidden and cell states.
        num_layers: the number of stacked LSTM layers. Default: 1
        bias: if ``False``, the layers have no ``b_ih`` and ``b_hh``. Default: ``True``
        batch_first: if ``True``, input and output are ``(batch, seq, feature)`` instead of
            ``(seq, batch, feature)`` (not the states). Default: ``False``
        dropout: if non-zero, dropout with this probability on the outputs of every layer but
            the last, in training mode. Default: 0
        bidirectional: if ``True``, a bidirectional LSTM. Default: ``False``
        proj_size: must be 0: LSTM with projections raises ``NotImplementedError`` (MegEngine
            1.13 accepts it and ignores it). Default: 0

    Inputs: ``input`` ``(L, N, H_in)`` (or ``(N, L, H_in)`` with ``batch_first``) and
    ``(h_0, c_0)``, each ``(D * num_layers, N, H)`` (zeros when ``None``).
    Outputs: ``output`` ``(L, N, D * H)`` (``(N, L, D * H)`` with ``batch_first``) and
    ``(h_n, c_n)``, each ``(D * num_layers, N, H)``.

    Example:
        >>> import numpy as np, mge, mge.module as M
        >>> m = M.LSTM(10, 20, 2, bidirectional=True)
        >>> out, (hn, cn) = m(mge.tensor(np.random.randn(6, 3, 10).astype("float32")))
        >>> out.shape, hn.shape, cn.shape
        ((6, 3, 40), (4, 3, 20), (4, 3, 20))
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)

    def create_cell(self, layer):
        return LSTMCell(self._cell_input_size(layer), self.hidden_size, self.bias)

    def init_hidden(self, batch_size, dtype="float32"):
        """``(h, c)``, zeros of shape ``(D * num_layers, batch_size, hidden_size)``."""
        shape = self._state_shape(batch_size)
        return (zeros(shape=shape, dtype=dtype), zeros(shape=shape, dtype=dtype))

    def get_output_from_hidden(self, hx):
        """The hidden state ``h`` of ``(h, c)``."""
        return hx[0]

    def _states(self, hx, batch_size, dtype):
        if hx is None:
            hx = self.init_hidden(batch_size, dtype)
        elif not isinstance(hx, (tuple, list)) or len(hx) != 2:
            raise TypeError(f"LSTM: hx must be a tuple (h_0, c_0), got {type(hx).__name__}")
        shape = self._state_shape(batch_size)
        _check_shape("LSTM", "h_0", hx[0], shape)
        _check_shape("LSTM", "c_0", hx[1], shape)
        return [hx[0], hx[1]]

    def _pack_states(self, finals):
        return (finals[0], finals[1])

    def _run_direction(self, x_proj, states, w_hh, reverse):
        h, c = states
        outs = [None] * x_proj.shape[0]
        for t in _time_steps(x_proj, reverse):
            h, c = _lstm_step(x_proj[t], h, c, w_hh)
            outs[t] = h
        return stack(outs, axis=0), [h, c]
