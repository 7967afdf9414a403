"""Image operations (``megengine.functional.vision``): resizing, warps, remap, RoI pooling, NMS,
colour conversion and correlation.

Signatures, defaults and error messages follow MegEngine 1.13.  Output sizes that MegEngine passes
to its ops as tensors are read on the host here.
"""
from typing import Iterable, Optional, Tuple, Union

import numpy as np

from .._core.ops.vision import (
    Correlation, CvtColor, NMSKeep, Remap, Resize, Resize3D, ROIAlign, ROIPooling, WarpAffine,
    WarpPerspective,
)
from ..core import apply
from ..tensor import Tensor
from .math import argsort
from .tensor import arange, cond_take, expand_dims, reshape

__all__ = [
    "correlation", "cvt_color", "interpolate", "nms", "nvof", "remap", "roi_align",
    "roi_pooling", "warp_affine", "warp_perspective",
]


def _device_of(*xs):
    """The device of the first tensor among ``xs`` (None, the default device, when none is)."""
    return next((x.device for x in xs if isinstance(x, Tensor)), None)


def _t(x, dtype=None, device=None):
    """``x`` as a tensor; a host value goes onto ``device`` -- the device of the op's tensor
    inputs (``_device_of``), as MegEngine's ``apply`` places them -- so that an input on another
    device than the default one (``cpu1``, a GPU) does not meet a default-device operand."""
    return x if isinstance(x, Tensor) else Tensor(x, dtype=dtype, device=device)


def _host_ints(v):
    if isinstance(v, Tensor):
        v = v.numpy()
    return tuple(int(s) for s in np.asarray(v).reshape(-1).tolist())


def cvt_color(inp: Tensor, mode: str = ""):
    r"""Convert images (NHWC) from one colour format to another.

    Args:
        inp: input images, ``(N, H, W, C)``.
        mode: format mode: ``"RGB2GRAY"``, ``"BGR2GRAY"``, ``"RGB2BGR"``, ``"BGR2RGB"``,
            ``"GRAY2RGB"``, ``"GRAY2BGR"``, ``"RGBA2RGB"``, ``"RGBA2BGR"``, ``"RGBA2GRAY"``,
            ``"RGB2YUV"``, ``"YUV2RGB"`` (float32 and uint8).  MegEngine's other CPU modes (the
            NV21/NV12/YV12/YU12 and BT601 families) raise ``NotImplementedError`` in mge.

    Returns:
        convert result.

    Examples:
        >>> x = mge.tensor(np.array([[[[-0.58675045, 1.7526233, 0.10702174]]]]).astype(np.float32))
        >>> y = F.vision.cvt_color(x, mode="RGB2GRAY")
        >>> y.numpy().round(4)
        array([[[[0.8656]]]], dtype=float32)
    """
    mode = mode.upper() if "YCrCb" not in mode else mode
    known = ("RGB2GRAY", "RGB2YUV", "YUV2RGB", "GRAY2RGB", "RGBA2RGB", "RGBA2BGR", "RGBA2GRAY",
             "RGB2BGR", "BGR2GRAY", "BGR2RGB", "YUV2GRAY_NV21", "YUV2RGB_NV21", "YUV2BGR_NV21",
             "YUV2GRAY_NV12", "YUV2RGB_NV12", "YUV2BGR_NV12", "YUV2GRAY_YV12", "YUV2RGB_YV12",
             "YUV2BGR_YV12", "YUV2GRAY_YU12", "YUV2RGB_YU12", "YUV2BGR_YU12", "YCrCb2RGB",
             "YCrCb2BGR", "BT601_YUV2RGB_NV21", "BT601_YUV2BGR_NV21", "BT601_YUV2RGB_NV12",
             "BT601_YUV2BGR_NV12", "BT601_YUV2RGB_YV12", "BT601_YUV2BGR_YV12",
             "BT601_YUV2RGB_YU12", "BT601_YUV2BGR_YU12", "GRAY2BGR")
    assert mode in known, "unspport mode for cvt_color"
    (out,) = apply(CvtColor(mode), _t(inp))
    return out


