"""``mge.functional.external``: MegEngine's operators that run a model of another runtime
(TensorRT, Cambricon, Atlas, MagicMind) or a serialized extern subgraph.

mge has none of those runtimes: each function raises ``NotImplementedError`` naming the runtime,
except that ``tensorrt_runtime_opr`` without ``data`` gives ``None`` as MegEngine's does.
"""

__all__ = ["extern_opr_subgraph", "tensorrt_runtime_opr", "cambricon_runtime_opr",
           "atlas_runtime_opr", "magicmind_runtime_opr"]


def _unavailable(what):
    return NotImplementedError(f"{what}: mge has no such runtime (it runs models with its own "
                               "kernels; see docs/differences.rst)")


def extern_opr_subgraph(inputs, output_shapes, dump_name, dump_data, output_dtypes):
    """MegEngine: run a serialized extern operator subgraph.  Raises
    ``NotImplementedError``."""
    raise _unavailable("extern_opr_subgraph")


def tensorrt_runtime_opr(inputs, *, data=None):
    """MegEngine: run a serialized TensorRT engine; ``None`` without ``data``.  Raises
    ``NotImplementedError`` otherwise."""
    if data is None:
        return None
    raise _unavailable("tensorrt_runtime_opr (TensorRT)")


def cambricon_runtime_opr(inputs, data, symbol, tensor_dim_mutable):
    """MegEngine: run a Cambricon model.  Raises ``NotImplementedError``."""
    raise _unavailable("cambricon_runtime_opr (Cambricon)")


def atlas_runtime_opr(inputs, data):
    """MegEngine: run an Atlas model.  Raises ``NotImplementedError``."""
    raise _unavailable("atlas_runtime_opr (Atlas)")


def magicmind_runtime_opr(inputs, data):
    """MegEngine: run a MagicMind model.  Raises ``NotImplementedError``."""
    raise _unavailable("magicmind_runtime_opr (MagicMind)")
