"""The CPU kernels, one file per op family; importing this package fills ``cpu/table.py``.

Every module of this package is imported (in name order): a new family's kernels go in a new file
here and need no other registration.
"""
import importlib
import pkgutil

for _m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_m}")
