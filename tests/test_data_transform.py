"""mge.data.transform: outputs against MegEngine 1.13's, recorded for the same inputs and seeds in
tests/data/megengine_data_transforms.npz (tests/data/gen_megengine_data_refs.py), plus the base
classes' behaviour and errors."""
import os
import random
import sys

import numpy as np
import pytest

import mge.data.transform as T
from mge.data.transform import PseudoTransform, Transform, VisionTransform
from mge.data.transform.vision import functional as VF

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "data"))
from megengine_data_cases import BATCH_CASE, CASES, sample  # noqa: E402

REFS = np.load(os.path.join(HERE, "data", "megengine_data_transforms.npz"))
pytest.importorskip("cv2")


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_matches_megengine(case):
    name, make, order, fields, seed = case
    t = make(T)
    x = sample(fields, seed)
    np.random.seed(seed)
    random.seed(seed)
    out = t.apply(x if len(x) > 1 else x[0])
    out = out if isinstance(out, tuple) else (out,)
    n_ref = len([k for k in REFS.files if k.startswith(name + "/out")])
    assert len(out) == n_ref
    for i, o in enumerate(out):
        ref = REFS["%s/out%d" % (name, i)]
        o = np.asarray(o)
        assert o.shape == ref.shape, (name, i)
        assert o.dtype == ref.dtype, (name, i)
        if o.dtype.kind == "f":
            np.testing.assert_allclose(o, ref, rtol=1e-5, atol=1e-4, err_msg=name)
        else:
            np.testing.assert_array_equal(o, ref, err_msg=name)


def test_batch_compose_matches_megengine():
    name, make, seed = BATCH_CASE
    batch = [sample(("image", "image_category"), seed + k) for k in range(3)]
    np.random.seed(seed)
    out = make(T).apply_batch(batch)
    for k, (img, cat) in enumerate(out):
        np.testing.assert_allclose(img, REFS["%s/sample%d" % (name, k)], rtol=1e-6)
        assert cat == batch[k][1]


def test_exports_match_megengine():
    expected = {"BrightnessTransform", "CenterCrop", "ColorJitter", "Compose", "ContrastTransform",
                "GaussianNoise", "HueTransform", "Lighting", "Normalize", "Pad", "PseudoTransform",
                "RandomCrop", "RandomHorizontalFlip", "RandomResize", "RandomResizedCrop",
                "RandomVerticalFlip", "Resize", "SaturationTransform", "ShortestEdgeResize", "ToMode",
                "TorchTransformCompose", "Transform", "VisionTransform"}
    assert expected <= set(dir(T))
    for n in expected:
        assert getattr(T, n).__doc__, n


def test_transform_base_classes():
    with pytest.raises(TypeError):
        Transform()
    assert PseudoTransform().apply((1, 2)) == (1, 2)
    assert PseudoTransform().apply_batch([1, 2]) == (1, 2)
    assert repr(T.Normalize()) == "Normalize"


def test_order_validation():
    with pytest.raises(ValueError, match="order"):
        T.Normalize(order="image")
    with pytest.raises(ValueError, match="batch"):
        T.Normalize(order=("image", "batch"))
    with pytest.raises(NotImplementedError, match="polygons_x"):
        T.Normalize(order=("image", "polygons_x"))
    # *category and *info pass through; extra fields beyond order pass through
    t = T.RandomHorizontalFlip(1.0, order=("image", "image_category", "info"))
    img = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    out = t.apply((img, 3, ["a"], "extra"))
    np.testing.assert_array_equal(out[0], img[:, ::-1])
    assert out[1:] == (3, ["a"], "extra")


def test_lone_array_and_polygons():
    img = np.zeros((4, 6, 3), np.uint8)
    assert T.ToMode().apply(img).shape == (3, 4, 6)
    t = T.RandomHorizontalFlip(1.0, order=("image", "polygons"))
    polys = [[np.array([[1.0, 1.0], [2.0, 3.0]])]]
    _, out = t.apply((img, polys))
    np.testing.assert_array_equal(out[0][0], [[5.0, 1.0], [4.0, 3.0]])


def test_argument_errors():
    with pytest.raises(ValueError, match="brightness"):
        T.BrightnessTransform(-1)
    with pytest.raises(ValueError, match="hue"):
        T.HueTransform(0.7)
    with pytest.raises(ValueError, match="mask_value"):
        T.Pad(1, mask_value=0.5)
    with pytest.raises(ValueError, match="size"):
        T.Pad((1, 2, 3))
    with pytest.raises(NotImplementedError, match="sample style"):
        T.ShortestEdgeResize(10, 20, sample_style="uniform")
    with pytest.raises(ValueError, match="shuffle"):
        T.Compose([], batch_compose=True, shuffle_indices=[(1, 2)])
    with pytest.raises(ValueError, match="3 dims"):
        VF.flip(np.zeros((2, 2)), 1)
    with pytest.raises(ValueError, match=r"\(h, w\)"):
        VF.resize(np.zeros((2, 2, 1)), (3,))


def test_color_jitter_zero_is_identity_and_keeps_dtype():
    img = sample(("image",), 3)[0]
    np.testing.assert_array_equal(T.ColorJitter().apply(img), img)
    out = T.ColorJitter(0.5, 0.5, 0.5, 0.2).apply(img)
    assert out.dtype == np.uint8 and out.shape == img.shape


def test_without_cv2_names_the_extra(monkeypatch):
    import mge.data._cv2 as c
    monkeypatch.setattr(c, "_cv2", None)
    monkeypatch.setitem(sys.modules, "cv2", None)  # import cv2 -> ImportError
    with pytest.raises(ImportError, match=r'pip install "mge\[data\]"'):
        T.Resize((2, 2)).apply(np.zeros((4, 4, 3), np.uint8))
    # transforms that need no OpenCV still work
    assert T.Normalize(1, 2).apply(np.ones((2, 2, 1), np.uint8)).sum() == 0


def test_custom_vision_transform():
    class AddOne(VisionTransform):
        def _apply_image(self, image):
            return image + 1

        def _apply_coords(self, coords):
            return coords

    t = T.Compose([AddOne(), AddOne()], order=("image", "boxes"))
    img, boxes = t.apply((np.zeros((2, 2, 1)), np.array([[0.0, 0.0, 1.0, 1.0]])))
    assert img.max() == 2
    np.testing.assert_array_equal(boxes, [[0, 0, 1, 1]])
