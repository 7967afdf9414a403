"""A persistent key-value cache (MegEngine 1.13's ``megengine.utils.persistent_cache``).

MegEngine keeps the results of its kernel benchmarks ("fastrun") in this cache.  mge has no
kernel selection to remember, but the cache is the same store for any code that uses it: values
are ``bytes`` kept under ``(category, key)``, in one of these places, chosen on first use:

* ``"redis"`` -- a Redis server at ``$MGE_FASTRUN_CACHE_URL`` (``redis://host:port`` or
  ``redis+socket:///path/to/socket``), through the ``redis`` package;
* ``"in-file"`` -- ``cache.bin`` in ``$MGE_FASTRUN_CACHE_DIR`` (default
  ``$MGE_HOME/persistent_cache``, ``$MGE_HOME`` defaulting to ``~/.cache/megengine``), read when
  the cache is first used and written back by ``flush()`` and when the cache object goes away,
  if anything was put;
* ``"in-memory"`` -- a dict of the cache object.

``$MGE_FASTRUN_CACHE_TYPE`` set to ``FILE`` or ``MEMORY`` skips Redis (and the file); when a
place cannot be used, a warning is logged and the next one is tried.  The file is mge's own
format (a pickled dict), not MegBrain's; ``python -m mge.utils.persistent_cache clean`` empties
the cache.
"""
import argparse
import contextlib
import functools
import getpass
import logging
import os
import pickle
import sys
import tempfile
import urllib.parse

__all__ = ["PersistentCacheOnServer"]

logger = logging.getLogger(__name__)

_FILE_MAGIC = "mge-persistent-cache-1"


def _megengine_home():
    home = os.getenv("MGE_HOME")
    if home:
        return os.path.expanduser(home)
    xdg = os.getenv("XDG_CACHE_HOME", os.path.join("~", ".cache"))
    return os.path.expanduser(os.path.join(xdg, "megengine"))


class _Config:
    """One place the cache may live: ``type``, ``args`` and the two log messages."""

    def __init__(self, type, args, on_success, on_fail):
        self.type = type
        self.args = dict(args)
        self.on_success = on_success
        self.on_fail = on_fail

    def __repr__(self):
        return f"PersistentCache.Config(type={self.type!r}, args={self.args!r})"


class _MemoryStore:
    support_dump_cache = True

    def __init__(self, args):
        self.data = {}

    def get(self, category, key):
        return self.data.get((category, key))

    def put(self, category, key, value):
        self.data[(category, key)] = value

    def clear(self):
        n = len(self.data)
        self.data.clear()
        return n

    def flush(self):
        pass


class _FileStore(_MemoryStore):
    def __init__(self, args):
        super().__init__(args)
        self.path = args["path"]
        self.lock = args.get("lock")
        self.dirty = False
        self.data = self._read()

    def _read(self):
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return {}
        if not raw:
            return {}
        try:
            magic, data = pickle.loads(raw)
        except Exception as exc:
            raise ValueError(f"{self.path} is not an mge persistent cache file ({exc})") from None
        if magic != _FILE_MAGIC or not isinstance(data, dict):
            raise ValueError(f"{self.path} is not an mge persistent cache file")
        return data

    def put(self, category, key, value):
        super().put(category, key, value)
        self.dirty = True

    def clear(self):
        n = super().clear()
        self.dirty = True
        self.flush()
        return n

    def flush(self):
        if not self.dirty:
            return
        with self.lock() if self.lock is not None else contextlib.nullcontext():
            directory = os.path.dirname(os.path.abspath(self.path))
            fd, tmp = tempfile.mkstemp(prefix=".cache.", dir=directory)
            try:
                with os.fdopen(fd, "wb") as f:
                    pickle.dump((_FILE_MAGIC, self.data), f)
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        self.dirty = False


