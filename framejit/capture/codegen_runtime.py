"""Run-time helpers that the generated code of compiled frames calls.

Role: `codegen.Reconstructor` and `side_effects` emit `LOAD_CONST <helper>; ...; CALL` to rebuild, at run
time, objects a trace modelled: closures and cells made in the compiled region, iterators advanced to where
the trace left them (NOTE [Live iteration], [Iterators from outside]), nn.Module walks, namedtuples and
objects made while tracing. Guards also call some of them (`iterator_index`, `iterated_list`,
`remaining_range`) through a `CallSource`. Nothing here runs at trace time, so nothing here imports the
tracer: this module must stay cheap to import for a process whose frames all come from the frame cache.
Persisted code names these functions by module and qualified name (persisted_code.py).
"""
from __future__ import annotations

import collections
import functools
import itertools
import sys
import types
from typing import Any

from .dict_objects import STORAGE as DICT_STORAGE
from .list_objects import STORAGE as LIST_STORAGE


def make_closure(code: types.CodeType, name: str, defaults: tuple, kwdefaults: dict, cells: tuple,
                 f_globals: dict | None = None) -> Any:
    """Build a function made inside a compiled region. `cells` holds, per free variable, an existing cell
    or a 1-tuple with the contents of a new one. Globals: `f_globals`, the globals of the function whose
    MAKE_FUNCTION made it (NOTE [Globals of a rebuilt closure]); None: the frame that called make_closure."""
    import sys
    closure = tuple(c if isinstance(c, types.CellType) else types.CellType(*c) for c in cells)
    if f_globals is None:
        f_globals = sys._getframe(1).f_globals
    fn = types.FunctionType(code, f_globals, name, defaults or None, closure or None)
    fn.__kwdefaults__ = kwdefaults or None
    return fn


def new_cell(*contents: Any) -> types.CellType:
    """A fresh closure cell holding `contents` (NOTE [Cells shared by rebuilt closures]); empty without it
    (NOTE [Deleting a closure variable])."""
    return types.CellType(*contents)


def delete_cell(cell: types.CellType, name: str, own: bool) -> None:
    """`del name` of a closure variable held in the real `cell` (NOTE [Deleting a closure variable]), with
    CPython's error when it is empty: UnboundLocalError for the frame's own variable, NameError for a free one."""
    try:
        cell.cell_contents  # deleting an empty cell's contents does not raise
    except ValueError:
        if own:
            raise UnboundLocalError(f"cannot access local variable '{name}' where it is not associated with a "
                                    f"value") from None
        raise NameError(f"cannot access free variable '{name}' where it is not associated with a value in "
                        f"enclosing scope") from None
    del cell.cell_contents


def set_function_attrs(fn: Any, attrs: dict) -> Any:
    """`fn` with the attributes the traced code stored on it (NOTE [Attributes of functions made while
    tracing]); `__dict__` first, so that the dict object itself is the one rebuilt."""
    if "__dict__" in attrs:
        fn.__dict__ = attrs["__dict__"]
    for name, value in attrs.items():
        if name != "__dict__":
            setattr(fn, name, value)
    return fn


def list_iterator_at(items: list, index: int) -> Any:
    """CPython's iterator over the list `items`, advanced to `index` (a for loop over a list that is live
    at a graph break: the resumed loop sees the list's later changes, NOTE [Live iteration])."""
    iterator = iter(items)
    iterator.__setstate__(index)
    return iterator


def move_list_iterator(iterator: Any, index: int, exhausted: bool) -> None:
    """Replay how far a compiled frame advanced a list iterator from outside (NOTE [Iterators from
    outside]): to `index`, or past its end (CPython's exhausted iterator, which later appends do not revive)."""
    iterator.__setstate__(sys.maxsize if exhausted else index)
    if exhausted:
        next(iterator, None)


