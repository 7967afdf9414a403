"""Flattening nested Python containers into leaves and a hashable structure (``TreeDef``)."""
import collections

__all__ = ["TreeDef", "LeafDef", "tree_flatten", "tree_unflatten", "register_supported_type"]

SUPPORTED_TYPE = {}


def register_supported_type(type, flatten=None, unflatten=None):
    """Teach the flattener a container ``type``: ``flatten(obj) -> (children, aux)`` and
    ``unflatten(children, aux) -> obj``."""
    SUPPORTED_TYPE[type] = (flatten, unflatten)


register_supported_type(list, lambda x: (list(x), None), lambda c, a: list(c))
register_supported_type(tuple, lambda x: (list(x), None), lambda c, a: tuple(c))
register_supported_type(dict, lambda x: (list(x.values()), tuple(x.keys())),
                        lambda c, a: dict(zip(a, c)))
register_supported_type(collections.OrderedDict, lambda x: (list(x.values()), tuple(x.keys())),
                        lambda c, a: collections.OrderedDict(zip(a, c)))
register_supported_type(slice, lambda x: ([x.start, x.stop, x.step], None),
                        lambda c, a: slice(*c))


def _is_namedtuple(x):
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


class LeafDef:
    """The structure of one leaf (any object that is not a supported container)."""

    num_leaves = 1

    def __eq__(self, other):
        return isinstance(other, LeafDef)

    def __hash__(self):
        return hash(LeafDef)

    def unflatten(self, leaves):
        """The single leaf."""
        return leaves[0]

    def __repr__(self):
        return "*"


class TreeDef:
    """The structure of a container: its type, auxiliary data (dict keys) and children."""

    def __init__(self, type, aux, children):
        self.type = type
        self.aux = aux
        self.children = tuple(children)
        self.num_leaves = sum(c.num_leaves for c in self.children)

    def __eq__(self, other):
        return (isinstance(other, TreeDef) and self.type is other.type
                and self.aux == other.aux and self.children == other.children)

    def __hash__(self):
        return hash((self.type, self.aux, self.children))

    def unflatten(self, leaves):
        """Rebuild the container from ``leaves`` (a sequence of ``num_leaves`` values)."""
        out, i = [], 0
        for c in self.children:
            out.append(c.unflatten(leaves[i:i + c.num_leaves]))
            i += c.num_leaves
        if self.type == "namedtuple":
            return self.aux(*out)
        return SUPPORTED_TYPE[self.type][1](out, self.aux)

    def __repr__(self):
        name = getattr(self.type, "__name__", self.type)
        return f"{name}({', '.join(map(repr, self.children))})"


def tree_flatten(obj, is_leaf=lambda x: False):
    """``(leaves, treedef)`` of a nested structure of lists, tuples, dicts and slices."""
    if not is_leaf(obj):
        if _is_namedtuple(obj):
            leaves, defs = [], []
            for c in obj:
                lv, d = tree_flatten(c, is_leaf)
                leaves += lv
                defs.append(d)
            return leaves, TreeDef("namedtuple", type(obj), defs)
        entry = SUPPORTED_TYPE.get(type(obj))
        if entry is not None:
            children, aux = entry[0](obj)
            leaves, defs = [], []
            for c in children:
                lv, d = tree_flatten(c, is_leaf)
                leaves += lv
                defs.append(d)
            return leaves, TreeDef(type(obj), aux, defs)
    return [obj], LeafDef()


def tree_unflatten(treedef, leaves):
    """Inverse of :func:`tree_flatten`."""
    return treedef.unflatten(list(leaves))
