"""Downloading one file through urllib, with a progress bar (MegEngine 1.13's
``utils/http_download.py``, which uses megfile and requests; mge needs neither)."""
import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from urllib.parse import urlparse

from ..logger import get_logger
from .const import CHUNK_SIZE, HTTP_CONNECTION_TIMEOUT, HTTP_READ_TIMEOUT
from .exceptions import HTTPDownloadError

logger = get_logger(__name__)

try:
    from tqdm import tqdm as _tqdm
except ImportError:  # the bar is optional
    _tqdm = None


class Bar:
    r"""A progress bar of ``total`` bytes: tqdm's when tqdm is installed, else none.

    Args:
        total: the expected size in bytes (0 when unknown).
    """

    def __init__(self, total=100):
        self._bar = None
        if _tqdm is not None:
            self._bar = _tqdm(total=total or None, unit="iB", unit_scale=True, ncols=80)

    def __call__(self, bytes_num):
        """Advance the bar by ``bytes_num`` bytes."""
        if self._bar is not None:
            self._bar.update(bytes_num)

    def close(self):
        """Close the bar."""
        if self._bar is not None:
            self._bar.close()


def _set_read_timeout(resp, seconds):
    # urllib has one timeout for connecting and reading: connect with the short one, then read
    # with the long one (MegEngine gives requests the pair (5, 120)).
    try:
        resp.fp.raw._sock.settimeout(seconds)
    except AttributeError:  # not a socket (file://, ftp://)
        pass


def open_url(url: str, timeout: float = HTTP_CONNECTION_TIMEOUT):
    r"""Opens ``url`` for reading (``http(s)://``, ``ftp://``, ``file://`` or a local path).

    Returns ``(stream, size)``; size is 0 when the server does not say.  Every failure, the
    machine being offline included, raises :class:`HTTPDownloadError` naming the URL and the
    reason, within about ``timeout`` seconds of silence.
    """
    scheme = urlparse(url).scheme
    if scheme == "" or (len(scheme) == 1 and os.name == "nt"):  # a path, C:\... included
        path = os.path.expanduser(url)
        try:
            return open(path, "rb"), os.path.getsize(path)
        except OSError as exc:
            raise HTTPDownloadError(
                "An error occured when downloading from {}: {}".format(url, exc)
            ) from exc
    if scheme not in ("http", "https", "ftp", "file"):
        raise HTTPDownloadError(
            "An error occured when downloading from {}: unsupported URL scheme '{}' "
            "(mge downloads http, https, ftp and file URLs)".format(url, scheme)
        )
    request = urllib.request.Request(url, headers={"User-Agent": "mge-hub"})
    try:
        resp = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        raise HTTPDownloadError(
            "An error occured when downloading from {}: HTTP {} {}".format(url, exc.code, exc.reason)
        ) from exc
    except urllib.error.URLError as exc:
        raise HTTPDownloadError(
            "An error occured when downloading from {}: {}".format(url, exc.reason)
        ) from exc
    except (OSError, ValueError) as exc:  # timeouts, resets, malformed URLs
        raise HTTPDownloadError(
            "An error occured when downloading from {}: {}".format(url, exc)
        ) from exc
    _set_read_timeout(resp, HTTP_READ_TIMEOUT)
    status = getattr(resp, "status", None)
    if status is not None and scheme in ("http", "https") and status != 200:
        resp.close()
        raise HTTPDownloadError(
            "An error occured when downloading from {}: HTTP {}".format(url, status)
        )
    try:
        size = int(resp.headers.get("Content-Length", 0) or 0)
    except (AttributeError, ValueError):
        size = 0
    return resp, size


def download_from_url(url: str, dst: str) -> str:
    r"""Downloads file from given url to ``dst``.

    The bytes go to a temporary file beside ``dst`` that is renamed to ``dst`` once complete,
    so an interrupted download never leaves a truncated file where a cache would find it.

    Args:
        url: source URL.
        dst: saving path.

    Returns:
        the md5 hex digest of the file, as MegEngine's.
    """
    dst = os.path.expanduser(dst)
    folder = os.path.dirname(os.path.abspath(dst))
    os.makedirs(folder, exist_ok=True)
    stream, size = open_url(url)
    md5 = hashlib.md5()
    bar = Bar(total=size)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".download_", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out, stream:
            while True:
                try:
                    chunk = stream.read(CHUNK_SIZE * 64)
                except OSError as exc:
                    raise HTTPDownloadError(
                        "An error occured when downloading from {}: {}".format(url, exc)
                    ) from exc
                if not chunk:
                    break
                md5.update(chunk)
                out.write(chunk)
                bar(len(chunk))
        if size and os.path.getsize(tmp) != size:
            raise HTTPDownloadError(
                "An error occured when downloading from {}: got {} of {} bytes".format(
                    url, os.path.getsize(tmp), size
                )
            )
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    finally:
        bar.close()
    logger.debug("downloaded %s to %s", url, dst)
    return md5.hexdigest()

