"""Block factories over special methods and memoised helpers (red team round 2, test_redteam2.py): a
user class whose dunders f reaches through the protocol (len, [], in, iter, truth, ==, `in` over a list
of its instances, hashing into a dict) while the class's dunders are replaced, added or deleted between
calls, and instance attributes named like dunders are set (CPython ignores those for the protocol);
an `functools.lru_cache` helper reading a global that changes, with the cache cleared between calls.

Same contract as `blocks_python.py`.
"""
from __future__ import annotations

from .program import Block, Mutation

M = Mutation

_BOX = """
    class Box$:
        def __init__(self, items):
            self.items = list(items)
        def __len__(self):
            return len(self.items)
        def __getitem__(self, i):
            return self.items[i]
        def __contains__(self, v):
            return v in self.items
        def __iter__(self):
            return iter(self.items)
    box$ = Box$([1.0, 2.0])
    """

_BOX_READS = {
    "len": "out = out * len(box$)\naux.append(len(box$))",
    "getitem": "out = out + box$[0]\naux.append(box$[-1])",
    "contains": "if 2.0 in box$:\n    out = out - 1\naux.append(2.0 in box$)",
    "iter": "for v in box$:\n    out = out + v\naux.append(list(box$))",
    "truth": "if box$:\n    out = out * 2\naux.append(bool(box$))",
    "sum": "out = out + sum(box$)",
}

_BOX_MUTATIONS = (
    M("Box$.__len__ = lambda self: 3"), M("Box$.__getitem__ = lambda self, i: 7.0"),
    M("Box$.__contains__ = lambda self, v: False"), M("Box$.__iter__ = lambda self: iter([4.0])"),
    M("Box$.__bool__ = lambda self: False"), M("del Box$.__len__"),
    M("box$.__len__ = lambda: 99\nbox$.__iter__ = lambda: iter([99.0])"),   # ignored by the protocol
    M("box$.__getitem__ = lambda i: 99.0\nbox$.__contains__ = lambda v: True"),
    M("box$.items.append(2.5)"), M("box$.items = []"),
)


def class_dunders(rng):
    """A container-like user class read through len/[]/in/iter/truth; its dunders change on the class,
    instance attributes named like dunders appear (ignored), its items change."""
    read = rng.choice(sorted(_BOX_READS))
    return Block("class_dunders", setup=_BOX, body=_BOX_READS[read] if read != "truth" or rng.random() < 0.5
                 else _BOX_READS["len"] + "\n" + _BOX_READS["truth"],
                 mutations=_BOX_MUTATIONS, state=("list(box$.items)", "sorted(vars(box$))"))


def class_equality(rng):
    """`==`, `!=` and `in` over user objects whose class gains, changes or loses __eq__/__ne__."""
    read = rng.choice(["if Key$() in KEYS$:\n    out = out + 1", "if key$ in KEYS$:\n    out = out * 3",
                       "if Key$() == key$:\n    out = out - 2", "if key$ != Key$():\n    out = out + 0.5",
                       "aux.append(KEYS$.count(Key$()))", "aux.append(None in KEYS$)",
                       "if other$ in KEYS$:\n    out = out * 2"])
    return Block("class_equality", setup="""
        class Key$:
            pass
        class Other$:
            def __eq__(self, o):
                return False
            __hash__ = object.__hash__
        key$, other$ = Key$(), Other$()
        KEYS$ = [Key$(), Other$()]
        """, body=read + "\naux.append(len(KEYS$))",
        mutations=(M("Key$.__eq__ = lambda self, o: True"), M("Other$.__eq__ = lambda self, o: True"),
                   M("Key$.__ne__ = lambda self, o: False"), M("Key$.__eq__ = lambda self, o: NotImplemented"),
                   M("del Other$.__eq__"), M("KEYS$.append(key$)"), M("KEYS$.clear()")),
        state=("len(KEYS$)",))


def cached_helper(rng):
    """An lru_cache helper reading a global: the cache keeps answering after the global changes, until
    it is cleared."""
    call = rng.choice(["scale$(3)", "scale$(k=2)", "scale$(1) + scale$(2)"])
    return Block("cached_helper", setup="""
        import functools
        G$ = 2.0
        @functools.lru_cache(maxsize=None)
        def scale$(k):
            return G$ * k
        """, body=f"out = out * ({call})\naux.append({call})",
        mutations=(M("G$ = 5.0"), M("scale$.cache_clear()"), M("G$ = -0.0\nscale$.cache_clear()"),
                   M("G$ = float('nan')"), M("G$ = 3")),
        state=("scale$.cache_info().currsize",))


FACTORIES = [class_dunders, class_equality, cached_helper]
