"""The errors :mod:`mge.hub` raises (MegEngine 1.13's ``hub/exceptions.py``)."""


class FetcherError(Exception):
    r"""Base class for fetch related error."""


class InvalidRepo(FetcherError):
    r"""The repo provided was somehow invalid."""


class InvalidGitHost(FetcherError):
    r"""The git host provided was somehow invalid."""


class GitPullError(FetcherError):
    r"""A git pull error occurred."""


class GitCheckoutError(FetcherError):
    r"""A git checkout error occurred."""


class InvalidProtocol(FetcherError):
    r"""The protocol provided was somehow invalid."""


class HTTPDownloadError(Exception):
    r"""The class that represents http request error.

    MegEngine's ``megengine.utils.http_download.HTTPDownloadError`` derives from
    ``BaseException``, so ``except Exception`` misses it; mge's derives from ``Exception``.
    """
