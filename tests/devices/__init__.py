"""Devices used by the tests only (``opaque.py``: buffers that are not numpy arrays)."""
