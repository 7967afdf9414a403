"""ImageNet (ILSVRC2012) from its image folders, or from the raw tar files, extracted once."""
import logging
import os
import shutil

from ..._dist import is_distributed
from ..._progress import bar
from .folder import ImageFolder
from .utils import _default_dataset_root, calculate_md5, untar, untargz

__all__ = ["ImageNet"]

logger = logging.getLogger(__name__)


class ImageNet(ImageFolder):
    r"""ImageNet (ILSVRC2012) as an :class:`ImageFolder` of ``root/train`` or ``root/val``.

    Expected layout (the image folders are made from the tar files when missing)::

        root/ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar, ILSVRC2012_devkit_t12.tar.gz
        root/train/<wnid>/*.JPEG, root/val/<wnid>/*.JPEG
        root/ILSVRC2012_devkit_t12/data/meta.mat, .../ILSVRC2012_validation_ground_truth.txt

    Args:
        root: the ImageNet directory; ``None`` means ``~/.cache/megengine/ImageNet``.
        train: the training split if ``True``, else the validation split.
        kwargs: passed to :class:`ImageFolder` (``check_valid_func``, ``class_name``).
    """

    raw_file_meta = {
        "train": ("ILSVRC2012_img_train.tar", "1d675b47d978889d74fa0da5fadfb00e"),
        "val": ("ILSVRC2012_img_val.tar", "29b22e2961454d5413ddabcf34fc5622"),
        "devkit": ("ILSVRC2012_devkit_t12.tar.gz", "fa75699e90414af021442c21a62c3abf"),
    }
    default_train_dir = "train"
    default_val_dir = "val"
    default_devkit_dir = "ILSVRC2012_devkit_t12"

    def __init__(self, root: str = None, train: bool = True, **kwargs):
        self.root = self._default_root if root is None else os.path.expanduser(root)
        if not os.path.exists(self.root):
            raise FileNotFoundError("dir %s does not exist" % self.root)
        self.devkit_dir = os.path.join(self.root, self.default_devkit_dir)
        self.train = train
        self.target_folder = os.path.join(
            self.root, self.default_train_dir if train else self.default_val_dir)
        if not os.path.exists(self.target_folder):
            logger.warning("expected image folder %s does not exist, try to load from raw file",
                           self.target_folder)
            if not self.check_raw_file():
                raise FileNotFoundError(
                    "expected image folder %s does not exist, and raw files do not exist in %s"
                    % (self.target_folder, self.root))
            if is_distributed():
                raise RuntimeError("extracting raw file shouldn't be done in distributed mode, "
                                   "use single process instead")
            if not os.path.exists(self.devkit_dir):
                self._prepare_devkit()
            if train:
                self._prepare_train()
            else:
                self._prepare_val()
        super().__init__(self.target_folder, **kwargs)

    @property
    def _default_root(self):
        return os.path.join(_default_dataset_root(), self.__class__.__name__)

    @property
    def valid_ground_truth(self):
        """The validation labels (1-based ILSVRC ids) from the devkit."""
        path = os.path.join(self.devkit_dir, "data", "ILSVRC2012_validation_ground_truth.txt")
        if not os.path.exists(path):
            raise FileNotFoundError("valid ground truth file %s does not exist" % path)
        with open(path) as f:
            return [int(line) for line in f if line.strip()]

    @property
    def meta(self):
        """``(idx_to_wnid, wnid_to_classes)`` from the devkit's ``meta.mat`` (needs scipy), cached
        in ``meta.pkl``."""
        import pickle
        cache = os.path.join(self.devkit_dir, "meta.pkl")
        if os.path.exists(cache):
            with open(cache, "rb") as f:
                return pickle.load(f)
        meta_path = os.path.join(self.devkit_dir, "data", "meta.mat")
        if not os.path.exists(meta_path):
            raise FileNotFoundError("meta file %s does not exist" % meta_path)
        try:
            import scipy.io
        except ImportError as e:
            raise ImportError("ImageNet.meta reads the devkit's meta.mat with scipy: "
                              "pip install scipy") from e
        synsets = scipy.io.loadmat(meta_path, squeeze_me=True)["synsets"]
        leaves = [s for s in synsets if s[4] == 0]  # num_children == 0
        idcs, wnids, classes = list(zip(*leaves))[:3]
        idx_to_wnid = dict(zip(idcs, wnids))
        wnid_to_classes = {w: tuple(c.split(", ")) for w, c in zip(wnids, classes)}
        with open(cache, "wb") as f:
            pickle.dump((idx_to_wnid, wnid_to_classes), f)
        return idx_to_wnid, wnid_to_classes

    def check_raw_file(self) -> bool:
        """Whether the three raw archives are in ``root``."""
        return all(os.path.exists(os.path.join(self.root, name))
                   for name, _ in self.raw_file_meta.values())

    def _check(self, key):
        name, checksum = self.raw_file_meta[key]
        raw_file = os.path.join(self.root, name)
        logger.info("checksum %s ...", raw_file)
        if calculate_md5(raw_file) != checksum:
            raise RuntimeError("checksum mismatch, {} may be damaged".format(raw_file))
        return raw_file

    def _organize_val_data(self):
        id2wnid = self.meta[0]
        val_wnids = [id2wnid[idx] for idx in self.valid_ground_truth]
        val_images = sorted(os.path.join(self.target_folder, image)
                            for image in os.listdir(self.target_folder))
        for wnid in set(val_wnids):
            os.makedirs(os.path.join(self.target_folder, wnid), exist_ok=True)
        progress = bar(total=len(val_images))
        for wnid, img_file in zip(val_wnids, val_images):
            shutil.move(img_file, os.path.join(self.target_folder, wnid, os.path.basename(img_file)))
            progress.update()
        progress.close()

    def _prepare_val(self):
        raw_file = self._check("val")
        logger.info("extract valid tar file... this may take 10-20 minutes")
        untar(raw_file, self.target_folder)
        self._organize_val_data()

    def _prepare_train(self):
        raw_file = self._check("train")
        logger.info("extract train tar file.. this may take several hours")
        untar(raw_file, self.target_folder)
        paths = [os.path.join(self.target_folder, d) for d in os.listdir(self.target_folder)]
        progress = bar(total=len(paths))
        for path in paths:
            untar(path, os.path.splitext(path)[0], remove=True)
            progress.update()
        progress.close()

    def _prepare_devkit(self):
        raw_file = self._check("devkit")
        logger.info("extract devkit file..")
        untargz(raw_file)
