"""Every op has a backward rule, and every rule is checked.

* Every op class with a CPU kernel (``KERNELS`` of ``mge._core.device.cpu``) has a rule in
  ``BACKWARD`` (``mge._core.autodiff.registry``), or is in
  ``NO_RULE`` below: ops none of whose inputs needs a gradient.
* Every op class with a rule appears in the ``CASES`` of some ``tests/test_grad_*.py`` (checked
  against central differences there, and at second order in ``test_grad_second_order.py``), or is
  in ``NOT_IN_CASES`` below, which says where its rule is tested instead.

Both lists are checked to stay true, so that they shrink when an op gets a rule or a case.
"""
import importlib
import pkgutil

import mge
from mge._core import _accel
from mge._core.ops import (
    Argmax, Argmin, BatchNormBackward, BetaRNG, Detach, GammaRNG, GaussianRNG,
    LayerNormBackward, MaxPoolingGather, OneHot, PermutationRNG, PoissonRNG, UniformRNG,
)
from mge._core.autodiff.registry import BACKWARD
from mge._core.ops.elemwise import ComplexPart, CreateComplex
from mge._core.ops.vision import NMSKeep, CvtColor, VisionBackward
from mge._core.device.cpu import KERNELS
from mge.amp.check_non_finite import CheckNonFinite
from mge.optimizer.adadelta import AdadeltaUpdate
from mge.optimizer.adagrad import AdagradUpdate
from mge.optimizer.adam import AdamUpdate
from mge.optimizer.optimizer import UpdateOp
from mge.optimizer.rmsprop import RMSpropUpdate
from mge.optimizer.sgd import SGDUpdate

from test_grad_second_order import _case_modules

# Ops with a kernel and no backward rule: none of their inputs ever needs a gradient.
from mge.jit.program import (BiasAct, BiasSGDUpdate, MatrixMulPair, MatrixMulUpdate,  # noqa: E402
                             TracedProgram)
from mge._core.ops.program import ElemwiseChain, MultiUpdate  # noqa: E402
from mge._core.ops.quantized import (  # noqa: E402
    BatchConvBias, ConvBias, ElemwiseMultiType, QuantizedConvolutionBackwardData,
    QuantizedElemwise, QuantizedMatrixMul, QuantizedTypeCvt,
)

NO_RULE = {
    # An integer index tensor in, a one-hot tensor out: nothing to differentiate.
    OneHot,
    # Complex values get no gradients (a recording keeps only float outputs; complex tensors
    # cannot be attached): F.complex/F.polar and F.real/F.imag are never recorded.
    CreateComplex, ComplexPart,
    # The optimizers' fused updates (parameter, gradient, states -> new parameter and states) run
    # in ``Optimizer.step``, after backward and outside any recording.
    SGDUpdate, AdamUpdate, AdagradUpdate, AdadeltaUpdate, RMSpropUpdate,
    # The grad scaler's unscale-and-check of the gradients themselves (``GradScaler.unscale``).
    CheckNonFinite,
    # A replaying trace's compiled program runs below the grad segment (the ops it replays were
    # recorded, backward included): no GradManager ever sees it.  Nor its paired products, nor
    # its SGD steps folded into products or sums, nor its fused bias additions, nor its groups
    # of optimizer updates.
    TracedProgram, MatrixMulPair, MatrixMulUpdate, BiasAct, BiasSGDUpdate, ElemwiseChain,
    MultiUpdate,
    # Image ops with no gradient in MegEngine: NMS takes detached boxes and answers indices; the
    # colour conversions work on images (uint8 mostly), outside any model's recorded graph.
    NMSKeep, CvtColor,
    # The quantized inference ops: quantized (integer) values get no gradients, and the quantized
    # modules run in inference only, as in MegEngine.
    QuantizedTypeCvt, ConvBias, BatchConvBias, QuantizedConvolutionBackwardData,
    QuantizedMatrixMul, QuantizedElemwise, ElemwiseMultiType,
}

