"""``optimize``: run graph passes on a copy of a TracedModule for inference."""
from copy import deepcopy

from ...logger import get_logger
from .pass_base import get_default_pass_context, get_registered_pass

__all__ = ["optimize"]

logger = get_logger(__name__)


def optimize(module, enabled_pass=["FuseConvBn"]):  # noqa: B006 - MegEngine's signature
    r"""Performs a set of optimization passes to optimize a `TracedModule` for inference.

    The following passes are currently supported:

        * FuseConvBn: fuse BN layers into to conv2d
        * FuseAddMul: fold adjacent const add or mul binary operations
        * BackwardFoldScale: backward fold const scaling into weights of conv2d

    The module is deep-copied first; the copy is changed and returned.  Passes work on the
    top graph (call ``module.flatten()`` first to reach into submodules).

    Args:
        module: the :class:`TracedModule` to be optimized.
        enabled_pass: optimization passes to be enabled during optimization.
            Default: ["FuseConvBn"]

    Returns:
        the optimized :class:`TracedModule`.
    """
    order = ["FuseConvBn", "FuseAddMul"]
    enabled = [enabled_pass] if isinstance(enabled_pass, str) else list(enabled_pass)
    if "BackwardFoldScale" in enabled:
        if "FuseConvBn" not in enabled:
            logger.warning("Since BackwardFoldScale requires FuseConvBn, FuseConvBn will be "
                           "enabled.")
            enabled.append("FuseConvBn")
        order += ["BackwardFoldScale", "FuseAddMul"]
    for name in enabled:
        get_registered_pass(name)  # an unknown name is an error, not silently skipped
    ctx = get_default_pass_context()
    module = deepcopy(module)
    for name in order:
        if name in enabled:
            module = get_registered_pass(name)()(module, ctx)
    return module
