"""Constants of :mod:`mge.hub`: names, defaults and timeouts (MegEngine 1.13's ``hub/const.py``)."""

DEFAULT_BRANCH_NAME = "master"
HUBCONF = "hubconf.py"
HUBDEPENDENCY = "dependencies"
DEFAULT_GIT_HOST = "github.com"
ENV_MGE_HOME = "MGE_HOME"
ENV_XDG_CACHE_HOME = "XDG_CACHE_HOME"
DEFAULT_CACHE_DIR = "~/.cache"
DEFAULT_PROTOCOL = "HTTPS"
HTTP_READ_TIMEOUT = 120
# MegEngine's ``utils/http_download.py`` values: seconds to connect, bytes per read.
HTTP_CONNECTION_TIMEOUT = 5
CHUNK_SIZE = 1024
# mge only: the longest a ``git`` command may run, and how long ssh waits to connect.
GIT_TIMEOUT = 900
GIT_SSH_CONNECT_TIMEOUT = 10
