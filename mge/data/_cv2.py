"""OpenCV, imported on first use: the ``mge[data]`` extra (``opencv-python-headless``)."""

_cv2 = None


def cv2():
    """The ``cv2`` module; ImportError naming the extra when OpenCV is not installed."""
    global _cv2
    if _cv2 is None:
        try:
            import cv2 as mod
        except ImportError as e:
            raise ImportError('mge.data needs OpenCV for image transforms and for reading image '
                              'files, as MegEngine does: pip install "mge[data]" '
                              '(opencv-python-headless)') from e
        _cv2 = mod
    return _cv2


def imread(path, flags=None):
    """``cv2.imread`` that raises FileNotFoundError/ValueError instead of returning None."""
    cv = cv2()
    img = cv.imread(path, cv.IMREAD_COLOR if flags is None else flags)
    if img is None:
        import os
        if not os.path.exists(path):
            raise FileNotFoundError(f"image file {path!r} does not exist")
        raise ValueError(f"OpenCV could not decode the image file {path!r}")
    return img
