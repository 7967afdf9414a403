"""Tensor creation and shape manipulation (MegEngine's ``megengine.functional.tensor``).

Shape arguments may be ints, sequences of ints, or integer tensors (read on the host).
"""
import numpy as np

from .._core.device import as_device
from .._core.dtype import canonical
from .._core.ops.creation import Arange, Eye, Fill, Linspace
from .._core.ops.misc import Copy
from .._core.ops.elemwise import ComplexPart, CreateComplex
from .._core.ops.shape import (
    AddAxis, Broadcast, BroadcastTo, Concat, CondTake, Diag, Dimshuffle, Gather, RemoveAxis, Repeat, Reshape,
    Roll, Scatter, Split, Stack, Tile, Where,
)
from ..core import apply
from ..tensor import Tensor
from .utils import _is_graph_var, _tensor_like

__all__ = [
    "arange", "broadcast_to", "concat", "cond_take", "copy", "diag", "expand_dims", "eye",
    "flatten", "full", "full_like", "gather", "imag", "linspace", "meshgrid", "ones", "ones_like",
    "polar", "repeat", "reshape", "roll", "scatter", "split", "squeeze", "stack", "swapaxes",
    "tile", "transpose", "complex", "real", "where", "zeros", "zeros_like", "cumsum",
]

_int32 = np.dtype("int32")
_bool = np.dtype("bool")
_float32 = np.dtype("float32")


# -- argument helpers -----------------------------------------------------------------------------
def _int(v, fname, what):
    if type(v) is int:
        return v
    # (a 0-d integer tensor, or a (1,)-shaped one as MegEngine's shape entries may be)
    if ((isinstance(v, (Tensor, np.ndarray)) or _is_graph_var(v))
            and (v.ndim == 0 or v.shape == (1,)) or isinstance(v, np.integer)):
        if np.dtype(v.dtype).kind not in "iu":
            raise TypeError(f"{fname}: {what} must be an integer, got dtype {v.dtype}")
        return int(v.item())
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{fname}: {what} must be an integer, got {type(v).__name__}")
    return int(v)


def _shape(shape, fname, allow_none=False, allow_float=False):
    """A tuple of ints from an int, a sequence, or an integer tensor (read on the host).

    ``allow_float``: a float shape tensor is taken too when its values are whole numbers (as
    MegEngine's ``Reshape`` kernel takes one, e.g. the output of a float ``matmul``).
    """
    if isinstance(shape, (Tensor, np.ndarray)) or _is_graph_var(shape):  # (a graph var's value
        kind = np.dtype(shape.dtype).kind                               # is computed now)
        if kind == "f" and allow_float:
            vals = np.asarray(shape).reshape(-1)
            if not np.all(np.isfinite(vals)) or np.any(vals != np.trunc(vals)):
                raise TypeError(f"{fname}: a float shape tensor must hold whole numbers, got "
                                f"{vals.tolist()}")
            return tuple(int(s) for s in vals.tolist())
        if kind not in "iu":
            raise TypeError(f"{fname}: a shape tensor must be integer, got dtype {shape.dtype}")
        return tuple(int(s) for s in np.asarray(shape).reshape(-1).tolist())
    if isinstance(shape, (list, tuple)):
        return tuple(None if allow_none and s is None else _int(s, fname, "shape entries")
                     for s in shape)
    return (_int(shape, fname, "shape"),)


def _axes(axis, fname):
    if isinstance(axis, (list, tuple)):
        return tuple(_int(a, fname, "axis") for a in axis)
    return (_int(axis, fname, "axis"),)


def _tensor(x, fname, name="inp"):
    if _tensor_like(x):
        return x
    try:
        return Tensor(x)
    except TypeError as e:
        raise TypeError(f"{fname}: {name} must be a tensor or array-like, got {type(x).__name__}") \
            from e


def _number(v, fname, what="value"):
    if isinstance(v, (Tensor, np.ndarray, np.generic)) or _is_graph_var(v):
        if v.size != 1:
            raise TypeError(f"{fname}: {what} must be a number, got a tensor of shape {v.shape}")
        return v.item()
    if not isinstance(v, (bool, int, float)):
        raise TypeError(f"{fname}: {what} must be a number, got {type(v).__name__}")
    return v


