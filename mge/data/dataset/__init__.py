"""Datasets (MegEngine's ``megengine.data.dataset``): the abstract ``Dataset`` / ``StreamDataset``,
``ArrayDataset``, ``ConcatDataset`` and the vision datasets that read local files."""
from .meta_dataset import ArrayDataset, ConcatDataset, Dataset, StreamDataset
from .vision import (CIFAR10, CIFAR100, COCO, MNIST, Cityscapes, ImageFolder, ImageNet, Objects365,
                     PascalVOC, VisionDataset)

__all__ = ["Dataset", "StreamDataset", "ArrayDataset", "ConcatDataset", "VisionDataset", "MNIST",
           "CIFAR10", "CIFAR100", "ImageFolder", "ImageNet", "PascalVOC", "COCO", "Objects365",
           "Cityscapes"]
