"""MegBrain's computing-graph API (``Graph``, ``VarNode``, ``apply_normal_varnode``, ...).

It drives MegEngine's C++ graph runtime (MegBrain), which mge does not have: mge runs ops eagerly
and compiles ``mge.jit.trace`` programs itself.  Importing this module raises ``ImportError``
(see ``docs/differences.rst``)."""
raise ImportError(
    "mge.core.tensor.megbrain_graph is MegBrain's C++ computing-graph API, which mge does not "
    "have; run ops eagerly, or use mge.jit.trace (and trace.dump) for compiled programs "
    "(see docs/differences.rst)")