# -- creation -------------------------------------------------------------------------------------
def full(shape, value, *, dtype=None, device=None):
    """A tensor of ``shape`` filled with ``value``.

    Signature: ``full(shape, value, *, dtype=None, device=None)``.

    Args:
        shape: an int, a sequence of ints or an integer tensor.
        value: the fill value (a Python number or a one-element tensor).
        dtype: defaults to the dtype of ``value`` (bool, int32 or float32).
        device: defaults to the default device.

    Example:
        >>> F.full((2, 3), 7).numpy()
        array([[7, 7, 7],
               [7, 7, 7]], dtype=int32)
    """
    shape = _shape(shape, "full")
    value = _number(value, "full")
    if dtype is None:
        dtype = _bool if isinstance(value, bool) else _int32 if isinstance(value, int) else _float32
    else:
        dtype = canonical(dtype)
    return apply(Fill.get(shape, value, dtype, as_device(device)))[0]


def zeros(shape, *, dtype="float32", device=None):
    """A tensor of zeros.  Signature: ``zeros(shape, *, dtype="float32", device=None)``."""
    return apply(Fill.get(_shape(shape, "zeros"), 0, canonical(dtype), as_device(device)))[0]


def ones(shape, *, dtype="float32", device=None):
    """A tensor of ones.  Signature: ``ones(shape, *, dtype="float32", device=None)``."""
    return apply(Fill.get(_shape(shape, "ones"), 1, canonical(dtype), as_device(device)))[0]


def full_like(inp, value):
    """A tensor with the shape, dtype and device of ``inp``, filled with ``value``.

    Signature: ``full_like(inp, value)``.
    """
    inp = _tensor(inp, "full_like")
    value = _number(value, "full_like")
    return apply(Fill.get(inp.shape, value, inp.dtype, inp.device))[0]


def zeros_like(inp):
    """Zeros with the shape, dtype and device of ``inp``.  Signature: ``zeros_like(inp)``."""
    return full_like(inp, 0)


def ones_like(inp):
    """Ones with the shape, dtype and device of ``inp``.  Signature: ``ones_like(inp)``."""
    return full_like(inp, 1)


def arange(start=0, stop=None, step=1, *, dtype="float32", device=None):
    """Evenly spaced values in ``[start, stop)``.

    Signature: ``arange(start=0, stop=None, step=1, *, dtype="float32", device=None)``; with one
    argument it is ``stop`` (``arange(5)`` is ``0, 1, 2, 3, 4``).  The length is
    ``ceil((stop - start) / step)``.

    Example:
        >>> F.arange(1, 4, 0.5).numpy()
        array([1. , 1.5, 2. , 2.5, 3. , 3.5], dtype=float32)
    """
    start = _number(start, "arange", "start")
    stop = None if stop is None else _number(stop, "arange", "stop")
    step = _number(step, "arange", "step")
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    return apply(Arange(start, stop, step, canonical(dtype), as_device(device)))[0]


def linspace(start, stop, num, *, dtype="float32", device=None):
    """``num`` evenly spaced values from ``start`` to ``stop``, both included.

    Signature: ``linspace(start, stop, num, *, dtype="float32", device=None)``.
    """
    start = _number(start, "linspace", "start")
    stop = _number(stop, "linspace", "stop")
    num = _int(num, "linspace", "num")
    if num < 0:
        raise ValueError(f"linspace: num must be non-negative, got {num}")
    return apply(Linspace(start, stop, num, canonical(dtype), as_device(device)))[0]


def eye(N, M=None, *, dtype="float32", device=None):
    """A 2-d tensor with ones on the diagonal and zeros elsewhere.

    Signature: ``eye(N, M=None, *, dtype="float32", device=None)``; ``N`` may also be a shape
    ``(N, M)``.
    """
    if M is None and not isinstance(N, (int, np.integer)) and (
            isinstance(N, (tuple, list)) or getattr(N, "ndim", 0) == 1):
        # a shape, as in MegEngine: (N,) is square, (N, M); a 1-d integer tensor is read
        shape = _shape(N, "eye")
        if len(shape) not in (1, 2):
            raise ValueError(f"eye: a shape must have 1 or 2 entries, got {tuple(shape)}")
        N, M = shape[0], shape[-1]
    N = _int(N, "eye", "N")
    M = N if M is None else _int(M, "eye", "M")
    if N < 0 or M < 0:
        raise ValueError(f"eye: sizes must be non-negative, got N={N}, M={M}")
    return apply(Eye(N, M, 0, canonical(dtype), as_device(device)))[0]