def move_reverse_iterator(iterator: Any, index: int, exhausted: bool) -> None:
    """Replay how far a compiled frame advanced a reversed list iterator from outside (NOTE [Reversed
    iterators from outside]): to CPython's `index`, or exhausted (it then drops its list, as CPython's does)."""
    iterator.__setstate__(-1 if exhausted else index)
    if exhausted:
        next(iterator, None)


def exhausted_list_iterator() -> Any:
    """A list iterator that has stopped (it stays stopped)."""
    iterator = iter([])
    next(iterator, None)
    return iterator


def walk_at(module: Any, name: str, options: tuple, drawn: int) -> Any:
    """The generator `module.<name>(**options)` (named_children, parameters, ...) of nn.Module, drawn
    `drawn` times (NOTE [Lazy module walks] in modules.py)."""
    import torch
    walk = getattr(torch.nn.Module, name)(module, **dict(options))
    for _ in range(drawn):
        next(walk, None)
    return walk


def rows_as(kind: type, rows: tuple) -> Any:
    """A zip, enumerate, map or filter object (or an itertools chain, islice, repeat, starmap, zip_longest or
    pairwise) that yields `rows` (what a traced one had left to yield; NOTE [itertools objects of their own
    type] in itertools_support.py)."""
    if kind in ITERTOOLS_ROWS:
        return ITERTOOLS_ROWS[kind](rows)
    if kind is zip:
        return zip(*zip(*rows)) if rows else zip()
    if kind is enumerate:
        return enumerate([value for _, value in rows], rows[0][0]) if rows else enumerate(())
    return map(_same, rows) if kind is map else filter(_kept, rows)


def _same(row: Any) -> Any:
    return row


def register_tensor_hook(tensor: Any, hook: Any, offset: int) -> None:
    """`tensor.register_hook(hook)` replayed after the graph, its handle taking the id eager's call took: the
    `offset`-th id the trace handed out after the counter's value at entry (NOTE [Tensor hooks registered
    after the graph] in tensor_hooks.py; the trace's finishing calls advance the counter afterwards)."""
    from torch.utils.hooks import RemovableHandle
    saved = RemovableHandle.next_id
    RemovableHandle.next_id = saved + offset
    try:
        tensor.register_hook(hook)
    finally:
        RemovableHandle.next_id = saved


def callable_iterator_of(rows: tuple) -> Any:
    """A callable_iterator (what `iter(f, sentinel)` and `Pattern.finditer` return) that yields `rows`: its
    callable's StopIteration ends it (NOTE [Regular expressions with Python callbacks], regex_calls.py)."""
    return iter(iter(rows).__next__, _NO_ROW)


_NO_ROW = object()


ITERTOOLS_ROWS = {  # each yields exactly `rows`, and is of the type named
    itertools.chain: lambda rows: itertools.chain(rows),
    itertools.islice: lambda rows: itertools.islice(rows, None),
    itertools.repeat: lambda rows: itertools.repeat(rows[0], len(rows)) if rows else itertools.repeat(None, 0),
    itertools.starmap: lambda rows: itertools.starmap(_same, [(row,) for row in rows]),
    itertools.zip_longest: lambda rows: itertools.zip_longest(*zip(*rows)),
    itertools.pairwise: lambda rows: itertools.pairwise([rows[0][0], *(b for _, b in rows)] if rows else ()),
}


def _kept(row: Any) -> bool:
    return True


def namedtuple_of(cls: type, *items: Any) -> tuple:
    """A namedtuple (or subclass) holding `items`, as its `_make` builds it: its class's own `__new__`, which
    the traced value already went through, is not run again."""
    return tuple.__new__(cls, items)


def keys_iterator_at(container: Any, index: int, view: str | None = None, reverse: bool = False) -> Any:
    """CPython's iterator over a dict or set (or reversed() of a dict, or over a dict's `view`), advanced past
    `index` keys (NOTE [Live iteration], [Dict iterators read live])."""
    iterable = getattr(container, view)() if view else container
    iterator = reversed(iterable) if reverse else iter(iterable)
    for _ in range(index):
        next(iterator)
    return iterator


