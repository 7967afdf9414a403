"""``hub.load`` and friends: entry points of a repo's ``hubconf.py`` (MegEngine 1.13's ``hub/hub.py``).

A repo is ``"owner/repo[:branch]"`` on ``git_host``, fetched into ``$MGE_HOME/hub`` (by default
``$XDG_CACHE_HOME/megengine/hub``, i.e. ``~/.cache/megengine/hub``) by the fetcher of ``protocol``;
or (mge only) a local directory holding a ``hubconf.py``.
"""
import functools
import hashlib
import os
import re
import sys
import types
from typing import Any, List
from urllib.parse import urlparse

from ..distributed import is_distributed
from ..logger import get_logger
from ..serialization import load as _mge_load_serialized
from .const import (
    DEFAULT_CACHE_DIR,
    DEFAULT_GIT_HOST,
    DEFAULT_PROTOCOL,
    ENV_MGE_HOME,
    ENV_XDG_CACHE_HOME,
    HUBCONF,
    HUBDEPENDENCY,
)
from .download import download_from_url
from .exceptions import InvalidProtocol, InvalidRepo
from .fetcher import GitHTTPSFetcher, GitSSHFetcher
from .tools import check_module_exists, load_module

logger = get_logger(__name__)


PROTOCOLS = {
    "HTTPS": GitHTTPSFetcher,
    "SSH": GitSSHFetcher,
}

_OWNER_REPO = re.compile(r"^[^/:\s]+/[^/:\s]+(:[^:\s]+)?$")


def _get_megengine_home() -> str:
    r"""MGE_HOME setting complies with the XDG Base Directory Specification"""
    return os.path.expanduser(
        os.getenv(
            ENV_MGE_HOME,
            os.path.join(os.getenv(ENV_XDG_CACHE_HOME, DEFAULT_CACHE_DIR), "megengine"),
        )
    )


def _local_repo_dir(repo_info):
    r"""The absolute directory ``repo_info`` names when it is a local path, else None.

    A path: an ``os.PathLike``; a string starting with ``/``, ``./``, ``../`` or ``~`` (or ``.``,
    ``..``); or an existing directory that is not of the form ``owner/repo[:branch]`` (write
    ``./owner/repo`` for a local folder of that form).
    """
    if isinstance(repo_info, os.PathLike):
        path = os.fspath(repo_info)
    elif isinstance(repo_info, str):
        path = repo_info
        looks_local = (
            path in (".", "..")
            or path.startswith(("./", "../", "~", ".\\", "..\\"))
            or os.path.isabs(path)
        )
        if not looks_local and not (os.path.isdir(path) and not _OWNER_REPO.match(path)):
            return None
    else:
        return None
    full = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(full):
        raise InvalidRepo(
            "repo_info: '{}' is invalid: no such local directory '{}'.".format(repo_info, full)
        )
    return full


def _get_repo(
    git_host: str,
    repo_info: str,
    use_cache: bool = False,
    commit: str = None,
    protocol: str = DEFAULT_PROTOCOL,
) -> str:
    r"""The absolute directory holding the code of ``repo_info``, fetched when needed."""
    if protocol not in PROTOCOLS:
        raise InvalidProtocol(
            "Invalid protocol, the value should be one of {}.".format(", ".join(PROTOCOLS.keys()))
        )
    local = _local_repo_dir(repo_info)
    if local is not None:
        return local
    cache_dir = os.path.expanduser(os.path.join(_get_megengine_home(), "hub"))
    os.makedirs(cache_dir, exist_ok=True)
    fetcher = PROTOCOLS[protocol]
    return fetcher.fetch(git_host, repo_info, use_cache, commit, cache_dir=cache_dir)


def _check_dependencies(module: types.ModuleType) -> None:
    if not hasattr(module, HUBDEPENDENCY):
        return
    dependencies = getattr(module, HUBDEPENDENCY)
    if not dependencies:
        return
    missing_deps = [m for m in dependencies if not check_module_exists(m)]
    if len(missing_deps):
        raise RuntimeError("Missing dependencies: {}".format(", ".join(missing_deps)))