def diag(inp, k=0):
    """The diagonal ``k`` of a 2-d tensor, or a square matrix with a 1-d tensor on diagonal ``k``.

    Signature: ``diag(inp, k=0)``.
    """
    return apply(Diag(_int(k, "diag", "k")), _tensor(inp, "diag"))[0]


def meshgrid(*inputs, indexing="xy"):
    """Coordinate matrices from 1-d tensors.

    Signature: ``meshgrid(*inputs, indexing="xy")``.  With ``"ij"`` the outputs have shape
    ``(N1, N2, ..., Nn)``; with ``"xy"`` the first two sizes are swapped: ``(N2, N1, ..., Nn)``.
    Returns a list of tensors.
    """
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
        inputs = tuple(inputs[0])
    inputs = [_tensor(x, "meshgrid") for x in inputs]
    for x in inputs:
        if x.ndim != 1:
            raise ValueError(f"meshgrid: inputs must be 1-d, got shape {x.shape}")
    if any(x.dtype != inputs[0].dtype for x in inputs):
        raise TypeError("meshgrid: inputs must have the same dtype, got "
                        + ", ".join(str(x.dtype) for x in inputs))
    n = len(inputs)
    pos = list(range(n))
    if indexing == "xy" and n >= 2:
        pos[0], pos[1] = 1, 0
    out_shape = [0] * n
    for x, p in zip(inputs, pos):
        out_shape[p] = x.shape[0]
    out = []
    for x, p in zip(inputs, pos):
        shape = [1] * n
        shape[p] = x.shape[0]
        out.append(broadcast_to(reshape(x, shape), out_shape))
    return out


def copy(inp, device=None):
    """A copy of ``inp`` on ``device`` (its own device when ``None``).

    Signature: ``copy(inp, device=None)``.
    """
    inp = _tensor(inp, "copy")
    return apply(Copy(inp.device if device is None else as_device(device)), inp)[0]


# -- shape ----------------------------------------------------------------------------------------
def reshape(inp, target_shape):
    """The same data in a new shape; one entry of ``target_shape`` may be -1.

    Signature: ``reshape(inp, target_shape)``; ``target_shape`` may be an integer tensor, or a
    float one holding whole numbers.
    """
    shape = _shape(target_shape, "reshape", allow_float=True)
    return apply(Reshape(shape), _tensor(inp, "reshape"))[0]


def flatten(inp, start_axis=0, end_axis=-1):
    """Merge axes ``start_axis..end_axis`` (inclusive) into one.

    Signature: ``flatten(inp, start_axis=0, end_axis=-1)``.  A 0-d tensor becomes shape ``(1,)``.
    """
    inp = _tensor(inp, "flatten")
    shape = inp.shape
    ndim = len(shape)
    if ndim == 0:
        return reshape(inp, (1,))
    s, e = _int(start_axis, "flatten", "start_axis"), _int(end_axis, "flatten", "end_axis")
    if not (-ndim <= s < ndim and -ndim <= e < ndim):
        raise ValueError(f"flatten: start_axis={start_axis}, end_axis={end_axis} out of range "
                         f"for shape {shape}")
    s, e = s % ndim, e % ndim
    if s > e:
        raise ValueError(f"flatten: start_axis={start_axis} comes after end_axis={end_axis} for "
                         f"shape {shape}")
    n = 1
    for d in shape[s:e + 1]:
        n *= d
    return reshape(inp, shape[:s] + (n,) + shape[e + 1:])


def _traced_shape_tensor(shape):
    # Inside a traced function a shape given as tensors stays an input of the op (MegEngine's
    # shape input), so each call may use another shape; elsewhere its value is read at once.
    if not (isinstance(shape, Tensor) or isinstance(shape, (list, tuple))
            and any(isinstance(s, Tensor) for s in shape)):
        return False
    from ..jit.tracing import is_tracing
    return is_tracing()


