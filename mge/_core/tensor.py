"""``Tensor``: a user's handle on one value in the channel (MegEngine 1.13's ``Tensor``)."""
import cython
import numpy as np

from . import _accel
from .channel import get_channel
from .device import as_device
from .dtype import canonical, describe, host_array, same_dtype
from .ops.elemwise import TypeCvt, elemwise_op
from .ops.assign import Assign
from .ops.misc import Copy, Detach, Identity

_accel.guard(__name__)
if cython.compiled:  # (a tensor's finalizer reads its handle at the slot: one per op's output)
    from cython.cimports.mge._core.channel.handles_c import TensorInfo
    from cython.cimports.mge._core.cpython_new import get_slot, slot_offset
_dispatch = _accel.load("mge._core.dispatch")
apply = _dispatch.apply
_channel = get_channel()
F = None  # mge.functional, bound by mge/__init__.py (the functional layer imports this module)
# astype to or from a quantized dtype, bound by mge.core.tensor.dtype (which defines them; the
# runtime does not import the API layer)
QUANTIZED_TYPECVT = None

__all__ = ["Tensor", "Parameter"]

_mode = elemwise_op
_COMPILED = cython.declare(cython.bint, cython.compiled)
_IDENTITY = Identity()
_ASSIGN = Assign()


def _binary(mode, reflected=False):
    op = _mode(mode)
    if reflected:
        def method(self, other):
            return apply(op, other, self)[0]
    else:
        def method(self, other):
            return apply(op, self, other)[0]
    method.__name__ = f"__{'r' if reflected else ''}{mode}__"
    method.__doc__ = f"Elementwise ``{mode}``."
    return method


def _logical_or_bitwise(logical, bitwise, reflected=False):
    lop, bop = _mode(logical), _mode(bitwise)

    def method(self, other):
        a, b = (other, self) if reflected else (self, other)
        op = lop if self._info.dtype.kind == "b" else bop
        return apply(op, a, b)[0]
    method.__doc__ = f"``{logical}`` on bool tensors, ``{bitwise}`` on integer tensors."
    return method


def _inplace(binary):
    def method(self, other):
        self._reset(binary(self, other))
        return self
    method.__doc__ = "In-place form: the tensor object takes the result (as in MegEngine)."
    return method


