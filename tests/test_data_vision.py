"""mge.data.dataset vision datasets, on tiny files written in tmp_path in the real formats (MNIST
idx.gz, CIFAR pickled batches, an image tree written with cv2, VOC xml, COCO / Objects365 json,
Cityscapes pngs); downloads with the network patched to fail."""
import gzip
import json
import os
import pickle
import struct
import urllib.request

import numpy as np
import pytest

from mge.data import DataLoader, SequentialSampler
from mge.data.dataset import (CIFAR10, CIFAR100, COCO, MNIST, Cityscapes, ImageFolder, ImageNet,
                              Objects365, PascalVOC, VisionDataset)

cv2 = pytest.importorskip("cv2")


def write_mnist(root, n=5, h=4, w=3, prefix="train"):
    rng = np.random.RandomState(0)
    images = rng.randint(0, 256, (n, h, w)).astype(np.uint8)
    labels = rng.randint(0, 10, n).astype(np.uint8)
    with gzip.open(os.path.join(root, "%s-images-idx3-ubyte.gz" % prefix), "wb") as f:
        f.write(struct.pack(">iiii", 2051, n, h, w) + images.tobytes())
    with gzip.open(os.path.join(root, "%s-labels-idx1-ubyte.gz" % prefix), "wb") as f:
        f.write(struct.pack(">ii", 2049, n) + labels.tobytes())
    return images, labels


def test_mnist(tmp_path):
    train = write_mnist(tmp_path, 5, prefix="train")
    test = write_mnist(tmp_path, 3, prefix="t10k")
    ds = MNIST(str(tmp_path), train=True, download=False)
    assert len(ds) == 5 and ds.order == ("image", "image_category")
    img, label = ds[2]
    assert img.shape == (4, 3, 1) and img.dtype == np.uint8
    np.testing.assert_array_equal(img[..., 0], train[0][2])
    assert label == train[1][2] and label.dtype == np.int32
    assert ds.meta["images"] == {"magic": 2051, "imgs": 5, "height": 4, "width": 3}
    ds = MNIST(str(tmp_path), train=False, download=False)
    assert len(ds) == 3 and ds[1][1] == test[1][1]
    loader = DataLoader(ds, sampler=SequentialSampler(ds, batch_size=2))
    assert [b[0].shape for b in loader] == [(2, 4, 3, 1), (1, 4, 3, 1)]