def _shape_tensor(inp, shape, fname):
    """A 1-d int32 tensor of ``shape`` (a tensor, or entries that are ints, 0-d or (1,)-shaped
    integer tensors, or ``None`` for the input's size on that axis, counted from the end)."""
    if isinstance(shape, Tensor):
        if shape.dtype.kind not in "iu":
            raise TypeError(f"{fname}: a shape tensor must be integer, got dtype {shape.dtype}")
        return shape.reshape(-1) if shape.ndim != 1 else shape
    src = inp.shape
    off = len(shape) - len(src)
    parts = []
    for i, s in enumerate(shape):
        if s is None:
            if i < off:
                raise ValueError(f"{fname}: None in {tuple(shape)} has no matching input axis "
                                 f"({src})")
            s = src[i - off]
        if isinstance(s, Tensor):
            if s.dtype.kind not in "iu" or s.size != 1:
                raise TypeError(f"{fname}: shape entries must be integers, got a tensor of "
                                f"dtype {s.dtype} and shape {s.shape}")
            parts.append(s.reshape(1).astype(_int32))
        else:
            parts.append(Tensor([_int(s, fname, "shape entries")], dtype=_int32,
                                device=inp.device))
    return concat(parts) if len(parts) > 1 else parts[0]


def broadcast_to(inp, shape):
    """Broadcast ``inp`` to ``shape`` (numpy rules); a ``None`` entry keeps the input's size.

    Signature: ``broadcast_to(inp, shape)``.
    """
    inp = _tensor(inp, "broadcast_to")
    if _traced_shape_tensor(shape):
        return apply(BroadcastTo(), inp, _shape_tensor(inp, shape, "broadcast_to"))[0]
    shape = _shape(shape, "broadcast_to", allow_none=True)
    if None in shape:
        src = inp.shape
        off = len(shape) - len(src)
        if off < 0:
            raise ValueError(f"broadcast_to: cannot broadcast shape {src} to {shape}")
        shape = tuple(src[i - off] if s is None and i >= off else s for i, s in enumerate(shape))
        if None in shape:
            raise ValueError(f"broadcast_to: None in {shape} has no matching input axis ({src})")
    return apply(Broadcast(shape), inp)[0]


def transpose(inp, pattern):
    """Permute the axes; ``"x"`` in ``pattern`` inserts a new axis of size 1.

    Signature: ``transpose(inp, pattern)``, e.g. ``transpose(x, (1, "x", 0))`` turns shape
    ``(2, 3)`` into ``(3, 1, 2)``.
    """
    pattern = tuple(p if p == "x" else _int(p, "transpose", "pattern entries") for p in pattern)
    return apply(Dimshuffle(pattern), _tensor(inp, "transpose"))[0]


def swapaxes(inp, axis1, axis2):
    """Exchange two axes.  Signature: ``swapaxes(inp, axis1, axis2)``."""
    inp = _tensor(inp, "swapaxes")
    ndim = inp.ndim
    a, b = _int(axis1, "swapaxes", "axis1"), _int(axis2, "swapaxes", "axis2")
    if not (-ndim <= a < ndim and -ndim <= b < ndim):
        raise ValueError(f"swapaxes: axes ({axis1}, {axis2}) out of range for shape {inp.shape}")
    pattern = list(range(ndim))
    pattern[a], pattern[b] = pattern[b], pattern[a]
    return apply(Dimshuffle(tuple(pattern)), inp)[0]


def expand_dims(inp, axis):
    """Insert size-1 axes at ``axis`` (an int or a sequence; positions in the output).

    Signature: ``expand_dims(inp, axis)``.
    """
    return apply(AddAxis(_axes(axis, "expand_dims")), _tensor(inp, "expand_dims"))[0]


def squeeze(inp, axis=None):
    """Remove size-1 axes (all of them when ``axis`` is ``None``).

    Signature: ``squeeze(inp, axis=None)``.
    """
    inp = _tensor(inp, "squeeze")
    if axis is None:
        axes = tuple(i for i, s in enumerate(inp.shape) if s == 1)
    else:
        axes = _axes(axis, "squeeze")
    return apply(RemoveAxis(axes), inp)[0]


