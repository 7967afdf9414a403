"""Vision datasets that read local files in their published formats."""
from .cifar import CIFAR10, CIFAR100
from .cityscapes import Cityscapes
from .coco import COCO
from .folder import ImageFolder
from .imagenet import ImageNet
from .meta_vision import VisionDataset
from .mnist import MNIST
from .objects365 import Objects365
from .voc import PascalVOC

__all__ = ["VisionDataset", "MNIST", "CIFAR10", "CIFAR100", "ImageFolder", "ImageNet", "PascalVOC",
           "COCO", "Objects365", "Cityscapes"]