# Ops with a rule that no CASES list holds, and where that rule is tested instead.
NOT_IN_CASES = {
    # Integer outputs: the rule answers None (test_grad_reduce.py checks it).
    Argmax, Argmin,
    # Stops gradients: the rule answers None (test_grad_elemwise.py).
    Detach,
    # The backward ops of training-mode normalisation: their rules raise NotImplementedError (no
    # second order through them, as in MegEngine 1.13), checked in test_grad_nn.py.
    BatchNormBackward, LayerNormBackward,
    # Takes the forward input and output of max pooling as inputs: moving one alone breaks the
    # y = pool(x) it assumes, so test_grad_nn.py checks it with respect to its gradient input only.
    MaxPoolingGather,
    # Samples are not differentiable with respect to the distribution's parameters (no
    # reparameterisation): the rules answer None for every input (test_grad_nn.py); the creation
    # ones (uniform, normal, permutation) have no input at all.
    UniformRNG, GaussianRNG, PermutationRNG, GammaRNG, BetaRNG, PoissonRNG,
    # The image ops' backward op: its rule raises NotImplementedError (no second order through
    # them, as in MegEngine 1.13), checked in test_grad_vision.py.
    VisionBackward,
}


def _import_everything():
    # Ops live in mge._core.ops (imported by ``import mge``) and beside their users elsewhere in
    # the package (the optimizers' fused updates, amp's CheckNonFinite): import every module, so
    # that an op registered anywhere is seen.  mge._core is skipped: its hot modules have
    # compiled twins that must not be imported beside the pure ones (so are the hot modules
    # elsewhere, such as mge.jit.engine).
    for info in pkgutil.walk_packages(mge.__path__, "mge."):
        if not info.name.startswith("mge._core") and info.name not in _accel.HOT_MODULES:
            importlib.import_module(info.name)


_import_everything()


def _mge(classes):
    # Only mge's own ops: test files register made-up ops (test_grad_key.py's ``NoRule``...).
    return {c for c in classes if c.__module__.split(".")[0] == "mge"}


KERNEL_OPS = _mge(KERNELS)
RULE_OPS = _mge(BACKWARD)


def _names(classes):
    return sorted(f"{c.__module__}.{c.__name__}" for c in classes)


def _cased():
    return {type(op) for mod in _case_modules() for op, _ in mod.CASES}


def test_every_op_with_a_kernel_has_a_rule_or_needs_none():
    missing = KERNEL_OPS - RULE_OPS - NO_RULE
    assert not missing, f"ops with a CPU kernel but no backward rule: {_names(missing)}"


def test_no_rule_list_is_up_to_date():
    has_rule = NO_RULE & RULE_OPS
    assert not has_rule, f"these ops have a rule now; take them off NO_RULE: {_names(has_rule)}"
    gone = NO_RULE - KERNEL_OPS
    assert not gone, f"these ops have no CPU kernel (any more): {_names(gone)}"


def test_every_fused_update_op_is_listed():
    def subclasses(cls):
        for c in cls.__subclasses__():
            yield c
            yield from subclasses(c)

    updates = {c for c in subclasses(UpdateOp) if c in KERNEL_OPS}
    assert updates and updates <= NO_RULE, _names(updates - NO_RULE)


def test_every_rule_has_a_case():
    missing = RULE_OPS - _cased() - NOT_IN_CASES
    assert not missing, f"ops with a backward rule that no CASES list checks: {_names(missing)}"


def test_not_in_cases_list_is_up_to_date():
    cased = NOT_IN_CASES & _cased()
    assert not cased, f"these ops are in a CASES list now; take them off NOT_IN_CASES: {_names(cased)}"
    no_rule = NOT_IN_CASES - RULE_OPS
    assert not no_rule, f"these ops have no backward rule: {_names(no_rule)}"