def roi_pooling(
    inp: Tensor,
    rois: Tensor,
    output_shape: Union[int, tuple, list],
    mode: str = "max",
    scale: float = 1.0,
) -> Tensor:
    r"""Applies RoI (Region of Interest) pooling on input feature, as described in Faster RCNN.

    Args:
        inp: the input feature, ``(n, c, h, w)``.
        rois: ``(K, 5)`` boxes ``(idx, x1, y1, x2, y2)``; ``idx`` is the batch index.
        output_shape: ``(height, width)`` of the pooled feature (an int for a square).
        mode: "max" or "average". Default: "max"
        scale: maps the boxes' coordinates onto the feature. Default: 1.0

    Returns:
        ``(K, C, output_shape[0], output_shape[1])`` feature of rois.

    Examples:
        >>> inp = mge.tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
        >>> rois = mge.tensor([[0, 0, 0, 3, 3]], dtype="float32")
        >>> F.vision.roi_pooling(inp, rois, (2, 2)).numpy()
        array([[[[ 5.,  7.],
                 [13., 15.]]]], dtype=float32)
    """
    assert mode.lower() in ["max", "average"], "only max/average mode is supported"
    if isinstance(output_shape, int):
        output_shape = (output_shape, output_shape)
    op = ROIPooling(mode, scale, tuple(output_shape))
    dev = _device_of(inp, rois)
    result, _ = apply(op, _t(inp, device=dev), _t(rois, "float32", dev))
    return result


def correlation(
    data1: Tensor,
    data2: Tensor,
    kernel_size: int = 1,
    max_displacement: int = 1,
    stride1: int = 1,
    stride2: int = 1,
    pad_size: int = 0,
    is_multiply: bool = True,
) -> Tensor:
    r"""Applies correlation (FlowNet) to two NCHW inputs.

    Args:
        data1: Input data1 to the correlation. format must be nchw
        data2: Input data2 to the correlation. format must be nchw
        kernel_size: kernel size for Correlation, an odd number. Default: 1
        max_displacement: Max displacement of Correlation. Default: 1
        stride1: stride1 quantize data1 globally. Default: 1
        stride2: stride2 quantize data2 within the neighborhood centered around data1. Default: 1
        pad_size: pad for Correlation. Default: 0
        is_multiply: multiplication (True) or absolute difference (False). Default: True

    Returns:
        ``(N, (2 * (max_displacement // stride2) + 1) ** 2, OH, OW)``.
    """
    op = Correlation(kernel_size, max_displacement, stride1, stride2, pad_size, is_multiply)
    dev = _device_of(data1, data2)
    result, *_ = apply(op, _t(data1, device=dev), _t(data2, device=dev))
    return result


def roi_align(
    inp: Tensor,
    rois: Tensor,
    output_shape: Union[int, tuple, list],
    mode: str = "average",
    spatial_scale: float = 1.0,
    sample_points: Union[int, tuple, list] = 2,
    aligned: bool = True,
) -> Tensor:
    r"""Applies RoI (Region of Interest) align on input feature, as described in Mask R-CNN.

    Args:
        inp: the input feature, ``(n, c, h, w)``.
        rois: ``(K, 5)`` boxes ``(idx, x1, y1, x2, y2)``; ``idx`` is the batch index.
        output_shape: ``(height, width)`` shape of output rois feature.
        mode: "max" or "average". Default: "average"
        spatial_scale: scale the input boxes by this number. Default: 1.0
        sample_points: number of inputs samples to take for each output sample. Default: 2
        aligned: shift the scaled boxes by -0.5. Default: True

    Returns:
        output tensor ``(K, C, height, width)``.

    Examples:
        >>> inp = mge.tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
        >>> rois = mge.tensor([[0, 0, 0, 4, 4]], dtype="float32")
        >>> F.vision.roi_align(inp, rois, (2, 2)).numpy()
        array([[[[ 2.5,  4.5],
                 [10.5, 12.5]]]], dtype=float32)
    """
    inp = _t(inp, device=_device_of(inp, rois))
    if inp.dtype != np.float32:
        inp = inp.astype(np.float32)
    mode = mode.lower()
    assert mode in ["max", "average"], "only max/average mode is supported"
    if isinstance(output_shape, int):
        output_shape = (output_shape, output_shape)
    pooled_height, pooled_width = output_shape
    if isinstance(sample_points, int):
        sample_points = (sample_points, sample_points)
    sample_height, sample_width = sample_points
    offset = 0.5 if aligned else 0.0
    op = ROIAlign(mode, spatial_scale, offset, pooled_height, pooled_width, sample_height,
                  sample_width)
    result, *_ = apply(op, inp, _t(rois, "float32", inp.device))
    return result


