# Making and filling instances of a Python class from compiled code, for the replay's per-op path
# (mge_plugins.trace_match makes one Tensor per op it answers).  Declarations and inline C only:
# cimporting this file imports no module.
#
# ``new_instance(cls)`` is ``cls.__new__(cls)`` for a class whose ``__new__`` is object's, without
# the call through the type (argument tuple, ``tp_new_wrapper``: as much as the rest of a replayed
# op).  On CPython 3.11 it is the type's ``tp_alloc`` alone: object.__new__ adds an array for the
# instance dict's values, which 3.11 also handles being absent (the dict is then made when first
# used; ``tests/test_trace_placeholders.py`` checks attributes, ``__dict__`` and weak references
# on such instances), and freeing that array is a third of a placeholder's deallocation.  Other
# versions call object's ``tp_new`` directly.
#
# ``slot_offset(descriptor)`` is the offset of a ``__slots__`` member (``Tensor._info``);
# ``get_slot``/``set_slot`` read and write it without the attribute machinery.  Callers check the
# instance's type first: only a class whose layout they know.
cdef extern from *:
    """
    #include <structmember.h>
    static PyObject *mge_new_instance(PyObject *cls) {
        PyTypeObject *tp = (PyTypeObject *)cls;
    #if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && !defined(Py_DEBUG)
        if (tp->tp_new == PyBaseObject_Type.tp_new && tp->tp_alloc != NULL)
            return tp->tp_alloc(tp, 0);
    #endif
        PyObject *args = PyTuple_New(0);
        if (args == NULL)
            return NULL;
        PyObject *obj = PyBaseObject_Type.tp_new(tp, args, NULL);
        Py_DECREF(args);
        return obj;
    }
    static Py_ssize_t mge_slot_offset(PyObject *descr) {
        if (Py_TYPE(descr) != &PyMemberDescr_Type) {
            PyErr_SetString(PyExc_TypeError, "slot_offset: not a __slots__ member");
            return -1;
        }
        PyMemberDef *m = ((PyMemberDescrObject *)descr)->d_member;
        if (m->type != T_OBJECT_EX) {
            PyErr_SetString(PyExc_TypeError, "slot_offset: not an object slot");
            return -1;
        }
        return m->offset;
    }
    static PyObject *mge_get_slot(PyObject *obj, Py_ssize_t offset) {
        /* borrowed; NULL when unset (no exception set) */
        return *(PyObject **)((char *)obj + offset);
    }
    static void mge_set_slot(PyObject *obj, Py_ssize_t offset, PyObject *value) {
        PyObject **slot = (PyObject **)((char *)obj + offset);
        PyObject *old = *slot;
        Py_INCREF(value);
        *slot = value;
        Py_XDECREF(old);
    }
    """
    object new_instance "mge_new_instance" (object cls)
    Py_ssize_t slot_offset "mge_slot_offset" (object descr) except -1
    void *get_slot "mge_get_slot" (object obj, Py_ssize_t offset)
    void set_slot "mge_set_slot" (object obj, Py_ssize_t offset, object value)
