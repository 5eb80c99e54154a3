"""Sets made in the frame, rebuilt after the graph with the very hash table the program left.

NOTE [Set tables rebuilt exactly]: CPython iterates a set in the order of its hash table, and what a caller does
with a returned set later (`s.update(...)`, `s.add(...)`, `s | t`) lays out by that table's size, its dummies
(slots of discarded elements, counted in `fill`) and its `finger` (where `pop` starts), not only by the order of its
elements: `s = set(range(100, 120))` shrunk to `{100}` keeps a 128-slot table, so eager iterates the caller's adds
7..18 before 100, where a fresh `{100}` puts 100 first (revBF PRE-1). A set the trace made by the program's own
operations (`exact`, NOTE [Set order]) is a real set laid out as the program's; it is rebuilt by the first of
these whose table (size, fill, used, finger and the hash of every slot, read with ctypes) equals the trace's:
- `cls(template)`: the elements in order, or a table copy, or (up to 7 elements) another insertion order;
- for a mutable set, `set_from_ops(cls, ops)`: a synthesized history of adds and discards over int fillers
  (hash(k) == k) that grows a table to the real size, occupies every non-empty slot of the real table, replaces
  the fillers of the element slots one by one by their elements and discards the rest, leaving dummies where the
  real table has them. Each step's slot is decided, so the result is checked, never assumed.
CPython does the same operations on elements of the same hashes at run time, so the table is the same; a
string's hash follows the process's seed (NOTE [Hash-seeded facts]: the caller guards it). None of them: the
rebuild is refused (a graph break), for every class (set, frozenset and plain subclasses: NOTE [Plain set
subclasses]). The templates are lists: the code constructor walks tuple and frozenset constants and rebuilds a
frozenset element holding strings in another table (revBK HIGH-2), a list it leaves alone.
"""
from __future__ import annotations

import ctypes
import itertools
import sysconfig
from typing import Any

_DUMMY = -1


class _Entry(ctypes.Structure):
    _fields_ = [("key", ctypes.c_void_p), ("hash", ctypes.c_ssize_t)]


class _SetHead(ctypes.Structure):  # PySetObject of the default (GIL) build, 3.11 to 3.13
    _fields_ = [("refcnt", ctypes.c_ssize_t), ("type", ctypes.c_void_p), ("fill", ctypes.c_ssize_t),
                ("used", ctypes.c_ssize_t), ("mask", ctypes.c_ssize_t), ("table", ctypes.c_void_p),
                ("hash", ctypes.c_ssize_t), ("finger", ctypes.c_ssize_t)]


_READABLE = not sysconfig.get_config_var("Py_GIL_DISABLED")


def table(s: Any) -> tuple | None:
    """(mask, fill, used, finger, slots) of the real set `s`, each slot None (empty), _DUMMY or (hash, key id);
    None where it cannot be read."""
    if not _READABLE or not isinstance(s, (set, frozenset)):
        return None
    head = _SetHead.from_address(id(s))
    if head.used != len(s) or head.mask < 7 or head.mask & (head.mask + 1):
        return None  # not the layout above
    entries = (_Entry * (head.mask + 1)).from_address(head.table)
    slots = tuple(None if e.key is None else _DUMMY if e.hash == -1 else (e.hash, e.key) for e in entries)
    return head.mask, head.fill, head.used, head.finger, slots


def set_from_ops(cls: type, ops: list) -> Any:
    """The set `cls()` after `ops`, (True, key) adding, (False, key) discarding and (None, key) popping (the pop
    takes `key`: NOTE [Set finger replayed]) (NOTE above)."""
    s = cls()
    for adding, key in ops:
        _apply(s, adding, key)
    return s


def rebuild(real: set | frozenset, cls: type) -> tuple[Any, list]:
    """(function, arguments) that make a new `cls` whose table is `real`'s (NOTE above), or None."""
    goal = table(real)
    if goal is None:
        return None
    base = frozenset if issubclass(cls, frozenset) else set
    order = list(real)
    for template in _templates(real, order):
        if table(base(template)) == goal:
            return cls, [template]
    if base is set:
        ops = _synthesized(real, goal)
        if ops is not None:
            return set_from_ops, [cls, ops]
    return None