def nms(
    boxes: Tensor, scores: Tensor, iou_thresh: float, max_output: Optional[int] = None
) -> Tensor:
    r"""Performs non-maximum suppression (NMS) on the boxes according to their IoU.

    Args:
        boxes: ``(N, 4)`` boxes in ``(x1, y1, x2, y2)`` format.
        scores: ``(N,)`` scores of the boxes.
        iou_thresh: IoU threshold for overlapping.
        max_output: the maximum number of boxes to keep; all when None.

    Returns:
        int32 indices of the kept boxes, sorted by score.

    Examples:
        >>> boxes = mge.tensor([[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]], dtype="float32")
        >>> F.vision.nms(boxes, mge.tensor([0.9, 0.8, 0.7]), iou_thresh=0.5).numpy()
        array([0, 2], dtype=int32)
    """
    dev = _device_of(boxes, scores)
    boxes, scores = _t(boxes, device=dev), _t(scores, device=dev)
    assert (
        boxes.ndim == 2 and boxes.shape[1] == 4
    ), "the expected shape of boxes is (N, 4)"
    assert scores.ndim == 1, "the expected shape of scores is (N,)"
    assert (
        boxes.shape[0] == scores.shape[0]
    ), "number of boxes and scores are not matched"
    boxes = boxes.detach()
    scores = scores.detach()
    sorted_idx = argsort(scores, descending=True)
    boxes = boxes[sorted_idx]
    if max_output is None:
        max_output = boxes.shape[0]
    indices, count = apply(NMSKeep(iou_thresh, max_output), boxes.reshape(1, -1, 4))
    # the first ``count`` indices, as an op whose output shape depends on values (so a symbolic
    # trace need not read the count)
    keep = arange(max_output, dtype="int32", device=count.device) < count
    indices, _ = cond_take(keep, indices[0])
    return sorted_idx[indices]


def remap(
    inp: Tensor,
    map_xy: Tensor,
    border_mode: str = "replicate",
    scalar: float = 0.0,
    interp_mode: str = "linear",
) -> Tensor:
    r"""Applies remap transformation to batched 2D images.

    The output's H and W are those of ``map_xy``; ``map_xy[..., 0]`` and ``map_xy[..., 1]`` are the
    x (column) and y (row) positions read in ``inp``.

    Args:
        inp: input image, ``[b, c, in_h, in_w]``.
        map_xy: ``[b, o_h, o_w, 2]`` sampling positions.
        border_mode: "replicate" (default), "constant", "reflect", "reflect_101", "wrap".
        scalar: value used in case of a constant border. Default: 0
        interp_mode: "linear" (default) or "nearest".

    Returns:
        output tensor. [b, c, o_h, o_w]

    Examples:
        >>> inp = mge.tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
        >>> map_xy = mge.tensor(np.array([[[1., 0.], [0., 1.]], [[0., 1.], [0., 1.]]],
        ...                              dtype=np.float32).reshape(1, 2, 2, 2))
        >>> F.vision.remap(inp, map_xy).numpy()
        array([[[[1., 4.],
                 [4., 4.]]]], dtype=float32)
    """
    assert isinstance(inp, Tensor), "inp must be Tensor type"
    op = Remap(interp_mode, border_mode, "NCHW", scalar)
    (result,) = apply(op, inp, _t(map_xy, "float32", inp.device))
    return result


def warp_affine(
    inp: Tensor,
    mat: Tensor,
    out_shape: Union[Tuple[int, int], int, Tensor],
    border_mode: str = "replicate",
    border_val: float = 0.0,
    format: str = "NHWC",
    interp_mode: str = "linear",
) -> Tensor:
    r"""Batched affine transformation on 2D images.

    ``output(n, h, w) = input(n, M[1] . (w, h, 1), M[0] . (w, h, 1))``, sampled bilinearly.

    Args:
        inp: input image.
        mat: ``(batch, 2, 3)`` transformation matrix.
        out_shape: output ``(h, w)``.
        border_mode: "replicate" (default), "constant", "reflect", "reflect_101", "wrap",
            "isolated", "transparent".
        border_val: value used in case of a constant border. Default: 0
        format: "NHWC" (default) or "NCHW".
        interp_mode: "linear" (default) or "nearest"; MegEngine's "cubic" and "area" raise
            ``NotImplementedError`` in mge.

    Returns:
        output tensor.

    Note:
        In the NHWC format the sampling coordinates are quantized to 1/32 pixel, as by
        MegEngine's CPU kernel (OpenCV's fixed-point warp); NCHW samples at exact coordinates.
        Unlike MegEngine 1.13, ``warp_affine`` has a gradient (input and ``mat``).

    Examples:
        >>> x = mge.tensor(np.arange(16, dtype=np.float32).reshape(1, 4, 4, 1))
        >>> M = mge.tensor([[[1., 0., 1.], [0., 1., 1.]]])
        >>> F.vision.warp_affine(x, M, (2, 2)).numpy().reshape(2, 2)
        array([[ 5.,  6.],
               [ 9., 10.]], dtype=float32)
    """
    inp = _t(inp, device=_device_of(inp, mat))
    op = WarpAffine(interp_mode, border_mode, format, border_val, _host_ints(out_shape))
    (out,) = apply(op, inp, _t(mat, "float32", inp.device))
    return out


