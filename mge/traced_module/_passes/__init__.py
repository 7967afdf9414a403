"""Graph passes on TracedModules (MegEngine's ``traced_module._passes``): a registry
(:func:`register_pass`), expression patterns and a matcher, and the passes ``AttrToConstant``,
``FixInputShape``, ``FlodConstant``, ``NormElemWise``, ``FuseAddMul``, ``FuseConvBn`` and
``BackwardFoldScale``; :func:`optimize` runs them."""
from . import const_pass, fold_scale_pass, fuse_pass
from .optimization import optimize
from .pass_base import (BackwardPass, BasePass, ForwardPass, PassContext,
                        get_default_pass_context, get_registered_pass, register_pass)

__all__ = ["optimize", "register_pass", "get_registered_pass", "BasePass", "ForwardPass",
           "BackwardPass", "PassContext", "get_default_pass_context"]