class Tensor:
    """A multidimensional array on a device.

    ``Tensor(data, dtype=None, device=None, is_const=False, no_cache=False, name=None)``: ``data`` is
    copied (a Python number, nested lists, a numpy array or another ``Tensor``).  Without ``dtype``,
    Python ints and int64 become int32, Python floats and float64 become float32, bools stay bool.

    Example::

        >>> import mge
        >>> x = mge.tensor([1.0, 2.0, 3.0])
        >>> (x * 2 + 1).numpy()
        array([3., 5., 7.], dtype=float32)
    """

    # ``_info`` in a slot: a new tensor needs no instance dict until someone sets an attribute.
    __slots__ = ("_info", "__dict__", "__weakref__")
    __array_priority__ = 1000  # numpy defers binary operators to ours
    grad = None
    _name = ""
    _is_const = False

    def __init__(self, data, dtype=None, device=None, is_const=False, no_cache=False, name=None,
                 format="default"):
        if isinstance(data, Tensor):
            # As in MegEngine, Tensor(t, dtype=..., device=...) does not convert: they must match,
            # a quantization included (numpy's == ignores it: qint8(0.1) == int8).
            src = data
            if dtype is not None and not same_dtype(canonical(dtype), src._info.dtype):
                raise RuntimeError(f"Tensor(tensor, dtype=...): dtype mismatch: "
                                   f"{describe(canonical(dtype))} vs {describe(src._info.dtype)} "
                                   f"(use tensor.astype to convert)")
            if device is not None and as_device(device) != src.device:
                raise RuntimeError(f"Tensor(tensor, device=...): device mismatch: "
                                   f"{as_device(device)} vs {src.device} (use tensor.to to copy)")
            # Identity, not Detach: as in MegEngine, Tensor(x) keeps x's gradient history.  The
            # state transformations keep on the temporary (its instance dict) moves with it.
            tmp = apply(_IDENTITY, src)[0]
            self._info = tmp._take_info()
            state = tmp.__dict__
            if state:
                self.__dict__.update(state)
        else:
            if data is None:  # (MegEngine's: an empty float32 tensor)
                data = []
            self._info = _channel.put(host_array(data, dtype), as_device(device), no_cache)
        if is_const:
            self._is_const = True
        if name:
            self.name = name
        if format != "default" and format is not None:
            self.format = format  # (mge/tensor.py: the label and the layer that carries it)
        elif isinstance(data, Tensor):
            fmt = data.__dict__.get("_format")
            if fmt is not None:
                self.__dict__["_format"] = fmt

    # -- identity and lifetime -----------------------------------------------------------------
    def _take_info(self):
        # Hands this temporary's handle over to another Tensor object.
        info = self._info
        self._info = None
        return info

    def _reset(self, other):
        """Make this tensor hold ``other``'s value (in-place ops, ``__setitem__``, optimizers).

        An op (``Assign``, ``mge/_core/ops/assign.py``): every transformation sees it.
        """
        if not isinstance(other, Tensor):
            other = Tensor(other, dtype=self.dtype, device=self.device)
        apply(_ASSIGN, self, other)  # (its output, the old value, is dropped here)

    def __del__(self):
        if _COMPILED:  # (not cython.compiled: at interpreter exit the pure twin's globals are None)
            p = get_slot(self, _INFO)  # (unset: NULL; _take_info leaves None)
            if p == cython.NULL or cython.cast(object, p) is None:
                return
            handle: TensorInfo = cython.cast(object, p)
            if not handle.deleted:  # (a trace's placeholders: nothing to free)
                try:
                    _channel.del_(handle)
                except Exception:  # interpreter shutdown: modules may already be gone
                    pass
            return
        info = getattr(self, "_info", None)
        if info is not None and not info.deleted:  # (a trace's placeholders: nothing to free)
            try:
                _channel.del_(info)
            except Exception:  # interpreter shutdown: modules may already be gone
                pass

    __hash__ = object.__hash__

    # -- description ---------------------------------------------------------------------------
    @property
    def shape(self):
        """The shape, a tuple of ints (waits only if it depends on values not yet computed)."""
        return _channel.get_shape(self._info)

    @property
    def dtype(self):
        """The numpy dtype."""
        return self._info.dtype

    @property
    def device(self):
        """The device, a ``CompNode``."""
        return self._info.device

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        """Number of elements."""
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def name(self):
        return self._name

    @name.setter
    def name(self, value):
        self._name = value
        self._info.name = value

    @property
    def T(self):
        """The transpose (axes reversed)."""
        return F.transpose(self, tuple(range(self.ndim - 1, -1, -1)))

    @property
    def qparams(self):
        raise NotImplementedError("mge has no quantized tensors")

    # -- values --------------------------------------------------------------------------------
    def numpy(self):
        """The value as a numpy array (read-only: it never lets you write into the tensor)."""
        return _channel.get_value(self._info)

    def __array__(self, dtype=None, copy=None):
        v = self.numpy()
        if dtype is not None:
            return v.astype(dtype)
        return v.copy() if copy else v

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        # np.exp(tensor) and friends answer with a Tensor, as in MegEngine.
        mode = _UFUNC_MODES.get(ufunc.__name__)
        if method == "__call__" and mode is not None and not kwargs:
            return apply(_mode(mode), *inputs)[0]
        if method == "__call__" and ufunc.__name__ == "matmul" and not kwargs:
            return F.matmul(*inputs)
        args = [np.asarray(x) if isinstance(x, Tensor) else x for x in inputs]
        return getattr(ufunc, method)(*args, **kwargs)

    def item(self, *args):
        """The value of a one-element tensor as a Python number."""
        return self.numpy().item(*args)

    def tolist(self):
        return self.numpy().tolist()

    def __len__(self):
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __bool__(self):
        if self.size != 1:
            raise ValueError(
                f"the truth value of a tensor with {self.size} elements is ambiguous "
                f"(shape {self.shape}); use .any() or .all() on .numpy()"
            )
        return bool(self.numpy().item())

    def __int__(self):
        return int(self.item())

    def __float__(self):
        return float(self.item())

    def __index__(self):
        if self.dtype.kind not in "iub":
            raise TypeError(f"only integer tensors can be used as an index, not {self.dtype}")
        return int(self.item())

    def __complex__(self):
        return complex(self.item())

    def __round__(self, ndigits=0):
        if ndigits:
            raise NotImplementedError("round(tensor, ndigits) with ndigits != 0 is not supported")
        return apply(_mode("round"), self)[0]

    def __repr__(self):
        with np.printoptions(precision=4, suppress=True):
            piece = f"{type(self).__name__}({self.numpy()}"
        if self.dtype != np.float32:
            piece += f", dtype={self.dtype.name}"
        return piece + f", device={self.device})"

    __str__ = __repr__

    def __format__(self, spec):
        if spec and self.size == 1:
            return format(self.item(), spec)
        return str(self)

    def __reduce__(self):
        # the state (MegEngine's ``__getstate__``: the quantization parameters, when set) is
        # shared by copy.copy and copied by copy.deepcopy and pickle
        args = (type(self), np.asarray(self.numpy()), self.dtype, str(self.device), self.name)
        q = self.__dict__.get("_qparams")
        if q is not None:
            return (_rebuild, args, {"qparams": q})
        return (_rebuild, args)

    # -- conversions ---------------------------------------------------------------------------
    def astype(self, dtype):
        """A copy converted to ``dtype``."""
        dtype = canonical(dtype)
        mine = self._info.dtype
        if dtype.metadata is not None or mine.metadata is not None:  # quantized: rescales
            if dtype == mine and dtype.metadata == mine.metadata:
                return self
            if QUANTIZED_TYPECVT is None:
                raise NotImplementedError(f"astype: converting {mine} to {dtype} needs "
                                          "mge.core.tensor.dtype (quantized dtypes)")
            return QUANTIZED_TYPECVT(self, dtype)
        if dtype == mine:
            return self
        return apply(TypeCvt(dtype), self)[0]

    def detach(self):
        """The same value, cut off from autodiff."""
        return apply(Detach(), self)[0]

    def to(self, device):
        """A copy on ``device``."""
        return apply(Copy(as_device(device)), self)[0]

    def _drop(self):
        """Free the value; it is recomputed from its producer when next used.

        Needs the options ``enable_drop`` and ``record_computing_path`` (set before the producing
        op runs); without ``enable_drop`` this does nothing, as in MegEngine.
        """
        _channel.drop(self._info)

    def _swap_out(self):
        """Move the value to host memory; it comes back when used (option ``enable_swap``)."""
        _channel.swap_out(self._info)

    def _swap_in(self):
        """Bring a swapped-out value back to its device (option ``enable_swap``)."""
        _channel.swap_in(self._info)

    # -- shape methods (the functional layer does the work) --------------------------------------
    def reshape(self, *shape):
        """Same data, new shape; one dimension may be -1."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, Tensor)):
            shape = shape[0]
        return F.reshape(self, shape)

    def transpose(self, *axes):
        """Permute the axes (reversed when none are given)."""
        if not axes:
            axes = tuple(range(self.ndim - 1, -1, -1))
        elif len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = axes[0]
        return F.transpose(self, axes)

    def flatten(self):
        return F.flatten(self)

    def sum(self, axis=None, keepdims=False):
        return F.sum(self, axis, keepdims)

    def prod(self, axis=None, keepdims=False):
        return F.prod(self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        return F.min(self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        return F.max(self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return F.mean(self, axis, keepdims)

    def __getitem__(self, index):
        return F.indexing.getitem(self, index)

    def __setitem__(self, index, value):
        self._reset(F.indexing.setitem(self, index, value))

    # -- arithmetic ----------------------------------------------------------------------------
    __add__ = _binary("add")
    __radd__ = _binary("add", True)
    __sub__ = _binary("sub")
    __rsub__ = _binary("sub", True)
    __mul__ = _binary("mul")
    __rmul__ = _binary("mul", True)
    __truediv__ = _binary("true_div")
    __rtruediv__ = _binary("true_div", True)
    __floordiv__ = _binary("floor_div")
    __rfloordiv__ = _binary("floor_div", True)
    __mod__ = _binary("mod")
    __rmod__ = _binary("mod", True)
    __pow__ = _binary("pow")
    __rpow__ = _binary("pow", True)
    __lshift__ = _binary("shl")
    __rlshift__ = _binary("shl", True)
    __rshift__ = _binary("shr")
    __rrshift__ = _binary("shr", True)
    __lt__ = _binary("lt")
    __le__ = _binary("leq")
    __gt__ = _binary("gt")
    __ge__ = _binary("geq")
    __eq__ = _binary("eq")
    __ne__ = _binary("neq")
    __and__ = _logical_or_bitwise("and", "bit_and")
    __rand__ = _logical_or_bitwise("and", "bit_and", True)
    __or__ = _logical_or_bitwise("or", "bit_or")
    __ror__ = _logical_or_bitwise("or", "bit_or", True)
    __xor__ = _logical_or_bitwise("xor", "bit_xor")
    __rxor__ = _logical_or_bitwise("xor", "bit_xor", True)

    def __neg__(self):
        return apply(_mode("neg"), self)[0]

    def __pos__(self):
        return self

    def __abs__(self):
        return apply(_mode("abs"), self)[0]

    def __invert__(self):
        return apply(_mode("not" if self._info.dtype.kind == "b" else "bit_not"), self)[0]

    def __matmul__(self, other):
        return F.matmul(self, other)

    def __rmatmul__(self, other):
        return F.matmul(other, self)

    __iadd__ = _inplace(__add__)
    __isub__ = _inplace(__sub__)
    __imul__ = _inplace(__mul__)
    __itruediv__ = _inplace(__truediv__)
    __ifloordiv__ = _inplace(__floordiv__)
    __imod__ = _inplace(__mod__)
    __ipow__ = _inplace(__pow__)
    __ilshift__ = _inplace(__lshift__)
    __irshift__ = _inplace(__rshift__)
    __iand__ = _inplace(__and__)
    __ior__ = _inplace(__or__)
    __ixor__ = _inplace(__xor__)
    __imatmul__ = _inplace(__matmul__)


_UFUNC_MODES = {
    "add": "add", "subtract": "sub", "divide": "true_div", "remainder": "mod",
    "left_shift": "shl", "right_shift": "shr", "bitwise_and": "bit_and", "bitwise_or": "bit_or",
    "bitwise_xor": "bit_xor", "invert": "bit_not", "multiply": "mul", "true_divide": "true_div",
    "floor_divide": "floor_div", "power": "pow", "maximum": "max", "minimum": "min",
    "negative": "neg", "absolute": "abs", "exp": "exp", "expm1": "expm1", "log": "log",
    "log1p": "log1p", "sqrt": "sqrt", "square": "square", "sin": "sin", "cos": "cos", "tan": "tan",
    "arcsin": "asin", "arccos": "acos", "arctan": "atan", "arctan2": "atan2", "sinh": "sinh",
    "cosh": "cosh", "tanh": "tanh", "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh",
    "ceil": "ceil", "floor": "floor", "sign": "sign", "less": "lt", "less_equal": "leq",
    "greater": "gt", "greater_equal": "geq", "equal": "eq", "not_equal": "neq",
    "logical_and": "and", "logical_or": "or", "logical_xor": "xor", "logical_not": "not",
    "isnan": "isnan", "isinf": "isinf", "logaddexp": "logaddexp",
}


class Parameter(Tensor):
    """A trainable tensor (what ``Module`` collects as its parameters)."""


def _rebuild(cls, value, dtype, device, name):
    return cls(value, dtype=dtype, device=device, name=name or None)


# compiled: the offset of the _info slot (Tensor.__del__; subclasses keep it where it is)
_INFO = cython.declare(cython.Py_ssize_t, slot_offset(Tensor.__dict__["_info"])
                       if cython.compiled else -1)
_dispatch.set_tensor_type(Tensor)