def warp_perspective(
    inp: Tensor,
    mat: Tensor,
    out_shape: Union[Tuple[int, int], int, Tensor],
    mat_idx: Optional[Union[Iterable[int], Tensor]] = None,
    border_mode: str = "replicate",
    border_val: float = 0.0,
    format: str = "NCHW",
    interp_mode: str = "linear",
) -> Tensor:
    r"""Applies perspective transformation to batched 2D images.

    .. math::
            \text{output}(n, c, h, w) = \text{input} \left( n, c,
                \frac{M_{10}w + M_{11}h + M_{12}}{M_{20}w + M_{21}h + M_{22}},
                \frac{M_{00}w + M_{01}h + M_{02}}{M_{20}w + M_{21}h + M_{22}}
                \right)

    ``mat_idx`` assigns an input image to each matrix (otherwise images and matrices correspond
    one to one).

    Args:
        inp: input image.
        mat: ``(batch, 3, 3)`` transformation matrix.
        out_shape: ``(h, w)`` size of the output image.
        mat_idx: image batch idx assigned to each matrix. Default: None
        border_mode: "replicate" (default), "constant", "reflect", "reflect_101", "wrap".
        border_val: value used in case of a constant border. Default: 0
        format: "NCHW" (default) or "NHWC".
        interp_mode: "linear" (default).

    Returns:
        output tensor.

    Examples:
        >>> x = mge.tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
        >>> M = mge.tensor(np.array([[1., 0., 1.], [0., 1., 1.], [0., 0., 1.]],
        ...                         dtype=np.float32).reshape(1, 3, 3))
        >>> F.vision.warp_perspective(x, M, (2, 2)).numpy()
        array([[[[ 5.,  6.],
                 [ 9., 10.]]]], dtype=float32)
    """
    dev = _device_of(inp, mat, mat_idx)
    inp, mat = _t(inp, device=dev), _t(mat, device=dev)
    if inp.dtype == np.float32:
        mat = mat.astype("float32")
    if inp.dtype == np.float16:
        inp = inp.astype("float32")
    op = WarpPerspective(interp_mode, border_mode, format, border_val, _host_ints(out_shape))
    if mat_idx is not None:
        mat_idx = _t(mat_idx, "int32", inp.device)
        if mat_idx.dtype != np.int32:
            mat_idx = mat_idx.astype("int32")
        (result,) = apply(op, inp, mat, mat_idx)
        return result
    (result,) = apply(op, inp, mat)
    return result


