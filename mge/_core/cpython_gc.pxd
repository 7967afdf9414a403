# CPython's cyclic-GC calls, for compiled modules that keep short-lived objects of their own out of
# the collector (mge_plugins.trace_match: a replay's placeholders).  Declarations only: cimporting
# this file imports no module.
cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object)
    void PyObject_GC_Track(object)
    bint PyObject_GC_IsTracked(object)
