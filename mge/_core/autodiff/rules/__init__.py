"""The backward rules, one file per op family; importing this package fills ``registry.py``.

Every module of this package is imported (in name order): a new family's rules go in a new file
here and need no other registration.  A rule is a few lines in a table where that reads well, as
in HIPS autograd's ``defvjp``; it computes with the helpers of ``gradutil.py``.
"""
import importlib
import pkgutil

for _m in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_m}")