def _templates(real, order: list):
    yield order
    yield set(real)  # a table copy (set_merge), a plain set: the code constructor leaves it alone
    if len(order) <= 7:  # at most 5040 tries, a few ms at trace time
        for candidate in itertools.permutations(order):
            if list(set(candidate)) == order:
                yield list(candidate)


def _synthesized(real: set, goal: tuple) -> list | None:
    mask, fill, used, finger, slots = goal
    if mask > (1 << 16) or finger > mask + 1 or (finger and slots[finger - 1] is None):
        return None
    occupied = [j for j, slot in enumerate(slots) if slot is not None]
    elements = {id(key): key for key in real}
    if sorted(elements) != sorted(slot[1] for slot in slots if slot is not None and slot is not _DUMMY):
        return None
    fillers = _Fillers(real, mask)
    ops = _grow(mask, occupied, fillers)
    if ops is None:
        return None
    for j in occupied:  # every non-empty slot of the real table holds a filler (no dummy yet: each lands first)
        if j not in fillers.at:
            ops.append((True, fillers.take(j)))
    at_finger = fillers.at.get(finger - 1) if finger else None
    for j, slot in enumerate(slots):  # each element replaces its slot's filler: the only dummy on its path
        if slot is not None and slot is not _DUMMY:
            ops += [(False, fillers.at.pop(j)), (True, elements[slot[1]])]
    ops += [(False, fillers.at.pop(j)) for j in sorted(fillers.at)]
    if finger:
        return _with_finger(ops, goal, at_finger) if at_finger is not None else None
    return ops if table(set_from_ops(set, ops)) == goal else None


# NOTE [Set finger replayed]: set.pop() takes the first live slot from `finger` (wrapping), leaves a dummy there as
# a discard does, and sets `finger` to that slot + 1 (add and discard leave it). A table the program pop()ed
# (the worklist `while todo: todo.pop()`, even left empty) is rebuilt by the synthesized history above with the
# discard of the filler at slot `finger - 1` made a pop, alone or with earlier discards made pops where each pop
# takes the very key the discard removed (read from the table being replayed); the result is checked like every
# other rebuild, never assumed (revBO MED-1: such sets refused, the frame ran as Python).
def _with_finger(ops: list, goal: tuple, key: int) -> list | None:
    last = max((i for i, (adding, k) in enumerate(ops) if adding is False and k == key), default=None)
    if last is None:
        return None
    single = ops[:last] + [(None, key)] + ops[last + 1:]
    if table(set_from_ops(set, single)) == goal:
        return single
    if goal[0] > (1 << 8):  # each step below reads the whole table
        return None
    s, chain = set(), []
    for i, (adding, k) in enumerate(ops):
        if adding is False and i <= last and _pop_takes(s, k):
            adding = None
        chain.append((adding, k))
        _apply(s, adding, k)
    return chain if table(set_from_ops(set, chain)) == goal else None


def _apply(s: set, adding, key) -> None:
    if adding is None:
        set.pop(s)
    else:
        (set.add if adding else set.discard)(s, key)


def _pop_takes(s: set, key) -> bool:
    """Whether s.pop() takes `key` now (the first live slot from the finger, wrapping)."""
    now = table(s)
    if now is None or not now[2]:
        return False
    mask, slots = now[0], now[4]
    for step in range(mask + 1):
        slot = slots[(now[3] + step) & mask]
        if isinstance(slot, tuple):
            return slot[1] == id(key)
    return False