def _init_hub(
    repo_info: str,
    git_host: str,
    use_cache: bool = True,
    commit: str = None,
    protocol: str = DEFAULT_PROTOCOL,
):
    r"""Imports hubmodule like python import.

    Args:
        repo_info: a string with format ``"repo_owner/repo_name[:tag_name/:branch_name]"`` with an optional
            tag/branch. The default branch is ``master`` if not specified. Eg: ``"brain_sdk/MegBrain[:hub]"``.
            mge also takes a local directory holding a ``hubconf.py`` (a path starting with ``/``,
            ``./``, ``../`` or ``~``, or an ``os.PathLike``); ``git_host``, ``use_cache`` and
            ``commit`` do not apply to it.
        git_host: host address of git repo. Eg: github.com
        use_cache: whether to use locally cached code or completely re-fetch.
        commit: commit id on github or gitlab.
        protocol: which protocol to use to get the repo, and HTTPS protocol only supports public repo on github.
            The value should be one of HTTPS, SSH.

    Returns:
        a python module.
    """
    absolute_repo_dir = _get_repo(
        git_host, repo_info, use_cache=use_cache, commit=commit, protocol=protocol
    )
    sys.path.insert(0, absolute_repo_dir)
    try:
        hubmodule = load_module(HUBCONF, os.path.join(absolute_repo_dir, HUBCONF))
    finally:
        try:
            sys.path.remove(absolute_repo_dir)
        except ValueError:  # the hubconf removed it itself
            pass
    return hubmodule


@functools.wraps(_init_hub)
def import_module(*args, **kwargs):
    return _init_hub(*args, **kwargs)


def _entry(hubmodule, entry):
    if not hasattr(hubmodule, entry) or not callable(getattr(hubmodule, entry)):
        raise RuntimeError("Cannot find callable {} in hubconf.py".format(entry))
    return getattr(hubmodule, entry)


def list(
    repo_info: str,
    git_host: str = DEFAULT_GIT_HOST,
    use_cache: bool = True,
    commit: str = None,
    protocol: str = DEFAULT_PROTOCOL,
) -> List[str]:
    r"""Lists all entrypoints available in repo hubconf.

    Args:
        repo_info: a string with format ``"repo_owner/repo_name[:tag_name/:branch_name]"`` with an optional
            tag/branch. The default branch is ``master`` if not specified. Eg: ``"brain_sdk/MegBrain[:hub]"``.
            mge also takes a local directory holding a ``hubconf.py``.
        git_host: host address of git repo. Eg: github.com
        use_cache: whether to use locally cached code or completely re-fetch.
        commit: commit id on github or gitlab.
        protocol: which protocol to use to get the repo, and HTTPS protocol only supports public repo on github.
            The value should be one of HTTPS, SSH.

    Returns:
        all entrypoint names of the model.
    """
    hubmodule = _init_hub(repo_info, git_host, use_cache, commit, protocol)
    return [
        _ for _ in dir(hubmodule) if not _.startswith("__") and callable(getattr(hubmodule, _))
    ]


def load(
    repo_info: str,
    entry: str,
    *args,
    git_host: str = DEFAULT_GIT_HOST,
    use_cache: bool = True,
    commit: str = None,
    protocol: str = DEFAULT_PROTOCOL,
    **kwargs
) -> Any:
    r"""Loads model from github or gitlab repo, with pretrained weights.

    Args:
        repo_info: a string with format ``"repo_owner/repo_name[:tag_name/:branch_name]"`` with an optional
            tag/branch. The default branch is ``master`` if not specified. Eg: ``"brain_sdk/MegBrain[:hub]"``.
            mge also takes a local directory holding a ``hubconf.py``.
        entry: an entrypoint defined in hubconf.
        git_host: host address of git repo. Eg: github.com
        use_cache: whether to use locally cached code or completely re-fetch.
        commit: commit id on github or gitlab.
        protocol: which protocol to use to get the repo, and HTTPS protocol only supports public repo on github.
            The value should be one of HTTPS, SSH.

    The other positional and keyword arguments go to the entrypoint (``pretrained=True`` to an
    entrypoint decorated with :class:`pretrained`).

    Returns:
        a single model with corresponding pretrained weights.
    """
    hubmodule = _init_hub(repo_info, git_host, use_cache, commit, protocol)
    func = _entry(hubmodule, entry)
    _check_dependencies(hubmodule)
    return func(*args, **kwargs)