def test_mnist_missing_files_and_bad_magic(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        MNIST(str(tmp_path / "nope"), download=False)
    with pytest.raises(ValueError, match="download=True"):
        MNIST(str(tmp_path), download=False)
    write_mnist(tmp_path, prefix="train")
    write_mnist(tmp_path, prefix="t10k")
    with gzip.open(tmp_path / "train-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">iiii", 1234, 1, 1, 1) + b"\0")
    with pytest.raises(ValueError, match="magic"):
        MNIST(str(tmp_path), download=False)


def test_download_without_network_is_a_clear_error(tmp_path, monkeypatch):
    import urllib.error

    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(RuntimeError, match=r"could not download https://ossci-datasets.*"
                                           r"train-images-idx3-ubyte.gz.*name resolution.*"
                                           r"download=False"):
        MNIST(str(tmp_path / "mnist"), download=True)
    assert os.listdir(tmp_path / "mnist") == []  # no partial file left
    with pytest.raises(RuntimeError, match="could not download http://www.cs.utoronto.ca"):
        CIFAR10(str(tmp_path / "cifar"), download=True, timeout=1)


def write_cifar(root, dirname, files, keys, n=3):
    os.makedirs(os.path.join(root, dirname))
    rng = np.random.RandomState(1)
    written = {}
    for name in files:
        rows = rng.randint(0, 256, (n, 3072)).astype(np.uint8)
        d = {b"data": rows}
        for k in keys:
            d[k] = rng.randint(0, 10, n).tolist()
        with open(os.path.join(root, dirname, name), "wb") as f:
            pickle.dump(d, f)
        written[name] = d
    return written


def test_cifar10(tmp_path):
    batches = ["data_batch_%d" % i for i in range(1, 6)]
    w = write_cifar(str(tmp_path), "cifar-10-batches-py", batches + ["test_batch"], [b"labels"])
    with open(tmp_path / "cifar-10-batches-py" / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [b"cat"]}, f)
    ds = CIFAR10(str(tmp_path), train=True, download=False)
    assert len(ds) == 15
    img, label = ds[4]  # second image of data_batch_2
    row = w["data_batch_2"][b"data"][1]
    np.testing.assert_array_equal(img, row.reshape(3, 32, 32).transpose(1, 2, 0)[..., ::-1])
    assert label == w["data_batch_2"][b"labels"][1] and label.dtype == np.int32
    assert ds.meta == {b"label_names": [b"cat"]}
    assert len(CIFAR10(str(tmp_path), train=False, download=False)) == 3
    with pytest.raises(ValueError, match="download=True"):
        CIFAR100(str(tmp_path), download=False)


def test_cifar100(tmp_path):
    w = write_cifar(str(tmp_path), "cifar-100-python", ["train", "test"],
                    [b"fine_labels", b"coarse_labels"])
    ds = CIFAR100(str(tmp_path), train=False, download=False)
    img, fine, coarse = ds[2]
    assert img.shape == (32, 32, 3)
    assert fine == w["test"][b"fine_labels"][2] and coarse == w["test"][b"coarse_labels"][2]


def test_image_folder(tmp_path):
    rng = np.random.RandomState(2)
    imgs = {}
    for cls, names in {"dog": ["b.png", "a.png"], "cat": ["x.png"], "cow": []}.items():
        os.makedirs(tmp_path / cls / "sub")
        for name in names:
            img = rng.randint(0, 256, (5, 7, 3)).astype(np.uint8)
            cv2.imwrite(str(tmp_path / cls / name), img)
            imgs[(cls, name)] = img
    cv2.imwrite(str(tmp_path / "dog" / "sub" / "c.png"), np.zeros((2, 2, 3), np.uint8))
    (tmp_path / "dog" / "notes.txt").write_text("not an image")
    ds = ImageFolder(str(tmp_path))
    assert ds.class_dict == {"cat": 0, "cow": 1, "dog": 2}
    assert [os.path.relpath(p, tmp_path) for p, _ in ds.samples] == [
        "cat/x.png", "dog/a.png", "dog/b.png", "dog/sub/c.png"]
    img, label = ds[1]
    np.testing.assert_array_equal(img, imgs[("dog", "a.png")])
    assert label == 2 and label.dtype == np.int32
    assert ImageFolder(str(tmp_path), class_name=True)[0][1] == "cat"
    only_b = ImageFolder(str(tmp_path), check_valid_func=lambda p: p.endswith("b.png"))
    assert len(only_b) == 1
    with pytest.raises(FileNotFoundError):
        ImageFolder(str(tmp_path / "missing"))


VOC_XML = """<annotation><filename>{name}.jpg</filename>
<size><width>8</width><height>6</height><depth>3</depth></size>
{objects}</annotation>"""
VOC_OBJ = """<object><name>{cls}</name><difficult>0</difficult>
<bndbox><xmin>{b[0]}</xmin><ymin>{b[1]}</ymin><xmax>{b[2]}</xmax><ymax>{b[3]}</ymax></bndbox></object>"""


def write_voc(root):
    for d in ("JPEGImages", "Annotations", "ImageSets/Main", "ImageSets/Segmentation",
              "SegmentationClass"):
        os.makedirs(os.path.join(root, d))
    objs = {"000001": [("dog", (1, 2, 5, 6)), ("person", (0, 0, 3, 3))],
            "000002": [("cat", (2, 1, 4, 5))]}
    for name, ob in objs.items():
        cv2.imwrite(os.path.join(root, "JPEGImages", name + ".jpg"), np.full((6, 8, 3), 90, np.uint8))
        xml = VOC_XML.format(name=name, objects="".join(VOC_OBJ.format(cls=c, b=b) for c, b in ob))
        with open(os.path.join(root, "Annotations", name + ".xml"), "w") as f:
            f.write(xml)
        mask = np.zeros((6, 8, 3), np.uint8)
        mask[1:3, 1:3] = (0, 0, 128)  # class 1 (BGR of aeroplane's colour)
        mask[4, 4] = (192, 224, 224)  # the border colour: 255
        cv2.imwrite(os.path.join(root, "SegmentationClass", name + ".png"), mask)
    for split in ("Main", "Segmentation"):
        with open(os.path.join(root, "ImageSets", split, "train.txt"), "w") as f:
            f.write("000001\n000002\n")


def test_pascal_voc(tmp_path):
    write_voc(str(tmp_path))
    ds = PascalVOC(str(tmp_path), "train", order=("image", "boxes", "boxes_category", "info"))
    assert len(ds) == 2
    img, boxes, cats, info = ds[0]
    assert img.shape == (6, 8, 3)
    np.testing.assert_array_equal(boxes, [[1, 2, 5, 6], [0, 0, 3, 3]])
    assert boxes.dtype == np.float32
    assert cats.tolist() == [12, 15] and cats.dtype == np.int32  # dog, person (1-based)
    assert info == [6, 8, "000001"]
    assert ds[1][2].tolist() == [8]
    seg = PascalVOC(str(tmp_path), "train", order=("image", "mask"))
    mask = seg[0][1]
    assert mask.shape == (6, 8, 1) and mask[1, 1, 0] == 1 and mask[0, 0, 0] == 0
    assert mask[4, 4, 0] == 255
    with pytest.raises(ValueError, match="not both"):
        PascalVOC(str(tmp_path), "train", order=("image", "boxes", "mask"))
    with pytest.raises(NotImplementedError, match="keypoints"):
        PascalVOC(str(tmp_path), "train", order=("image", "keypoints"))


def write_coco(root):
    os.makedirs(os.path.join(root, "images"))
    images = [{"id": 7, "file_name": "a.jpg", "height": 6, "width": 8, "license": 1},
              {"id": 3, "file_name": "b.jpg", "height": 6, "width": 8},
              {"id": 5, "file_name": "c.jpg", "height": 6, "width": 8}]
    for im in images:
        cv2.imwrite(os.path.join(root, "images", im["file_name"]), np.zeros((6, 8, 3), np.uint8))
    kp = [1, 1, 2] * 17
    anns = [{"id": 1, "image_id": 7, "bbox": [1, 2, 3, 2], "category_id": 18, "iscrowd": 0,
             "keypoints": kp, "segmentation": [[0, 0, 1, 1, 2, 0]]},
            {"id": 2, "image_id": 7, "bbox": [0, 0, 2, 2], "category_id": 1, "iscrowd": 0,
             "keypoints": kp},
            {"id": 3, "image_id": 3, "bbox": [0, 0, 0, 2], "category_id": 1, "iscrowd": 0,
             "keypoints": kp},
            {"id": 4, "image_id": 5, "bbox": [1, 1, 2, 2], "category_id": 1, "iscrowd": 1,
             "keypoints": kp}]
    cats = [{"id": 1, "name": "person"}, {"id": 18, "name": "dog"}]
    path = os.path.join(root, "ann.json")
    with open(path, "w") as f:
        json.dump({"images": images, "annotations": anns, "categories": cats}, f)
    return path


def test_coco(tmp_path):
    ann = write_coco(str(tmp_path))
    order = ("image", "boxes", "boxes_category", "keypoints", "info")
    ds = COCO(str(tmp_path / "images"), ann, order=order)
    assert ds.ids == [3, 5, 7] and len(ds) == 3
    img, boxes, cats, kps, info = ds[2]
    np.testing.assert_array_equal(boxes, [[1, 2, 4, 4], [0, 0, 2, 2]])  # xywh -> xyxy
    assert cats.tolist() == [2, 1]  # contiguous ids
    assert kps.shape == (2, 17, 3) and kps.dtype == np.float32
    assert info == [6, 8, "a.jpg"] and img.shape == (6, 8, 3)
    assert "license" not in ds.get_img_info(2)
    kept = COCO(str(tmp_path / "images"), ann, remove_images_without_annotations=True,
                order=("image", "boxes", "boxes_category"))
    assert kept.ids == [7]  # 3: empty box; 5: crowd only
    assert kept.contiguous_category_id_to_json_id == {1: 1, 2: 18}
    with pytest.raises(NotImplementedError, match="mask"):
        COCO(str(tmp_path / "images"), ann, order=("image", "mask"))


def test_objects365(tmp_path):
    ann = write_coco(str(tmp_path))
    ds = Objects365(str(tmp_path / "images"), ann, remove_images_without_annotations=True,
                    order=("image", "boxes", "boxes_category", "info"))
    assert len(ds) == 1
    _, boxes, cats, info = ds[0]
    assert boxes.shape == (2, 4) and cats.tolist() == [2, 1] and info[2] == "a.jpg"
    assert len(Objects365.class_names) == 365


def test_cityscapes(tmp_path):
    img_dir = tmp_path / "leftImg8bit" / "train" / "aachen"
    mask_dir = tmp_path / "gtFine" / "train" / "aachen"
    os.makedirs(img_dir)
    os.makedirs(mask_dir)
    cv2.imwrite(str(img_dir / "aachen_000000_000019_leftImg8bit.png"),
                np.zeros((4, 5, 3), np.uint8))
    label_ids = np.array([[7, 8, 0, 33, 26]] * 4, np.uint8)
    cv2.imwrite(str(mask_dir / "aachen_000000_000019_gtFine_labelIds.png"), label_ids)
    ds = Cityscapes(str(tmp_path), "train", "gtFine", order=("image", "mask", "info"))
    img, mask, info = ds[0]
    assert mask.shape == (4, 5, 1)
    assert mask[0, :, 0].tolist() == [0, 1, 255, 18, 13]
    assert info[:2] == [4, 5]


def test_vision_dataset_base_and_imagenet_errors(tmp_path):
    with pytest.raises(ValueError, match="order"):
        VisionDataset(str(tmp_path), order="image")
    with pytest.raises(NotImplementedError, match="boxes"):
        VisionDataset(str(tmp_path), order=("boxes",), supported_order=("image",))
    with pytest.raises(FileNotFoundError, match="raw files do not exist"):
        ImageNet(str(tmp_path))
    os.makedirs(tmp_path / "val" / "n01440764")
    cv2.imwrite(str(tmp_path / "val" / "n01440764" / "x.JPEG"), np.zeros((2, 2, 3), np.uint8))
    ds = ImageNet(str(tmp_path), train=False)
    assert len(ds) == 1 and ds[0][1] == 0