class _RedisStore:
    support_dump_cache = False

    def __init__(self, args):
        try:
            import redis
        except ImportError:
            raise RuntimeError("the redis cache needs the `redis` package") from None
        kw = {"password": args.get("password")}
        if "unixsocket" in args:
            kw["unix_socket_path"] = args["unixsocket"]
        else:
            kw["host"], kw["port"] = args["hostname"], int(args["port"])
        self.prefix = args.get("prefix", "")
        self.conn = redis.Redis(**kw)
        if not self.conn.exists("mgb-cache-flag"):
            raise RuntimeError("the server has no `mgb-cache-flag` key (not a cache server)")

    def _key(self, category, key):
        return f"{self.prefix}{category}@{key}"

    def get(self, category, key):
        return self.conn.get(self._key(category, key))

    def put(self, category, key, value):
        self.conn.set(self._key(category, key), value)

    def clear(self):
        keys = list(self.conn.scan_iter(match=self.prefix + "*"))
        if keys:
            self.conn.delete(*keys)
        return len(keys)

    def flush(self):
        pass


_STORES = {"in-memory": _MemoryStore, "in-file": _FileStore, "redis": _RedisStore}


def _as_bytes(v):
    if isinstance(v, bytes):
        return v
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode()
    raise TypeError(f"PersistentCache: keys and values are str or bytes, got {type(v).__name__}")


class _PersistentCache:
    """The configurable cache (MegEngine's ``core._imperative_rt.PersistentCache``): places are
    added with :meth:`add_config` and the first that works is used from the first ``get`` or
    ``put`` on (``config`` is ``None`` until then)."""

    Config = _Config

    def __init__(self):
        self._configs = []
        self._impl = None
        self.config = None

    def add_config(self, type, args, on_success, on_fail):
        if type not in _STORES:
            raise ValueError(f"PersistentCache: unknown cache type {type!r}; expected one of "
                             f"{sorted(_STORES)}")
        self._configs.append(_Config(type, args, on_success, on_fail))

    def _get_impl(self):
        if self._impl is None:
            failed = False
            for config in self._configs:
                if failed:
                    logger.warning("try fallback to %s cache", config.type)
                try:
                    impl = _STORES[config.type](self._store_args(config))
                except Exception as exc:
                    logger.warning("%s %s", config.on_fail, exc)
                    failed = True
                    continue
                logger.debug("%s", config.on_success)
                self._impl, self.config = impl, config
                break
            if self._impl is None:
                raise RuntimeError("PersistentCache: no valid config (add_config was not called, "
                                   "or every cache place failed)")
        return self._impl

    def _store_args(self, config):
        return config.args

    def get(self, category, key):
        """The ``bytes`` under ``(category, key)``, or ``None``."""
        return self._get_impl().get(str(category), _as_bytes(key))

    def put(self, category, key, value):
        """Keep ``value`` (str or bytes) under ``(category, key)``."""
        self._get_impl().put(str(category), _as_bytes(key), _as_bytes(value))

    def clean(self):
        """Delete every entry; returns how many there were."""
        return self._get_impl().clear()

    def flush(self):
        """Write what was put to the file (in-file caches; nothing for the others)."""
        if self._impl is not None:
            self._impl.flush()

    def reg(self):
        """Make this the process's cache (MegEngine's kernel selection reads it; mge has none,
        so this only keeps the object alive until exit)."""
        global _registered
        _registered = self

    def __del__(self):
        try:
            self.flush()
        except Exception as exc:  # never raise from a finaliser
            logger.warning("PersistentCache: could not write the cache back: %s", exc)


_registered = None


@contextlib.contextmanager
def _lock_cache_file(cache_dir):
    lock_file = os.path.join(cache_dir, "cache.lock")
    with open(lock_file, "a") as f:
        try:
            import fcntl
        except ImportError:  # not POSIX: no inter-process lock
            yield
            return
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