# -- joining and splitting ------------------------------------------------------------------------
def _inputs(inps, device, fname):
    if isinstance(inps, Tensor) or not hasattr(inps, "__iter__"):
        raise TypeError(f"{fname}: inps must be a sequence of tensors, got {type(inps).__name__}")
    inps = [_tensor(x, fname) for x in inps]
    if not inps:
        raise ValueError(f"{fname}: needs at least one tensor")
    if device is not None:
        dev = as_device(device)
        inps = [x if x.device == dev else x.to(dev) for x in inps]
    return inps


def concat(inps, axis=0, device=None):
    """Join tensors along an existing axis.

    Signature: ``concat(inps, axis=0, device=None)``; ``device`` moves the inputs there first.
    """
    inps = _inputs(inps, device, "concat")
    if len(inps) == 1:
        return inps[0]
    return apply(Concat(_int(axis, "concat", "axis")), *inps)[0]


def stack(inps, axis=0, device=None):
    """Join tensors of one shape along a new axis.

    Signature: ``stack(inps, axis=0, device=None)``.
    """
    inps = _inputs(inps, device, "stack")
    return apply(Stack(_int(axis, "stack", "axis")), *inps)[0]


def split(inp, nsplits_or_sections, axis=0):
    """Split into ``n`` near-equal parts (an int) or at the given indices (a sequence).

    Signature: ``split(inp, nsplits_or_sections, axis=0)``; returns a list of tensors.  With an int
    ``n`` the first ``size % n`` parts are one longer, as in ``numpy.array_split``.
    """
    inp = _tensor(inp, "split")
    shape = inp.shape
    axis = _int(axis, "split", "axis")
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"split: axis {axis} out of range for shape {shape}")
    axis %= len(shape)
    size = shape[axis]
    if isinstance(nsplits_or_sections, (list, tuple)):
        points = [_int(p, "split", "sections") for p in nsplits_or_sections]
        bounds = [0] + points + [size]
        if any(b < a for a, b in zip(bounds, bounds[1:])):
            # MegEngine's message (its spelling too)
            raise ValueError(f"Invalid nsplits_or_secions: {list(nsplits_or_sections)}")
        sizes = tuple(b - a for a, b in zip(bounds, bounds[1:]))
    else:
        n = _int(nsplits_or_sections, "split", "nsplits_or_sections")
        if n <= 0:
            raise ValueError(f"split: the number of sections must be positive, got {n}")
        if n > size:
            raise ValueError(f"split: the size {size} at axis {axis} cannot be split into {n} "
                             "sections")
        q, r = divmod(size, n)
        sizes = (q + 1,) * r + (q,) * (n - r)
    return list(apply(Split(axis, sizes), inp))


# -- repetition -----------------------------------------------------------------------------------
def tile(inp, reps):
    """Repeat the whole tensor ``reps`` times along each axis (``numpy.tile``).

    Signature: ``tile(inp, reps)``.
    """
    return apply(Tile(_shape(reps, "tile")), _tensor(inp, "tile"))[0]


def repeat(inp, repeats, axis=None):
    """Repeat each element ``repeats`` times along ``axis`` (the flattened tensor when ``None``).

    Signature: ``repeat(inp, repeats, axis=None)``.
    """
    inp = _tensor(inp, "repeat")
    repeats = _int(repeats, "repeat", "repeats")
    if axis is None:
        inp, axis = reshape(inp, (-1,)) if inp.ndim != 1 else inp, 0
    return apply(Repeat(repeats, _int(axis, "repeat", "axis")), inp)[0]


def roll(inp, shift, axis=None):
    """Roll elements along axes; with ``axis=None`` the flattened tensor is rolled.

    Signature: ``roll(inp, shift, axis=None)``; ``shift`` and ``axis`` may be sequences.
    """
    inp = _tensor(inp, "roll")
    shifts = _axes(shift, "roll")
    if axis is None:
        if len(shifts) != 1:
            raise ValueError("roll: with axis=None, shift must be a single int")
        shape = inp.shape
        flat = reshape(inp, (-1,))
        return reshape(apply(Roll(shifts, (0,)), flat)[0], shape)
    axes = _axes(axis, "roll")
    if len(shifts) != len(axes):
        if len(shifts) == 1:
            shifts = shifts * len(axes)
        elif len(axes) == 1:
            axes = axes * len(shifts)
        else:
            raise ValueError(f"roll: shift {shift} and axis {axis} must have the same length")
    return apply(Roll(shifts, axes), inp)[0]


