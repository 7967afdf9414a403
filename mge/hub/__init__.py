"""mge.hub: MegEngine 1.13's ``megengine.hub``.

Load models from the entry points of a repo's ``hubconf.py``: a git repo ``"owner/repo[:branch]"``
(fetched into ``$MGE_HOME/hub``, by default ``~/.cache/megengine/hub``) or a local directory;
``pretrained`` decorates an entry point so that ``pretrained=True`` fills the model with weights
downloaded (and cached in ``$MGE_HOME/serialized``) by :func:`load_serialized_obj_from_url`.
See the hub guide in ``docs/guides/hub.rst``.
"""
from .exceptions import (  # noqa: F401  (also reachable as mge.hub.exceptions.X)
    FetcherError,
    GitCheckoutError,
    GitPullError,
    HTTPDownloadError,
    InvalidGitHost,
    InvalidProtocol,
    InvalidRepo,
)
from .hub import (
    help,
    import_module,
    list,
    load,
    load_serialized_obj_from_url,
    pretrained,
)

__all__ = [
    "help",
    "import_module",
    "list",
    "load",
    "load_serialized_obj_from_url",
    "pretrained",
]