def help(
    repo_info: str,
    entry: str,
    git_host: str = DEFAULT_GIT_HOST,
    use_cache: bool = True,
    commit: str = None,
    protocol: str = DEFAULT_PROTOCOL,
) -> str:
    r"""This function returns docstring of entrypoint ``entry`` by following steps:

    1. Pull the repo code specified by git and repo_info.
    2. Load the entry defined in repo's hubconf.py
    3. Return docstring of function entry.

    Args:
        repo_info: a string with format ``"repo_owner/repo_name[:tag_name/:branch_name]"`` with an optional
            tag/branch. The default branch is ``master`` if not specified. Eg: ``"brain_sdk/MegBrain[:hub]"``.
            mge also takes a local directory holding a ``hubconf.py``.
        entry: an entrypoint defined in hubconf.py
        git_host: host address of git repo. Eg: github.com
        use_cache: whether to use locally cached code or completely re-fetch.
        commit: commit id on github or gitlab.
        protocol: which protocol to use to get the repo, and HTTPS protocol only supports public repo on github.
            The value should be one of HTTPS, SSH.

    Returns:
        docstring of entrypoint ``entry``.
    """
    hubmodule = _init_hub(repo_info, git_host, use_cache, commit, protocol)
    return _entry(hubmodule, entry).__doc__


def load_serialized_obj_from_url(url: str, model_dir=None) -> Any:
    """Loads MegEngine serialized object from the given URL.

    If the object is already present in ``model_dir``, it's deserialized and
    returned. If no ``model_dir`` is specified, it will be ``MGE_HOME/serialized``.

    The cached file is named ``<6 hex digits>_<the URL's file name>``, the digits the start of
    the sha256 of the URL, so that files of the same name from different URLs do not collide.
    ``url`` may be ``http(s)://``, ``ftp://``, ``file://`` or a local path; it is downloaded
    through urllib with a tqdm progress bar when tqdm is installed.  A failed download raises
    ``HTTPDownloadError`` naming the URL and the reason (offline included) and caches nothing.

    Args:
        url: url to serialized object.
        model_dir: dir to cache target serialized file.

    Returns:
        loaded object.
    """
    if model_dir is None:
        model_dir = os.path.join(_get_megengine_home(), "serialized")
    model_dir = os.path.expanduser(model_dir)
    os.makedirs(model_dir, exist_ok=True)

    filename = os.path.basename(urlparse(url).path)
    digest = hashlib.sha256(url.encode()).hexdigest()[:6]
    filename = digest + "_" + filename

    cached_file = os.path.join(model_dir, filename)
    logger.info("load_serialized_obj_from_url: download to or using cached %s", cached_file)
    if not os.path.exists(cached_file):
        if is_distributed():
            logger.warning(
                "Downloading serialized object in DISTRIBUTED mode\n"
                "    File may be downloaded multiple times. We recommend\n"
                "    users to download in single process first."
            )
        download_from_url(url, cached_file)
    return _mge_load_serialized(cached_file)


class pretrained:
    r"""Decorator which helps to download pretrained weights from the given url. Including fs, s3, http(s).

    For example, we can decorate a resnet18 function as follows

    .. code-block::

        @hub.pretrained("https://url/to/pretrained_resnet18.pkl")
        def resnet18(**kwargs):

    Returns:
        When decorated function is called with ``pretrained=True``, MegEngine will automatically
        download and fill the returned model with pretrained weights.

    The decorated function takes keyword arguments only (as MegEngine's).  mge downloads
    ``http(s)``, ``ftp``, ``file`` URLs and local paths, not ``s3``.
    """

    def __init__(self, url):
        self.url = url

    def __call__(self, func):
        """Wraps ``func``: the wrapper's ``pretrained=True`` loads the weights from the url."""

        @functools.wraps(func)
        def pretrained_model_func(pretrained=False, **kwargs):  # pylint: disable=redefined-outer-name
            model = func(**kwargs)
            if pretrained:
                weights = load_serialized_obj_from_url(self.url)
                model.load_state_dict(weights)
            return model

        return pretrained_model_func


__all__ = [
    "list",
    "load",
    "help",
    "load_serialized_obj_from_url",
    "pretrained",
    "import_module",
]