def bound_c_method(descriptor: Any, obj: Any) -> Any:
    """`obj.name` for a C method descriptor (`lock.locked`, `d.get`, `x.__add__`): CPython's bound builtin
    method, which compares and hashes by its owner and name, not a `types.MethodType` wrapping the descriptor
    (another type, equal to no attribute read of the method)."""
    return descriptor.__get__(obj, type(obj))


def range_iterator_at(start: int, stop: int, step: int, index: int) -> Any:
    """CPython's iterator over range(start, stop, step), advanced past `index` items."""
    return keys_iterator_at(range(start, stop, step), index)


def failing_iterator(message: str) -> Any:
    """An iterator whose next step raises CPython's RuntimeError `message`: its dict or set changed size
    before a graph break (NOTE [Live iteration])."""
    raise RuntimeError(message)
    yield  # a generator function


def deque_iterator_at(d: collections.deque, index: int) -> Any:
    """CPython's iterator over deque `d`, advanced `index` steps (NOTE [Deque iterators])."""
    return type(iter(d))(d, index)


def mutated_deque_iterator() -> Any:
    """CPython's deque iterator whose deque changed since it was made: every step raises RuntimeError
    (NOTE [Deque iterators])."""
    d = collections.deque([None])
    iterator = iter(d)
    d.append(None)
    return iterator


def iterated_list(iterator: Any) -> Any:
    """The list a list iterator walks (`()` once it is exhausted)."""
    return iterator.__reduce__()[1][0]


def remaining_range(iterator: Any) -> tuple:
    """(start, stop, step) of the items a range iterator has still to give (3.11 reduces it to its whole
    range and a position, 3.12 to the remaining range)."""
    state = iterator.__reduce__()
    rest = state[1][0][state[2]:] if len(state) > 2 and state[2] is not None else state[1][0]
    return rest.start, rest.stop, rest.step


def advance_iterator(iterator: Any, steps: int, exhausted: bool) -> None:
    """Replay how far a compiled frame advanced a tuple or range iterator from outside (NOTE [Iterators
    from outside]): `steps` items drawn, or all of them."""
    for _ in range(steps):
        next(iterator, None)
    if exhausted:
        for _ in iterator:
            pass


def iterator_index(iterator: Any) -> int:
    """The position of a list iterator (-1 once it is exhausted)."""
    state = iterator.__reduce__()
    return state[2] if len(state) > 2 else -1


def new_object(cls: type, attrs: dict) -> Any:
    """Rebuild an object created inside the compiled region: the instance with the attributes its
    traced `__init__` set, without running `__init__` again. A dict subclass also gets its items back
    (NOTE [Dict-subclass objects made while tracing])."""
    items = attrs.pop(DICT_STORAGE, None)
    list_items = attrs.pop(LIST_STORAGE, None)
    if list_items is not None:  # NOTE [List-subclass objects made while tracing]
        obj = list.__new__(cls)
        list.extend(obj, list_items)
    elif items is None:
        obj = object.__new__(cls)
    else:
        obj = dict.__new__(cls)
        setitem = collections.OrderedDict.__setitem__ if issubclass(cls, collections.OrderedDict) else dict.__setitem__
        for key, item in items.items():
            setitem(obj, key, item)
    instance_dict = _real_instance_dict(obj) if attrs else None
    for name, attr in attrs.items():
        slot = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
        if isinstance(slot, types.MemberDescriptorType):  # a __slots__ entry
            slot.__set__(obj, attr)
        elif instance_dict is not None:
            instance_dict[name] = attr
        else:  # NOTE [Rebuilt objects whose class overrides __dict__]
            object.__setattr__(obj, name, attr)
    return obj


# NOTE [Rebuilt objects whose class overrides __dict__]: `obj.__dict__` runs a `__dict__` property the class
# defines (`@property def __dict__(self): return {...}`), so attributes written through it went into a dict
# thrown away: an object made in the trace came back without the attributes its __init__ set (review A, F3).
# They are written into the real instance dict (`real_instance_dict`); no __setattr__ of the class runs
# (eager's __init__ already ran it). If none can be read, object.__setattr__ stores them.
def _real_instance_dict(obj: Any) -> dict | None:
    try:
        return real_instance_dict(obj)
    except Exception:  # noqa: BLE001 - no dict to read: object.__setattr__ decides
        return None


