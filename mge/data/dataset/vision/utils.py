"""Helpers of the vision datasets: the default root, downloads with md5 checks, archives."""
import hashlib
import logging
import os
import shutil
import tarfile

from ..._dist import is_distributed
from ..._progress import bar

IMG_EXT = (".jpg", ".png", ".jpeg", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
HTTP_TIMEOUT = 30  # seconds without an answer before a download gives up

logger = logging.getLogger(__name__)


def _default_dataset_root():
    """``$XDG_CACHE_HOME/megengine`` (``~/.cache/megengine``), MegEngine's dataset cache."""
    return os.path.expanduser(os.path.join(os.getenv("XDG_CACHE_HOME", "~/.cache"), "megengine"))


def download_from_url(url: str, dst: str, timeout: float = HTTP_TIMEOUT):
    """Download ``url`` to ``dst`` (through ``dst + ".part"``); returns the file's md5.

    Raises RuntimeError naming the URL and the cause when the network fails.
    """
    import urllib.error
    import urllib.request

    dst = os.path.expanduser(dst)
    part = dst + ".part"
    md5 = hashlib.md5()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            total = resp.headers.get("Content-Length")
            progress = bar(total=int(total) if total else None, unit="iB", unit_scale=True, ncols=80,
                           desc=os.path.basename(dst))
            try:
                with open(part, "wb") as f:
                    while True:
                        chunk = resp.read(1 << 16)
                        if not chunk:
                            break
                        f.write(chunk)
                        md5.update(chunk)
                        progress.update(len(chunk))
            finally:
                progress.close()
    except (urllib.error.URLError, OSError, ValueError) as e:
        if os.path.exists(part):
            os.remove(part)
        reason = getattr(e, "reason", e)
        raise RuntimeError(
            f"could not download {url} to {dst}: {reason}. Without network access, copy the "
            f"file there by hand (or construct the dataset with download=False)") from e
    shutil.move(part, dst)
    return md5.hexdigest()


def load_raw_data_from_url(url: str, filename: str, target_md5: str, raw_data_dir: str,
                           timeout: float = HTTP_TIMEOUT):
    """Make sure ``raw_data_dir/filename`` exists with md5 ``target_md5``, downloading it from
    ``url`` when missing; RuntimeError (and the file removed) on an md5 mismatch."""
    cached_file = os.path.join(raw_data_dir, filename)
    logger.debug("load_raw_data_from_url: downloading to or using cached %s ...", cached_file)
    if not os.path.exists(cached_file):
        if is_distributed():
            logger.warning("Downloading raw data in DISTRIBUTED mode: the file may be downloaded "
                           "several times; download it in a single process first.")
        md5 = download_from_url(url, cached_file, timeout)
    else:
        md5 = calculate_md5(cached_file)
    if target_md5 == md5:
        logger.debug("%s exists with correct md5: %s", filename, target_md5)
    else:
        os.remove(cached_file)
        raise RuntimeError(f"{filename} exists but fails to match md5 {target_md5} (got {md5}); "
                           "the file was removed")


def calculate_md5(filename):
    """The md5 hex digest of a file."""
    m = hashlib.md5()
    with open(filename, "rb") as f:
        for data in iter(lambda: f.read(1 << 20), b""):
            m.update(data)
    return m.hexdigest()


def is_img(filename):
    """Whether ``filename`` has an image extension (``IMG_EXT``, case-insensitive)."""
    return filename.lower().endswith(IMG_EXT)


def _extract(tar, to):
    try:
        tar.extractall(path=to, filter="data")
    except TypeError:  # Python without extraction filters
        tar.extractall(path=to)


def untar(path, to=None, remove=False):
    """Extract a tar archive into ``to`` (default: its directory); ``remove`` deletes it after."""
    if to is None:
        to = os.path.dirname(path)
    with tarfile.open(path, "r") as tar:
        _extract(tar, to)
    if remove:
        os.remove(path)


def untargz(path, to=None, remove=False):
    """Extract a ``.tar.gz`` archive; ValueError for another extension."""
    if not path.endswith(".tar.gz"):
        raise ValueError("path %s does not end with .tar.gz" % path)
    if to is None:
        to = os.path.dirname(path)
    with tarfile.open(path, "r:gz") as tar:
        _extract(tar, to)
    if remove:
        os.remove(path)