def interpolate(
    inp: Tensor,
    size: Optional[Union[int, Tuple[int, int]]] = None,
    scale_factor: Optional[Union[float, Tuple[float, float]]] = None,
    mode: str = "bilinear",
    align_corners: Optional[bool] = None,
) -> Tensor:
    r"""Down/up samples the input tensor to either the given size or with the given scale_factor.
    ``size`` can not coexist with ``scale_factor``.

    Args:
        inp: input tensor.
        size: the size of the output tensor. Default: None
        scale_factor: scaling factor of the output tensor. Default: None
        mode: "bilinear", "linear", "trilinear", "bicubic" or "nearest". Default: "bilinear".
            "trilinear" is valid only when inp is a 5D-tensor, "linear" for a 3D one.
        align_corners: only for the linear modes: align the centres of the corner pixels
            (True) or their corners (False, the default).

    Returns:
        output tensor

    Examples:
        >>> x = mge.tensor(np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2))
        >>> F.vision.interpolate(x, [4, 4], align_corners=False).numpy()
        array([[[[1.  , 1.25, 1.75, 2.  ],
                 [1.5 , 1.75, 2.25, 2.5 ],
                 [2.5 , 2.75, 3.25, 3.5 ],
                 [3.  , 3.25, 3.75, 4.  ]]]], dtype=float32)
    """
    inp = _t(inp)
    mode = mode.lower()
    if mode not in ["bilinear", "linear", "trilinear", "bicubic", "nearest"]:
        raise ValueError("unsupported interpolate mode: {}".format(mode))
    if mode not in ["bilinear", "linear", "trilinear"]:
        if align_corners is not None:
            raise ValueError(
                "align_corners option can only be set in the bilinear/linear interpolating mode"
            )
    else:
        if align_corners is None:
            align_corners = False

    if mode == "linear":
        inp = expand_dims(inp, 3)

    if mode == "trilinear":
        assert inp.ndim == 5, "under trilinear mode, input tensor must have 5 dimensions"
    else:
        assert inp.ndim == 4, "shape of input tensor must correspond to the operartion mode"

    def get_dsize(scale_factor):
        if isinstance(scale_factor, (float, int)):
            scale_factor = float(scale_factor)
            if mode == "linear":
                scale_factor = (scale_factor, float(1))
            elif mode == "trilinear":
                scale_factor = (scale_factor, scale_factor, scale_factor)
            else:
                scale_factor = (scale_factor, scale_factor)
        else:
            if mode == "linear":
                raise ValueError("under linear mode, scale_factor can only be single value")
        if mode == "trilinear":
            assert (
                len(scale_factor) == 3
            ), f"shape of scale_factor of interpolate-{mode} must be equal to (3, )"
        else:
            assert (
                len(scale_factor) == 2
            ), f"shape of scale_factor of interpolate-{mode} must be equal to (2, )"
        assert all(
            isinstance(x, (float, int)) for x in scale_factor
        ), "scale_factor of interpolate must be float/int type"
        return tuple(int(np.floor(np.float32(inp.shape[i + 2] * float(scale_factor[i]))))
                     for i in range(len(scale_factor)))

    if size is None:
        if scale_factor is None:
            raise ValueError("scale_factor must not be None when size is None")
        dsize = get_dsize(scale_factor)
    else:
        if scale_factor is not None:
            raise ValueError("scale_factor must be None when size is provided")
        if isinstance(size, int):
            size = (size, 1, 1) if mode == "trilinear" else (size, 1)
        else:
            if mode == "linear":
                raise ValueError("under linear mode, size can only be single value")
        dsize = _host_ints(size)

    if mode == "trilinear":
        if inp.dtype == np.float16:
            inp = inp.astype("float32")
        (ret,) = apply(Resize3D("linear", align_corners, dsize), inp)
    elif not align_corners:
        mode_map = {"linear": "linear", "bilinear": "linear", "nearest": "nearest",
                    "bicubic": "cubic"}
        if inp.dtype == np.float16:
            inp = inp.astype("float32")
        (ret,) = apply(Resize(mode_map[mode], "NCHW", dsize), inp)
    else:
        assert mode in ["linear", "bilinear"], "align_corners only support linear or bilinear mode"
        oh, ow = dsize[0], dsize[1]
        ih, iw = inp.shape[2], inp.shape[3]
        # MegEngine's arithmetic, in float32 (a 1-pixel output divides by zero there too)
        with np.errstate(divide="ignore", invalid="ignore"):
            hscale = np.float32((ih - 1.0) / (oh - 1.0)) if oh != 1 else np.float32(np.inf)
            wscale = np.float32(1.0 * iw / ow)
            if mode != "linear":
                wscale = np.float32((iw - 1.0) / (ow - 1.0)) if ow != 1 else np.float32(np.inf)
        weight = np.array([[wscale, 0, 0], [0, hscale, 0], [0, 0, 1]], np.float32)
        weight = np.broadcast_to(weight, (inp.shape[0], 3, 3)).copy()
        # the matrix goes on the input's device: on the default one it would meet an input
        # elsewhere (cpu1, a GPU) in one WarpPerspective
        mat = Tensor(weight, dtype="float32", device=inp.device)
        ret = warp_perspective(inp, mat, dsize, interp_mode="linear")

    if mode == "linear":
        ret = reshape(ret, ret.shape[0:3])
    return ret


def nvof(src: Tensor, precision: int = 1) -> Tensor:
    r"""NVIDIA Optical Flow SDK (MegEngine's ``NvOf``): not available in mge.

    Args:
        src: input tensor with shape (n, t, h, w, c4) and uint8 dtype.
        precision: 0:NV_OF_PERF_LEVEL_SLOW 1:NV_OF_PERF_LEVEL_MEDIUM 2:NV_OF_PERF_LEVEL_FAST.

    Raises:
        NotImplementedError: always; the op runs on NVIDIA optical-flow hardware (Turing or
        later GPUs with the NVOF SDK), which mge does not drive.
    """
    assert src.ndim == 5 and src.shape[4] == 4
    raise NotImplementedError(
        "nvof needs NVIDIA optical-flow hardware and the NVIDIA Optical Flow SDK; "
        "it is not implemented in mge")
