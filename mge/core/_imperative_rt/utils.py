"""``_imperative_rt.utils``: MegEngine's runtime ``Logger``.

MegEngine's C++ runtime logs through its own logger, whose level ``Logger().set_log_level``
sets; mge's runtime is Python and logs through :mod:`logging`, so the level maps to the logger
``"megbrain"`` (:func:`mge.logger.set_mgb_log_level`)."""
import enum
import logging

__all__ = ["Logger"]


class _LogLevel(enum.IntEnum):
    Debug = 0
    Info = 1
    Warn = 2
    Error = 3
    No = 4


_TO_LOGGING = {_LogLevel.Debug: logging.DEBUG, _LogLevel.Info: logging.INFO,
               _LogLevel.Warn: logging.WARNING, _LogLevel.Error: logging.ERROR,
               _LogLevel.No: logging.CRITICAL + 10}


class Logger:
    """MegEngine's runtime logger: ``Logger().set_log_level(Logger.LogLevel.X)`` returns the
    previous level; ``set_log_handler(logger)`` sends the runtime's messages to a Python logger."""

    LogLevel = _LogLevel
    _level = _LogLevel.Info
    _handler = None

    def set_log_level(self, level):
        """Set the runtime's log level; returns the previous one."""
        level = _LogLevel(level)
        old = Logger._level
        Logger._level = level
        target = Logger._handler or logging.getLogger("megbrain")
        target.setLevel(_TO_LOGGING[level])
        return old

    def set_log_handler(self, logger):
        """Send the runtime's messages to the Python logger ``logger``."""
        Logger._handler = logger

    @staticmethod
    def log(level, message):
        """Log ``message`` at ``level`` (a ``LogLevel``) through the handler."""
        level = _LogLevel(level)
        if level >= Logger._level:
            (Logger._handler or logging.getLogger("megbrain")).log(_TO_LOGGING[level], message)