class PersistentCacheOnServer(_PersistentCache):
    """The cache with MegEngine's places: Redis at ``$MGE_FASTRUN_CACHE_URL`` (unless
    ``$MGE_FASTRUN_CACHE_TYPE`` is ``FILE`` or ``MEMORY``), the file (unless it is ``MEMORY``),
    memory."""

    def __init__(self):
        super().__init__()
        cache_type = os.getenv("MGE_FASTRUN_CACHE_TYPE")
        if cache_type not in ("FILE", "MEMORY"):
            try:
                redis_config = self.get_redis_config()
            except Exception as exc:
                logger.error("failed to connect to cache server %r; try fallback to in-file "
                             "cache", exc)
            else:
                if redis_config is not None:
                    self.add_config("redis", redis_config, "fastrun use redis cache",
                                    "failed to connect to cache server")
        if cache_type != "MEMORY":
            path = self.get_cache_file(self.get_cache_dir())
            self.add_config("in-file", {"path": path}, f"fastrun use in-file cache in {path}",
                            f"failed to create cache file in {path}")
        self.add_config("in-memory", {}, "fastrun use in-memory cache",
                        "failed to create in-memory cache")

    def _store_args(self, config):
        if config.type == "in-file":
            # Not a bound method: the store must not keep this object alive (a cycle would put
            # off the write-back of ``__del__`` until the garbage collector runs).
            directory = os.path.dirname(config.args["path"])
            return dict(config.args, lock=functools.partial(_lock_cache_file, directory))
        return config.args

    def get_cache_dir(self):
        cache_dir = os.getenv("MGE_FASTRUN_CACHE_DIR")
        if not cache_dir:
            cache_dir = os.path.join(_megengine_home(), "persistent_cache")
        cache_dir = os.path.expanduser(str(cache_dir))
        os.makedirs(cache_dir, exist_ok=True)
        return cache_dir

    def get_cache_file(self, cache_dir):
        cache_file = os.path.join(cache_dir, "cache.bin")
        with open(cache_file, "a"):
            pass
        return cache_file

    @contextlib.contextmanager
    def lock_cache_file(self, cache_dir):
        """An exclusive lock on ``cache.lock`` in ``cache_dir`` (other processes wait)."""
        with _lock_cache_file(cache_dir):
            yield

    def get_redis_config(self):
        """The Redis connection of ``$MGE_FASTRUN_CACHE_URL`` (``None`` when it is not set)."""
        url = os.getenv("MGE_FASTRUN_CACHE_URL")
        if url is None:
            return None
        from ..version import __version__
        prefix = f"mgbcache:{getpass.getuser()}:MGB{__version__}:GIT:mge::"
        parsed = urllib.parse.urlparse(url)
        if parsed.username:
            raise ValueError("redis conn with username unsupported")
        if parsed.scheme == "redis":
            if not (parsed.hostname and parsed.port) or parsed.path:
                raise ValueError(f"invalid redis url {url!r}: expected redis://host:port")
            config = {"hostname": parsed.hostname, "port": str(parsed.port)}
        elif parsed.scheme == "redis+socket":
            if parsed.hostname or parsed.port or not parsed.path:
                raise ValueError(f"invalid redis url {url!r}: expected redis+socket:///path")
            config = {"unixsocket": parsed.path}
        else:
            raise ValueError(f"unsupported cache url scheme {parsed.scheme!r} in {url!r}")
        if parsed.password is not None:
            config["password"] = parsed.password
        config["prefix"] = prefix
        return config


def _clean():
    n = PersistentCacheOnServer().clean()
    if n is not None:
        print(f"{n} cache entries deleted")


def main(argv=None):
    parser = argparse.ArgumentParser(description="manage persistent cache")
    sub = parser.add_subparsers(description="action to be performed", dest="cmd")
    sub.required = True
    sub.add_parser("clean", help="clean all the cache of current user").set_defaults(
        action=_clean)
    args = parser.parse_args(argv)
    args.action()


if __name__ == "__main__":
    main()
