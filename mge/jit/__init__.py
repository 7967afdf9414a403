"""``mge.jit``: tracing and compiled replay (MegEngine's ``megengine.jit``) -- not implemented yet.

The module exists so that code which imports it without tracing (such as the project's
``bench_mlp.py`` yardstick in eager mode) runs; using :class:`trace` raises
``NotImplementedError``.  The jit issue builds the real thing.
"""

__all__ = ["trace"]

# Marks a module whose features are still to come (the demo and its tests look for it).
_PENDING = "jit.trace (tracing, compiled replay and dump)"


class trace:
    """MegEngine's ``jit.trace(function, symbolic=False, capture_as_const=False, ...)``.

    Not implemented yet: constructing one raises ``NotImplementedError``.

    Example::

        >>> import mge
        >>> try:
        ...     mge.jit.trace(lambda x: x * 2, symbolic=True)
        ... except NotImplementedError as e:
        ...     print("not yet")
        not yet
    """

    def __init__(self, function=None, symbolic=False, capture_as_const=False, **kwargs):
        raise NotImplementedError(
            f"mge.jit.trace is not implemented yet ({_PENDING}); run the function eagerly "
            f"(called with symbolic={symbolic!r}, capture_as_const={capture_as_const!r})"
        )