# -- selection ------------------------------------------------------------------------------------
def where(mask, x, y):
    """``x`` where ``mask`` is true, else ``y`` (broadcast together).

    Signature: ``where(mask, x, y)``; ``mask`` must be a bool tensor.
    """
    for name, v in (("mask", mask), ("x", x), ("y", y)):
        if not isinstance(v, Tensor):
            raise TypeError(f"where: input {name} must be a tensor, got {type(v).__name__}")
    if mask.dtype != _bool:
        raise TypeError(f"where: mask must be bool, got {mask.dtype}")
    return apply(Where(), mask, x, y)[0]


def cond_take(mask, x):
    """The elements of ``x`` where ``mask`` is true, and their indices in the flattened ``x``.

    Signature: ``cond_take(mask, x)``; returns ``(values, indices)``, both 1-d (``indices`` is
    int32).  The output length depends on the values of ``mask``.
    """
    if not _tensor_like(mask) or not _tensor_like(x):
        raise TypeError("cond_take: mask and x must be tensors")
    if mask.dtype != _bool:
        raise TypeError(f"cond_take: mask must be bool, got {mask.dtype}")
    return apply(CondTake(), mask, x)


def _index(index, fname):
    index = _tensor(index, fname, "index")
    if index.dtype.kind not in "iu":
        raise TypeError(f"{fname}: index must be an integer tensor, got {index.dtype}")
    return index


def gather(inp, axis, index):
    """Gather along ``axis``: ``out[i][j] = inp[index[i][j]][j]`` for ``axis=0`` (2-d).

    Signature: ``gather(inp, axis, index)``; ``index`` has ``inp``'s number of dimensions and the
    output has ``index``'s shape.
    """
    inp = _tensor(inp, "gather")
    return apply(Gather(_int(axis, "gather", "axis")), inp, _index(index, "gather"))[0]


def scatter(inp, axis, index, source):
    """A copy of ``inp`` with ``source`` written at ``index`` along ``axis``.

    Signature: ``scatter(inp, axis, index, source)``; for ``axis=0`` (2-d)
    ``out[index[i][j]][j] = source[i][j]``.  ``index`` and ``source`` have the same shape; with
    repeated indices the last write wins.  Unlike MegEngine, ``inp`` itself is not modified.
    """
    inp = _tensor(inp, "scatter")
    source = _tensor(source, "scatter", "source")
    if source.dtype != inp.dtype:
        source = source.astype(inp.dtype)
    return apply(Scatter(_int(axis, "scatter", "axis")), inp, _index(index, "scatter"), source)[0]


# -- complex numbers ------------------------------------------------------------------------------
def _float_part(x, fname, name):
    x = _tensor(x, fname, name)
    if x.dtype.kind != "f":
        raise TypeError(f"{fname}: {name} must be a float tensor, got dtype {x.dtype}")
    return x


def complex(real, imag):
    """A complex64 tensor ``real + 1j * imag`` (numpy broadcasting of the two float parts).

    Signature: ``complex(real, imag)``.
    """
    real = _float_part(real, "complex", "real")
    imag = _float_part(imag, "complex", "imag")
    return apply(CreateComplex(), real, imag)[0]


def real(complex):
    """The real part of a complex tensor, as float32.  Signature: ``real(complex)``."""
    return apply(ComplexPart.get("real"), _tensor(complex, "real", "complex"))[0]


def imag(complex):
    """The imaginary part of a complex tensor, as float32.  Signature: ``imag(complex)``."""
    return apply(ComplexPart.get("imag"), _tensor(complex, "imag", "complex"))[0]


def polar(abs, angle):
    """The complex tensor ``abs * (cos(angle) + 1j * sin(angle))`` (float ``abs`` and ``angle``).

    Signature: ``polar(abs, angle)``.
    """
    from .elemwise import cos, sin
    abs = _float_part(abs, "polar", "abs")
    angle = _float_part(angle, "polar", "angle")
    return apply(CreateComplex(), abs * cos(angle), abs * sin(angle))[0]


from .math import cumsum  # noqa: E402,F401  (MegEngine defines it in functional.tensor)
