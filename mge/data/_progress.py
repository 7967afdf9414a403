"""tqdm progress bars when tqdm is installed (the ``mge[examples]`` extra), else no bar."""


class _NoBar:
    def __init__(self, *args, **kwargs):
        pass

    def update(self, n=1):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def bar(total=None, **kwargs):
    """A ``tqdm`` bar, or an object with the same ``update`` / ``close`` that shows nothing."""
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, **kwargs)
