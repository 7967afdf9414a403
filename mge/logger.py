"""``mge.logger``: MegEngine's logging helpers -- loggers with MegEngine's format and levels.

``get_logger(name)`` returns a :mod:`logging` logger that prints ``date message`` (colored by
level) and, after ``set_log_file(f)``, also writes every record to ``f``.  ``set_log_level`` sets
the level of every such logger (default: ``$MEGENGINE_LOGGING_LEVEL`` or ``INFO``).
``set_mgb_log_level`` sets the level of the runtime's logger (``megbrain``), which mge's runtime
(Python) logs through.
"""
import contextlib
import logging
import os
from collections import Counter
from functools import wraps

__all__ = ["get_logger", "set_log_level", "set_log_file", "set_mgb_log_level",
           "replace_mgb_log_level", "enable_debug_log", "call_countlog_func",
           "MegEngineLogFormatter", "MegBrainLogFormatter"]

_all_loggers = []
_all_log_counter = Counter()
_default_level_name = os.getenv("MEGENGINE_LOGGING_LEVEL", "INFO")
_default_level = logging.getLevelName(_default_level_name.upper())
if not isinstance(_default_level, int):
    _default_level = logging.INFO


def set_log_file(fout, mode="a"):
    """Also write every log record to ``fout`` (a file object, or a file name opened with
    ``mode``)."""
    if isinstance(fout, str):
        fout = open(fout, mode)
    MegEngineLogFormatter.log_fout = fout


class MegEngineLogFormatter(logging.Formatter):
    """MegEngine's log format: a colored date, a level tag (DBG/WRN/ERR) and the message; long
    records are shortened on the terminal (``max_lines``) and written whole to the log file."""

    log_fout = None
    date_full = "[%(asctime)s %(lineno)d@%(filename)s:%(name)s] "
    date = "%(asctime)s "
    msg = "%(message)s"
    max_lines = 256

    def _color_exc(self, msg):
        return "\x1b[34m{}\x1b[0m".format(msg)

    def _color_dbg(self, msg):
        return "\x1b[36m{}\x1b[0m".format(msg)

    def _color_warn(self, msg):
        return "\x1b[1;31m{}\x1b[0m".format(msg)

    def _color_err(self, msg):
        return "\x1b[1;4;31m{}\x1b[0m".format(msg)

    def _color_omitted(self, msg):
        return "\x1b[35m{}\x1b[0m".format(msg)

    def _color_normal(self, msg):
        return msg

    def _color_date(self, msg):
        return "\x1b[32m{}\x1b[0m".format(msg)

    def _set_fmt(self, fmt):
        self._style._fmt = fmt

    def format(self, record):
        """Format ``record`` (and write it to the log file, if one is set)."""
        tags = {logging.DEBUG: (self._color_dbg, "DBG"), logging.WARNING: (self._color_warn, "WRN"),
                logging.ERROR: (self._color_err, "ERR")}
        color, tag = tags.get(record.levelno, (self._color_normal, ""))
        if tag:
            tag += " "
        if self.log_fout:
            self._set_fmt(self.date_full + tag + self.msg)
            text = super().format(record)
            n = text.count("\n") + 1
            if n >= self.max_lines:
                head, body = text.split("\n", 1)
                text = "\n".join([head, f"BEGIN_LONG_LOG_{n - 1}_LINES{{", body,
                                  f"}}END_LONG_LOG_{n - 1}_LINES"])
            self.log_fout.write(text + "\n")
            self.log_fout.flush()
        self._set_fmt(self._color_date(self.date) + color(tag + self.msg))
        text = super().format(record)
        if record.exc_text or record.exc_info:
            b = text.find("Traceback ")
            if b != -1:
                text = text[:b] + self._color_exc("  " + text[b:].replace("\n", "\n  "))
        lines = text.split("\n")
        if len(lines) >= self.max_lines:
            keep = self.max_lines // 2
            removed = len(lines) - keep * 2
            if removed > 0:
                note = self._color_omitted(
                    f"[{removed} log lines omitted (would be written to output file if "
                    "set_log_file() has been called;\n the threshold can be set at "
                    "MegEngineLogFormatter.max_lines)]")
                text = "\n".join(lines[:keep] + [note] + lines[-keep:])
        return text


def get_logger(name=None, formatter=MegEngineLogFormatter):
    """The logger ``name`` with MegEngine's format and the default level (set up once)."""
    logger = logging.getLogger(name)
    if getattr(logger, "_init_done__", None):
        return logger
    logger._init_done__ = True
    logger.propagate = False
    logger.setLevel(_default_level)
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(datefmt="%d %H:%M:%S"))
    handler.setLevel(0)
    del logger.handlers[:]
    logger.addHandler(handler)
    _all_loggers.append(logger)
    return logger


def set_log_level(level, update_existing=True):
    """Set the default level (a :mod:`logging` level) and, with ``update_existing``, the level
    of every logger made by :func:`get_logger`; returns the previous default."""
    global _default_level
    old = _default_level
    _default_level = level
    if update_existing:
        for lg in _all_loggers:
            lg.setLevel(level)
    return old


_logger = get_logger(__name__)
_call_count_logger = get_logger("call count")


class MegBrainLogFormatter(MegEngineLogFormatter):
    """The format of the runtime's (``megbrain``) logger: MegEngine's, dated ``[mgb]``."""

    date = "%(asctime)s[mgb] "

    def _color_date(self, msg):
        return "\x1b[33m{}\x1b[0m".format(msg)


_MegBrainLogFormatter = MegBrainLogFormatter
_megbrain_logger = get_logger("megbrain", MegBrainLogFormatter)

from .core._imperative_rt.utils import Logger as _RuntimeLogger  # noqa: E402

#: the runtime's logger (MegEngine's ``_imperative_rt.utils.Logger``), sending to ``megbrain``
_imperative_rt_logger = _RuntimeLogger()
_imperative_rt_logger.set_log_handler(_megbrain_logger)


def set_mgb_log_level(level):
    """Set the runtime logger's level (a :mod:`logging` level); returns the previous runtime
    level (a ``Logger.LogLevel``)."""
    _megbrain_logger.setLevel(level)
    levels = _RuntimeLogger.LogLevel
    if level == logging.ERROR:
        new = levels.Error
    elif level == logging.INFO:
        new = levels.Info
    else:
        new = levels.Debug
    old = _imperative_rt_logger.set_log_level(new)
    _megbrain_logger.setLevel(level)
    return old


set_mgb_log_level(_default_level)


@contextlib.contextmanager
def replace_mgb_log_level(level):
    """Within the block, the runtime logger has ``level``; restored after."""
    old = set_mgb_log_level(level)
    try:
        yield
    finally:
        set_mgb_log_level(old)


def enable_debug_log():
    """Log at DEBUG level everywhere."""
    set_log_level(logging.DEBUG)
    set_mgb_log_level(logging.DEBUG)


def call_countlog_func(func, count=1, msg=None):
    """Wrap ``func`` so its first ``count`` calls log the warning ``msg``."""
    if msg is None:
        raise ValueError("Please confirm the msg to be logged!")
    key = func.__qualname__
    _all_log_counter[key] += 1

    @wraps(func)
    def wrapper(*args, **kwargs):
        if _all_log_counter[key] <= count:
            _call_count_logger.warning(msg)
            _all_log_counter[key] += 1
        return func(*args, **kwargs)
    return wrapper