# NOTE [Instance dicts read without user code]: the object's own instance dict, read as CPython's `__dict__`
# getset does, running no code of the class (NOTE [Guards run no user code] in guards/codegen.py). For most
# classes that getset is what `object.__getattribute__(obj, "__dict__")` finds. A class (or a base) that
# defines `__dict__` itself (a property) shadows it: reading `__dict__` then ran the user's property while
# tracing and in every guard line that checks the instance dict (review A, F2: 12 property calls for eager's 3,
# wrong values). Then the dict is read by the C function behind the getset, PyObject_GenericGetDict.
# None for an object without an instance dict (or whose `__dict__` is not a plain dict, e.g. a class's).
def real_instance_dict(obj: Any) -> dict | None:
    if issubclass(type(obj), functools.partial) and partial_dict_absent(obj):
        return None  # not made: NOTE [Partials of partials] in partials.py
    try:
        if not dict_overridden(type(obj)):  # the getset (a module's member), or no __dict__ at all
            d = object.__getattribute__(obj, "__dict__")
        elif issubclass(type(obj), type):  # a class whose metaclass overrides __dict__: its real one is no dict
            return None
        else:
            d = _generic_get_dict()(obj, None)
    except (AttributeError, TypeError):
        return None
    return d if type(d) is dict else None


def partial_dict_absent(p: functools.partial) -> bool:
    """The partial's instance dict slot is empty, read without making the dict (`p.__dict__` would make it, for
    good, and CPython's partial_new then no longer flattens `functools.partial(p, ...)`: NOTE [Partials of
    partials] in partials.py)."""
    import ctypes
    return ctypes.c_void_p.from_address(id(p) + type(p).__dictoffset__).value is None


def dict_overridden(cls: type) -> bool:
    """`cls` (or a base) defines `__dict__` in Python: reading `obj.__dict__` runs its code."""
    first = next((k.__dict__["__dict__"] for k in cls.__mro__ if "__dict__" in k.__dict__), None)
    return first is not None and type(first) not in (types.GetSetDescriptorType, types.MemberDescriptorType)


_GET_DICT: list = []


def _generic_get_dict() -> Any:
    if not _GET_DICT:
        import ctypes
        fn = ctypes.pythonapi.PyObject_GenericGetDict
        fn.restype, fn.argtypes = ctypes.py_object, (ctypes.py_object, ctypes.c_void_p)
        _GET_DICT.append(fn)
    return _GET_DICT[0]


def tables_as_traced(held: tuple, names: tuple, modules: tuple, exact: tuple = (), shared: tuple = ()) -> bool:
    """NOTE [Module tables beside the trace's dicts] (namespace_owners.py): no table `names` of `modules` (whose
    classes read `__dict__` from its getset) is one of the `held` objects; per `(module, pins)` of `exact`, and
    for the `shared` pins of torch.nn.modules.module's globals (the global hook dicts), each `(name, index)`
    table is `held[index]`, or for an index of -1 none of them. No code of the modules' classes runs."""
    ids = set(map(id, held))
    dicts = list(map(object.__getattribute__, modules, itertools.repeat("__dict__")))  # C loops: a model's
    for name in names:  # hundreds of modules cost ~0.25 us each
        if not ids.isdisjoint(map(id, map(dict.get, dicts, itertools.repeat(name)))):
            return False
    pinned = [(real_instance_dict(module), pins) for module, pins in exact]
    if shared:
        pinned.append((vars(sys.modules["torch.nn.modules.module"]), shared))
    for d, pins in pinned:
        if d is None:
            return False
        for name, index in pins:
            table = d.get(name)
            if (id(table) in ids) if index < 0 else (table is not held[index]):
                return False
    return True