class _Fillers:
    """Int fillers not equal to any element, each landing first at its slot of the final table."""

    def __init__(self, real, mask: int) -> None:
        self.real, self.size, self.at, self.rounds = real, mask + 1, {}, itertools.count(1)

    def peek(self, slot: int) -> int:
        while True:
            key = slot + self.size * next(self.rounds)
            if key not in self.real:
                self.rounds = itertools.chain([(key - slot) // self.size], self.rounds)
                return key

    def take(self, slot: int) -> int:
        self.at[slot] = key = self.peek(slot)
        next(self.rounds)
        return key


def _grow(mask: int, occupied: list, fillers: _Fillers) -> list | None:
    """Adds and discards fillers until the table has `mask + 1` slots, holding only target fillers, each at its
    slot (one of `occupied`). A resize reinserts the live keys and drops dummies, so scratch fillers build up
    `fill` and are discarded before the resize to that size, which the last target filler triggers."""
    size = mask + 1
    if size == 8:
        return []
    for live in (u for u in range(1, len(occupied) + 1) if _size_after(u) == size):
        for last in occupied[-16:]:  # the target filler that triggers the resize: one whose probe finds no dummy
            ops = _grow_with(size, live, [j for j in occupied if j != last] + [last], fillers)
            if ops is not None:
                return ops
            fillers.at.clear()
    return None


def _size_after(used: int) -> int:
    """The table size set_table_resize picks for an insertion leaving `used` keys (set_add_entry's `used * 4`)."""
    newsize = 8
    while newsize <= (used * 2 if used > 50000 else used * 4):
        newsize <<= 1
    return newsize


def _threshold(size: int) -> int:
    """The fill at which an insertion into an empty slot resizes a table of `size` slots."""
    return next(f for f in itertools.count(1) if f * 5 >= (size - 1) * 3)


def _grow_with(size: int, live: int, occupied: list, fillers: _Fillers) -> list | None:
    ops: list = []
    scratch: list = []
    while True:
        now = table(set_from_ops(set, ops))
        cur = now[0] + 1
        if live <= _threshold(cur):
            break
        bigger = [w for w in range(1, _threshold(cur) + 1) if cur < _size_after(w) < size]
        if not bigger:
            return None
        w = max(bigger, key=_size_after)  # scratch only: its keys are discarded later
        if not _fill_to(ops, scratch, _threshold(cur) - 1, fillers, cur):
            return None
        while len(scratch) > w - 1:
            ops.append((False, scratch.pop()))
        if not _scratch(ops, scratch, fillers, expect=_size_after(w)):
            return None
    ops += [(False, key) for key in scratch]
    scratch.clear()
    for j in occupied[:live - 1]:
        ops.append((True, fillers.take(j)))
    cur = table(set_from_ops(set, ops))[0] + 1
    last = {j & (cur - 1) for j in occupied[live - 1:]}  # where the last target's probe starts: no dummy there
    if cur >= size or not _fill_to(ops, scratch, _threshold(cur) - 1, fillers, cur, last):
        return None
    ops += [(False, key) for key in scratch]
    for j in occupied[live - 1:]:
        key = fillers.peek(j)
        after = table(set_from_ops(set, ops + [(True, key)]))
        if after[0] + 1 == size and after[1] == after[2] == live:
            ops.append((True, fillers.take(j)))
            placed = all(isinstance(after[4][t], tuple) and after[4][t][0] == k for t, k in fillers.at.items())
            return ops if placed else None
    return None


def _fill_to(ops: list, scratch: list, fill: int, fillers: _Fillers, size: int, avoid: frozenset = frozenset()) -> bool:
    """Scratch fillers, each into an empty slot (not in `avoid` where another is free), until the table's fill is
    `fill` (no resize)."""
    while True:
        now = table(set_from_ops(set, ops))
        if now[0] + 1 != size or now[1] > fill:
            return False
        if now[1] == fill:
            return True
        if not _scratch(ops, scratch, fillers, expect=size, avoid=avoid):
            return False


def _scratch(ops: list, scratch: list, fillers: _Fillers, expect: int, avoid=frozenset()) -> bool:
    """One scratch filler that lands in an empty slot, the table then of `expect` slots."""
    now = table(set_from_ops(set, ops))
    empty = [j for j, entry in enumerate(now[4]) if entry is None]
    for slot in [j for j in empty if j not in avoid] + [j for j in empty if j in avoid]:
        key = slot + (now[0] + 1) * ((1 << 30) + len(ops))
        if key in fillers.real:
            continue
        after = table(set_from_ops(set, ops + [(True, key)]))
        if after[0] + 1 == expect and (after[1] == now[1] + 1 or expect != now[0] + 1):
            ops.append((True, key))
            scratch.append(key)
            return True
    return False


def set_rebuild(value, output=None) -> tuple[Any, list]:
    """(function, arguments) rebuilding the set value `value` made in the frame with its table (NOTE above), or
    (None, [frozenset]) for a frozenset the code constructor keeps as a constant; a graph break where neither.
    The result is kept on the value for its table; `output` (when known) gets the hash-seed guard the table
    follows."""
    now = table(value.frozen if value.frozen is not None else value.items)
    cached = getattr(value, "rebuild_recipe", None)  # (the table it was made for, the recipe)
    recipe = cached[1] if cached is not None and cached[0] == now else None
    if recipe is None:
        recipe = _recipe(value)
        value.rebuild_recipe = (now, recipe)
    if output is not None:
        from .hash_order import note_order
        note_order(output, value.frozen if value.frozen is not None else value.items)
    return recipe


def _recipe(value) -> tuple[Any, list]:
    from . import const_keys
    from .breaks import BreakKind, Unsupported
    real = value.frozen if value.frozen is not None else value.items
    found = rebuild(real, value.cls) if value.frozen is not None or value.exact else None
    if found is not None:
        return found
    if value.frozen is not None and value.cls is frozenset and const_keys.strings_interned(value.frozen):
        return None, [value.frozen]
    raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{value.describe()} made in the frame outlives it, and no "
                                                   "rebuild reproduces its hash table (NOTE [Set tables rebuilt exactly])")


def fresh_small(value) -> bool:
    """A set of tensors or objects hashed by address (NOTE [Sets of tensors]) of at most one element is rebuilt
    as a fresh one only where the program never removed from it and its table is the fresh 8-slot one: a set
    that held more, or lost elements, keeps a table of another size or with dummies laid out by addresses
    (revBF PRE-1), which no rebuild from its elements reproduces."""
    now = table(value.items)
    return not getattr(value, "deleted", False) and now is not None and now[0] == 7 and now[1] == now[2] and not now[3]


def check_set_rebuilds(values: list, output) -> None:
    """Decides, before the graph is compiled, that every set made in the frame among `values` (and inside them)
    can be rebuilt (NOTE above), so that one that cannot breaks before the backend spends its compile (revBF LOW-2)."""
    from .codegen import _children
    from .values import SetValue
    seen: set = set()
    todo = list(values)
    while todo:
        value = todo.pop()
        if id(value) in seen or getattr(value, "source", None) is not None:
            continue  # a value from outside is reloaded, not rebuilt (and its contents are read lazily)
        seen.add(id(value))
        if isinstance(value, SetValue) and value.source is None:
            if value.frozen is None and not value.is_constant():
                from .identity_keys import identity_set_elements
                identity_set_elements(value)  # NOTE [Sets of tensors]
            else:
                set_rebuild(value, output)
        todo += _children(value)


# NOTE [Set results of unknown layout]: `a & b`, `a - b`, `a.union(b)` ... where an operand's layout is unknown (a
# set of tensors, parameters or objects made in the frame, hashed by address: NOTE [Sets of tensors]) hold the
# right elements (membership and equality do not follow the layout; which of two equal elements is kept
# follows the operands' sizes only), not a known order: the result is a set of unknown layout, so that
# len(), `in`, ==, bool() and set predicates stay in the trace (`len(decay & no_decay)` of nanoGPT's
# configure_optimizers, `len(set(ps) - set(qs))`: revBF MED-1, the frame ran as Python), while iterating,
# popping or rebuilding it is a break (set_items, _recipe, fresh_small through `deleted`).
def unknown_layout(result: set | frozenset):
    from .values import SetValue
    value = SetValue(set(result), cls=type(result), exact=False)
    value.deleted = True  # a difference may be a copy of the larger set with dummies: never rebuilt fresh
    return value
