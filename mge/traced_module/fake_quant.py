"""The fake quantizer a traced QAT module gets in place of a user-defined observer or fake
quantizer (MegEngine's ``megengine.traced_module.fake_quant``): it keeps the qparams that
module had when it was traced and fake-quantizes with them."""
from typing import Union

from ..core.tensor.dtype import QuantDtypeMeta
from ..quantization.fake_quant import _FakeQuantize
from ..quantization.utils import QParams, QParamsModuleMixin, fake_quant_tensor

__all__ = ["FakeQuantize"]


class FakeQuantize(_FakeQuantize, QParamsModuleMixin):
    r"""Quantize and dequantize with fixed :attr:`qparams` (set by :meth:`set_qparams`)."""

    def __init__(self, dtype: Union[str, QuantDtypeMeta], enable: bool = True, **kwargs):
        super().__init__(dtype, enable, **kwargs)
        self.qparams = None

    def fake_quant_forward(self, inp, qparams: QParams = None):
        r"""``inp`` fake-quantized with ``qparams`` (this module's own when ``None``)."""
        if qparams is None:
            qparams = self.get_qparams()
        assert qparams is not None, "FakeQuantize: qparams were never set (call set_qparams)"
        assert qparams.dtype_meta is self.dtype, (
            "input qparams' dtype is not equal to self.dtype.\n"
            f"qparams.dtype_meta={qparams.dtype_meta}\nself.dtype={self.dtype}")
        return fake_quant_tensor(inp, qparams)

    def get_qparams(self):
        r"""The qparams set by :meth:`set_qparams` (``None`` before)."""
        return self.qparams

    def set_qparams(self, qparams: QParams):
        r"""Keep a copy of ``qparams`` (its scale must be set; a missing dtype becomes this
        module's dtype, a different one is an error)."""
        if qparams.scale is None:
            raise AssertionError("Can not get an initialized scale")
        dtype_meta = qparams.dtype_meta
        if dtype_meta is None:
            dtype_meta = self.dtype
        else:
            assert dtype_meta is self.dtype, (
                "input qparams' dtype is not equal to self.dtype.\n"
                f"qparams.dtype_meta={dtype_meta}\nself.dtype={self.dtype}")
        self.qparams = QParams(qparams.mode, dtype_meta, qparams.scale, qparams.zero_point)
