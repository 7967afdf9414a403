"""``mge.jit``: tracing and compiled replay (MegEngine's ``megengine.jit``).

* :class:`trace` -- record a function's ops on the first call, replay them as compiled programs
  after (``tracing.py``; the recording and matching are the ``trace`` plugin, the programs
  ``program.py``);
* :func:`load` -- read a model file that ``trace.dump`` wrote, as a callable ``LoadedModel``
  (``dump.py``; ``python -m mge.jit.run`` runs one from the command line);
* :func:`export_onnx` -- write a traced function as an ONNX model (``onnx_export.py``; also
  ``trace.dump(file, format="onnx")``; needs the extra ``mge[onnx]``);
* :func:`exclude_from_trace`, :func:`is_tracing`, :class:`TraceError`;
* :class:`SymbolVar` -- a tensor of a traced call as a var of the recorded graph
  (``symbolic.py``);
* the option objects ``trace`` accepts: :class:`DTRConfig`, :class:`SublinearMemoryConfig`,
  :class:`GraphOptimizationConfig`.
"""
from .configs import DTRConfig, GraphOptimizationConfig, SublinearMemoryConfig
from .tracing import TraceError, exclude_from_trace, is_tracing, trace
from .dump import load
from .symbolic import SymbolVar
from .onnx_export import OnnxExportError, export_onnx

__all__ = ["trace", "load", "export_onnx", "OnnxExportError", "exclude_from_trace", "is_tracing",
           "TraceError", "DTRConfig", "SublinearMemoryConfig", "GraphOptimizationConfig",
           "partial_trace", "xla_trace"]


def partial_trace(func=None, *, backend="default", without_host=True, **trace_options):
    """MegEngine's ``partial_trace`` (tracing a module's parts for XLA): not implemented in mge."""
    raise NotImplementedError("mge.jit.partial_trace is not implemented (it serves MegEngine's "
                              "XLA backend); use mge.jit.trace")


def xla_trace(function, *, without_host=True, symbolic_shape=False, **kwargs):
    """MegEngine's ``xla_trace`` (compiling a traced function with XLA): mge has no XLA backend,
    so this raises ``NotImplementedError``; use mge.jit.trace."""
    raise NotImplementedError("mge.jit.xla_trace: mge has no XLA backend (XLA is out of its "
                              "scope); use mge.jit.trace")
