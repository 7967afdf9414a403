"""``HookHandler``: what ``Module.register_forward_hook`` and its pre-hook twin return
(MegEngine's ``megengine.utils.hook.HookHandler``)."""
import itertools
import weakref

__all__ = ["HookHandler"]

# One counter for every handler: ids are unique across modules, so the hooks of a module run in
# the order they were registered (their dict keeps insertion order).
_ids = itertools.count()


class HookHandler:
    """A registered hook; ``remove()`` unregisters it (a second ``remove()`` does nothing).

    The handler holds its module's hook dict weakly, so keeping a handler does not keep a deleted
    module alive.

    Example:
        >>> import mge, mge.module as M
        >>> m = M.ReLU()
        >>> h = m.register_forward_hook(lambda module, inputs, outputs: outputs * 2)
        >>> m(mge.tensor([-1.0, 3.0])).numpy()
        array([0., 6.], dtype=float32)
        >>> h.remove()
        >>> m(mge.tensor([-1.0, 3.0])).numpy()
        array([0., 3.], dtype=float32)
    """

    def __init__(self, source_dict, hook):
        if not callable(hook):
            raise TypeError(f"a hook must be callable, got {type(hook).__name__}")
        self.id = next(_ids)
        source_dict[self.id] = hook
        self.source_ref = weakref.ref(source_dict)

    def remove(self):
        """Unregister the hook."""
        source_dict = self.source_ref()
        if source_dict is not None:
            source_dict.pop(self.id, None)
