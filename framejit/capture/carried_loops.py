"""For loops carried across graph breaks: the loop's iterator given to a resume function.

NOTE [Loops carried across breaks]: a break inside a for loop's body passes the loop's iterator to the
resume function (a list iterator, or the list of the remaining items: the "iter" stack slot of
resume.make_resume_code, iterated by its prologue's GET_ITER). Read like any argument, it is guarded on
its position and on its list (length, and each item: a tensor item that is also the loop variable adds an
aliasing guard on `iterated_list(it)[k]`). Those guards differ on every iteration, so a loop whose body
breaks on every iteration (MoE expert loops: `for e in hit: idx, top = torch.where(mask[e])`) recompiled
the resume functions once per iteration, until the recompile limit ran the frame eagerly.

Two rules make such a loop compile a bounded number of times:
1. The iterator argument is a `CarriedIteratorValue`: unread, so unguarded, and rebuilt after a graph by
   reloading the argument (it has not moved). A resume function that breaks again before the loop's next
   step (the rest of the body) does not depend on the loop's position at all.
2. Its first step (FOR_ITER) reads it as usual (`step_value`: the position guarded, the rest of the loop
   unrolled), which is best for a break taken once (`if i == 0: print(...)`) and for short loops. When a
   resume function recompiles because such a guard failed and the loop has come back at LOOP_POSITIONS
   different positions (a long loop that breaks on every step: one entry per step would reach the
   recompile limit and run the frame eagerly), the hook marks the loop (`loop_marker` among the frame's
   dynamic ints: FrameHook._mark_carried_values); later traces then break AT the FOR_ITER: the compiled code takes the step in
   Python (`loop_next`) and calls the resume function of the body with the iterator and the item, or
   the one after the loop once it is exhausted (graph_break.BreakCodegen._emit_for_iter). The body's
   resume function takes the item as a plain argument, so every iteration reuses it.
"""
from __future__ import annotations

import collections
import functools
import inspect
import itertools
import re
import types
from typing import Any

from .. import logs
from .breaks import BreakKind, Unsupported
from .resume import STACK_PREFIX
from .sources import CallSource, LocalSource, Ref, Source
from .values.base import LazyArg, Value

_LIST_ITERATOR = type(iter([]))
_CARRIED_TYPES = (list, _LIST_ITERATOR)
# NOTE [Iterators stepped as Python]: a loop's enumerate or zip object rebuilt at a break (NOTE
# [Combinators rebuilt at breaks] in lazy_combinators.py), or a lazy iterator made by plain Python at an
# earlier break (a generator, map, filter, reversed: the break moved to where it was made): reading its
# position or items would consume it, so it is wrapped unread (`opaque_iterator`, guarded by type only)
# and a for loop over it takes each step in Python from the start (step_value), its body a resume
# function. Any other use of it (a call with it) is a graph break there, run in Python. Not a generator
# whose code has try/finally or with-blocks: held by the resume functions' arguments, it would be
# finalized later than eager does (NOTE [Generators with finalizers] in translator.py).
# The iterators of dicts (keys, values, items, and reversed), sets and strings are such iterators too: a
# for loop over a ParameterDict or `it = iter(d)` before a print() handed one to a resume function, which
# ran wholly eagerly ("L['it'] is a dict_keyiterator").
# itertools objects made by Python (passed in, or made at an earlier break) step in Python as well
_ITERTOOLS_ITERATORS = (itertools.pairwise, itertools.islice, itertools.accumulate, itertools.starmap,
                        itertools.chain, itertools.count, itertools.cycle, itertools.takewhile,
                        itertools.dropwhile, itertools.compress, itertools.zip_longest, itertools.product,
                        itertools.combinations, itertools.permutations, itertools.filterfalse, itertools.groupby,
                        type(next(itertools.groupby("a"))[1]))  # groupby and its groups (_grouper)
_STEPPED_TYPES = (enumerate, zip, map, filter, reversed, types.GeneratorType, *_ITERTOOLS_ITERATORS,
                  type(iter(())),  # a tuple's: a tensor's rows (NOTE [Loops over symbolic rows] in handlers/jumps.py)
                  type(iter({})), type(iter({}.values())), type(iter({}.items())), type(reversed({})),
                  type(reversed({}.values())), type(reversed({}.items())), type(iter(set())), type(iter("")),
                  type(iter(bytearray())), type(iter(b"")),  # NOTE [Mutable buffers carried across breaks]
                  type(iter(collections.deque())))  # NOTE [Deque iterators]: it raises once its deque changed
_STACK_ARG = re.compile(r"L\['(" + STACK_PREFIX + r"\d+)'\]")


class CarriedIteratorValue(Value):
    """A for loop's iterator passed to a resume function, not read yet: no guard on it (NOTE [Loops carried
    across breaks]). `obj` is a list iterator, or a list whose iterator the prologue's GET_ITER made."""

    def __init__(self, obj: Any, source: Source) -> None:
        self.obj = obj
        self.source = source

    def python_type(self) -> type:
        return _LIST_ITERATOR if type(self.obj) is list else type(self.obj)

    def describe(self) -> str:
        return f"CarriedIterator({self.source.describe()})"


def opaque_iterator(out, obj: Any, source: Source) -> CarriedIteratorValue | None:
    """`obj` unread, when it is a lazy iterator a for loop steps in Python (NOTE [Iterators stepped as
    Python]), else None."""
    if issubclass(type(obj), functools.partial):  # no __dict__ read: NOTE [Partials of partials] in partials.py
        return None
    if type(obj) not in _STEPPED_TYPES and (hasattr(obj, "__dict__") or not _builtin_iterator(obj)) \
            or not _finalized_like_eager(obj):  # NOTE [Other iterators stepped as Python]
        return None
    out.guard_type(source, type(obj))
    return CarriedIteratorValue(obj, source)


def _finalized_like_eager(obj: Any) -> bool:
    if type(obj) is not types.GeneratorType:
        return True
    from .normalize import has_handlers
    return not has_handlers(obj.gi_code)


def position_source(source: Source) -> Source:
    """The source of a carried loop's position: the one `_wrap_list_iterator` guards (values/builder.py)."""
    from .codegen_runtime import iterator_index
    return CallSource(Ref(iterator_index, "iterator_index"), source)


# NOTE [Loop positions are no symbols]: a resume function that recompiled because a carried loop's position
# changed (CONSTANT_MATCH on `iterator_index(L['___stack0'])`, or a range iterator's `remaining_range(...)`)
# logged "the int iterator_index(...) changed value; it is symbolic from now on" and added it to the frame's
# dynamic ints, where nothing reads it: the position stays a constant guard (`_wrap_list_iterator`), and such a
# loop is stepped in Python only after LOOP_POSITIONS positions (`dynamic_loops`). Such a source is not made
# "symbolic" any more, so the log says nothing untrue (hloop's Left 1).
def loop_position(source: Any) -> bool:
    """`source` names a loop iterator's position (see the NOTE above)."""
    return str(source).startswith(("iterator_index(", "remaining_range("))


def loop_marker(source: Source) -> str:
    """What the frame's dynamic values hold for a loop that breaks at its steps."""
    return "steps of " + position_source(source).describe()


# NOTE [Other iterators stepped as Python]: a for loop over an iterator that no value models reaches the resume
# function's FOR_ITER as the iterator itself, made by Python where the loop's GET_ITER broke: an object of a
# user class whose `__iter__` returns self and whose `__next__` steps it, iter(callable, sentinel), an
# OrderedDict's, an array's, a StringIO, itertools.tee's. Wrapped as a plain object, FOR_ITER had no step
# for it: an internal error ("'ObjectValue' object has no attribute 'next'") or "L['___stack0'] is a
# callable_iterator", and the resume function ran wholly eagerly (review revB M2). It is taken unread like a
# generator (guarded by its type): each step of the loop runs as Python (`next(it)`, so its own `__next__`
# runs once per step as in eager, StopIteration ends the loop), the body a resume function that takes the item.
# Only an iterator whose `__iter__` returns itself and does nothing else (a builtin iterator's, or a user
# class's `return self`, its lookup guarded): the body's resume function takes it in a "carried" slot, whose
# prologue applies GET_ITER again when it runs as Python. Another (its `__iter__` logs) still breaks at that
# FOR_ITER with no resume point (the resume function runs as Python: no internal error). The iterators that
# values model from outside (reversed-list and range iterators) keep their own form. A builtin iterator with no
# other form (callable_iterator, odict_iterator, memory_iterator, array's, itertools.tee's: "L['___stack0']
# is a callable_iterator" where the body's resume function took it) is wrapped so wherever it is read
# (`opaque_iterator`); an object of a user class only where a for loop steps it.
_MODELLED_ITERATORS = (_LIST_ITERATOR, type(reversed([])), type(iter(range(0))))


def _returns_self(self):
    return self


_KINDS = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS | inspect.CO_GENERATOR | inspect.CO_COROUTINE | \
    inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE


def _other_iterator(out, obj: Any) -> bool:
    """An iterator that no value models and whose `__iter__` is the identity: stepped in Python by a for loop
    (guards on the lookup of a Python `__iter__`)."""
    cls = type(obj)
    if cls in _MODELLED_ITERATORS or isinstance(obj, type) or not hasattr(cls, "__next__"):
        return False
    impl = inspect.getattr_static(cls, "__iter__", None)
    if isinstance(impl, types.FunctionType):
        code, ref = impl.__code__, _returns_self.__code__
        if (code.co_code, code.co_argcount, code.co_flags & _KINDS) != (ref.co_code, ref.co_argcount, 0):
            return False
        from .lookup import guard_lookup
        guard_lookup(out, cls, "__iter__")
        return True
    return _builtin_iterator(obj)


def _builtin_iterator(obj: Any) -> bool:
    """An iterator of a C type that returns itself from iter() (CPython's own iterators)."""
    cls = type(obj)
    if cls in _MODELLED_ITERATORS or not hasattr(cls, "__next__") or \
            not isinstance(inspect.getattr_static(cls, "__iter__", None), types.WrapperDescriptorType):
        return False
    try:
        return iter(obj) is obj
    except Exception:
        return False


# NOTE [Iterators over sequences of changing length]: `for k in reversed(d)`, `it = iter(d); for k in it`,
# `for j, k in enumerate(d)`, `for t in reversed(l)` over a dict or list of changing size (opaque: NOTE
# [Loops over sequences of changing length] in python_loops.py): the call making the iterator reads the
# opaque container, so it broke and ran as Python, and the resume function after it took the iterator as a
# plain iterator argument, stepped in Python one step at a time (NOTE [Iterators stepped as Python]) with
# the body as a resume function that specialised each key: 16 traces, then the recompile limit (review revX
# F7). An iterator made from an opaque operand at a break is marked dynamic in the next resume function
# (`inherit_dynamic_results`), like `d.items()`; such an iterator of a builtin container (its own, reversed,
# enumerate, zip of them) is wrapped as an opaque sequence there (values/builder.py `_OPAQUE_CONTAINERS`,
# guarded by type), not as a carried iterator: a for loop over it runs as Python as over the container, and
# any other use of it (`next(it)`, `list(it)`) breaks and runs in Python. Python steps it, so it raises when
# its container changed size, as eager does.
def carried_argument(tx, inst) -> CarriedIteratorValue | None:
    """The value of LOAD_FAST `inst` when it loads a resume function's loop iterator in its prologue (a
    stack argument not read yet, iterated by the next instruction), else None."""
    name = inst.arg
    if tx.parent is not None or not isinstance(name, str) or not name.startswith(STACK_PREFIX):
        return None
    lazy = tx.locals.get(name)
    if not isinstance(lazy, LazyArg) or not _finalized_like_eager(lazy.obj):
        return None
    insts = tx.program.insts
    if tx.pc >= len(insts):
        return None
    if type(lazy.obj) not in _CARRIED_TYPES + _STEPPED_TYPES:
        if not (insts[tx.pc].name == "GET_ITER" or _stepped_next(insts, tx.pc, lazy.obj)) \
                or not _other_iterator(tx.output, lazy.obj):
            return None
        tx.output.guard_type(LocalSource(lazy.name), type(lazy.obj))  # NOTE [Other iterators stepped as Python]
        return CarriedIteratorValue(lazy.obj, LocalSource(lazy.name))
    if insts[tx.pc].name == "GET_ITER" and LocalSource(name).describe() in (tx.output.dynamic_ints or ()):
        return None  # NOTE [Iterators over sequences of changing length]: wrapped as an opaque sequence
    if insts[tx.pc].name != "GET_ITER":
        if not _stepped_next(insts, tx.pc, lazy.obj):
            return None
        tx.output.guard_type(LocalSource(lazy.name), type(lazy.obj))  # made by Python: its type may change
    return CarriedIteratorValue(lazy.obj, LocalSource(lazy.name))


def _stepped_next(insts: list, pc: int, obj: Any) -> bool:
    """An iterator argument that the next instruction, or the one a jump there leads to, steps with FOR_ITER:
    the loop's GET_ITER ran in Python at the break (`for o in outs` over an opaque list, NOTE [Sequences of
    changing length carried across breaks]), so the resume function's prologue jumps to the FOR_ITER with
    the list iterator. Taken as a carried loop too, its steps run as Python once it came back at
    LOOP_POSITIONS positions; read as a plain argument, it was guarded by its list's length and unrolled:
    one entry per length until the recompile limit."""
    if type(obj) is list:
        return False
    inst = insts[pc]
    if inst.name == "JUMP" and isinstance(inst.arg, int) and 0 <= inst.arg < len(insts):
        inst = insts[inst.arg]
    return inst.name == "FOR_ITER"


def step_value(tx, value: CarriedIteratorValue) -> Value:
    """What FOR_ITER steps: the iterator read and guarded (its position a constant), or, once the loop's
    position is dynamic for this frame, a break at this FOR_ITER (NOTE [Loops carried across breaks])."""
    out = tx.output
    if type(value.obj) not in _CARRIED_TYPES:  # NOTE [Combinators rebuilt at breaks] in lazy_combinators.py
        e = Unsupported(BreakKind.DYNAMIC_CONTROL_FLOW, f"the loop's {type(value.obj).__name__} object was "
                        "made by Python: each step of the loop runs as Python, its body as a resume function "
                        "(NOTE [Iterators stepped as Python])")
        e.loop_step = True
        raise e
    if loop_marker(value.source) in (out.dynamic_ints or ()):
        e = Unsupported(BreakKind.DYNAMIC_CONTROL_FLOW, "the loop's body broke at another position of the loop "
                        "before: each step of the loop runs as Python, its body as a resume function")
        e.loop_step = True
        raise e
    from .protocol import iterate
    from .values.builder import wrap
    from .values.containers import IteratorValue, iterator_over
    realized = wrap(out, value.obj, value.source)
    if isinstance(realized, IteratorValue):
        return realized
    return iterator_over(realized, iterate(tx, realized))


def inherit_steps(out, body: Any, iterator: Value, slot: int) -> None:
    """A loop whose steps run as Python hands its body's resume function `body` (a FrameHook) its iterator
    at stack slot `slot`: that function steps the same loop at its end, so it breaks at that FOR_ITER from
    its first trace. Left to learn it (LOOP_POSITIONS recompiles per resume function, and the body's
    resume function of the second step is another one: its loop variable is a live local by then), a loop
    over a list whose length changes per call compiled about 5 entries per function it reached."""
    if isinstance(iterator, CarriedIteratorValue) and loop_marker(iterator.source) in (out.dynamic_ints or ()) \
            and hasattr(body, "dynamic_ints"):
        body.dynamic_ints = body.dynamic_ints | {loop_marker(LocalSource(f"{STACK_PREFIX}{slot}"))}


# a loop is broken at its steps once its resume function has been entered at this many positions: a loop
# of up to three steps stays unrolled (breaking at its steps would not make fewer graphs)
LOOP_POSITIONS = 4


def dynamic_loops(fn_code, args: tuple, failures, seen: dict) -> set[str]:
    """The position sources of the carried loops (list or list-iterator stack arguments of a resume
    function) that the failing guards of a recompile read, once `seen` (source -> positions met so far,
    updated here) holds LOOP_POSITIONS of them (NOTE [Loops carried across breaks])."""
    names = fn_code.co_varnames[:fn_code.co_argcount]
    by_name = dict(zip(names, args))
    found = set()
    for failure in failures:
        for name in _STACK_ARG.findall(str(failure.guard.source)):
            obj = by_name.get(name)
            if type(obj) not in _CARRIED_TYPES:
                continue
            from .codegen_runtime import iterated_list, iterator_index
            source = loop_marker(LocalSource(name))
            # a position in a list of another length is another entry too: a loop over `range(x.size(0))`
            # whose size changes between calls came back at positions 0, 1, 2 of lists of 3, 4, 5, ...
            # items, one entry each, until the recompile limit (redteam, issue 13)
            position = (iterator_index(obj), len(iterated_list(obj))) if type(obj) is _LIST_ITERATOR \
                else -len(obj) - 2
            seen[source] = seen.get(source, frozenset()) | {position}
            if len(seen[source]) >= LOOP_POSITIONS:
                found.add(source)
    return found


class OpaqueStringValue(Value):
    """A str argument of a resume function that changed between calls (NOTE [Strings carried across
    breaks]): guarded by type only; any use of its value is a graph break, run in Python."""

    def __init__(self, obj: str, source: Source) -> None:
        self.obj = obj
        self.source = source

    def python_type(self) -> type:
        return str

    def describe(self) -> str:
        return f"str({self.source.describe()})"


# NOTE [Strings carried across breaks]: a string made by plain Python at a break and passed to the resume
# function (`self[f"expert_{i}"]`: the formatted piece, then the name) is guarded by value, so a loop
# whose body breaks there recompiled the resume function for every name. When a resume function
# recompiles because such a string argument changed, the hook marks it (its source among the frame's
# dynamic values, like an int: NOTE [Dynamic ints]); later traces wrap it as an OpaqueStringValue, which
# only its type pins: building on it (BUILD_STRING), a subscript by it (`self[name]`: a module of the
# ModuleDict, reached as an argument of the next resume function, guarded by type and by its attributes'
# sources like any argument) and any other use break, and run in Python.
def opaque_string(out, obj: str, source: Source) -> OpaqueStringValue:
    out.guard_type(source, str)
    out.opaque_sequences = True  # its readers break (check_opaque_operands)
    return OpaqueStringValue(obj, source)


# NOTE [Dynamic ints formatted into strings]: an int that is symbolic because it changed between calls (a
# layer index, a step counter: NOTE [Dynamic ints]; or a size under automatic dynamic) formatted into a string
# (`d[f"layer_{i}"]`, `str(i)`, `f"{lr}"` of a dynamic float) was specialised: a guard on its value, so
# the frame recompiled for every value until the recompile limit ran it eagerly (8 traces; stock
# torch.compile gives the frame up to eager from its second call). The formatting now breaks instead and
# runs as Python, the graph before it kept. The string it makes is known to change with the value, so
# the resume function takes it as an opaque string from its first trace (NOTE [Strings carried across
# breaks]; `inherit_dynamic_results`), as is a string built on one (BUILD_STRING, str + str), and a float
# computed in Python from one (`d[key]` of a dict of floats) is a graph input there from its first trace
# (NOTE [Dynamic floats]): so the chain of resume functions is traced once each, not once per value.
def _dynamic_scalar(value: Value) -> bool:
    from .values.scalars import SymFloatValue, SymNodeValue
    if type(value) is SymFloatValue:
        return not all(getattr(root, "specialised", False) for root in value.roots)
    if type(value) is SymNodeValue:
        from torch.fx.experimental.symbolic_shapes import is_concrete_bool, is_concrete_float, is_concrete_int
        concrete = {bool: is_concrete_bool, float: is_concrete_float}.get(value.python_type(), is_concrete_int)
        return not concrete(value.sym)
    return False


def check_dynamic_format(tx, value: Value) -> None:
    """Break at formatting a symbolic int or float into a string (NOTE [Dynamic ints formatted into
    strings]); anything else formats as a constant. With fullgraph=True, where a break is an error, the
    value is specialised as before (guarded, recompiled per value as stock torch.compile does)."""
    if _dynamic_scalar(value) and not getattr(tx.output, "fullgraph", False):
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"formatting {value.describe()}, a value that changes "
                          "between calls, into a string: it runs as Python")


# NOTE [Lists of tensors indexed by dynamic ints]: `ws[i]` of a list or tuple of tensors by an int that
# changes between calls (symbolic: NOTE [Dynamic ints]) specialised the int (a guard on its value), so the
# frame compiled once per value until the recompile limit ran it eagerly (stock torch.compile the same).
# Which tensor it is does not change the graph after it, only its input: the subscript breaks and runs as
# Python, and the resume function takes the tensor as an argument (guarded by its metadata), so one trace
# serves every index. Only lists whose items are all tensors (a module list is another path; a list of
# ints or strings indexed by a dynamic int stays specialised). Not tuples: a resume function wraps a
# tuple's items at its entry, so the tensor it was passed aliases one of them, a guard per index.
def check_dynamic_index(seq: Value, key: Value) -> None:
    """Break at `seq[key]` (NOTE [Lists of tensors indexed by dynamic ints]). The choice needs no guard:
    the break is right for any items, and the specialised subscript guards what it reads."""
    if not _dynamic_scalar(key) or key.python_type() is not int or getattr(seq, "cls", None) is not list:
        return
    import torch
    from .values import TensorValue
    from .values.outside import OutsideListValue
    if isinstance(seq, OutsideListValue) and not seq.materialized:  # items unread (NOTE [Lists from outside])
        tensors = [isinstance(v, torch.Tensor) for v in seq._obj] + [type(v) is TensorValue for v in seq.tail]
    else:
        tensors = [type(v) is TensorValue for v in seq.items]
    if tensors and all(tensors):
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"indexing a list of tensors by "
                          f"{key.describe()}, an int that changes between calls: it runs as Python")


_STRING_MAKERS = frozenset({"FORMAT_VALUE", "BUILD_STRING", "BINARY_OP"})


# NOTE [Addresses are symbolic in resume functions]: `t.data_ptr()` is a graph break (it reads where the data
# lives), and its result is handed to the resume function, whose first trace specialised it to the address of
# that call's tensor: the next call's tensor lives elsewhere, so every resume function after one recompiled
# once with the int symbolic (`a.data_ptr() == x.data_ptr()` for views a, b of x: 20 traces over 12 calls where
# stock torch.compile makes 7). An address differs on nearly every call, so the result of a `data_ptr()` call
# at a break is symbolic in its resume function from the first trace (as automatic dynamic would make it at
# the second), and stays symbolic in the resume functions after it (NOTE [Symbols carried into resume
# functions]); what the trace decides from it (`p == q`, `p % 16 == 0`) is guarded on the symbols. Not under
# dynamic=False, which keeps every int static.
def _reads_an_address(body: Any, inst, operands: list) -> bool:
    if inst.name != "CALL" or not hasattr(body, "dynamic_ints") or \
            getattr(getattr(body, "request", None), "dynamic", None) is False:
        return False
    from .values import TensorMethodValue
    return any(type(v) is TensorMethodValue and v.name == "data_ptr" for v in operands[:2])


def inherit_dynamic_results(body: Any, inst, operands: list, slot: int) -> None:
    """A break at `inst`, which read `operands` and leaves its result at stack slot `slot` of the resume
    function `body` (a FrameHook): a result made from a dynamic value is dynamic there from its first trace
    (NOTE [Dynamic ints formatted into strings])."""
    if _reads_an_address(body, inst, operands):  # NOTE [Addresses are symbolic in resume functions]
        body.dynamic_ints = body.dynamic_ints | {LocalSource(f"{STACK_PREFIX}{slot}").describe()}
        return
    if not hasattr(body, "dynamic_ints") or inst.name == "GET_ITER" or not any(  # a loop's own iterator: NOTE
            # [Loops carried across breaks] (NOTE [Iterators over sequences of changing length])
            type(v) in (OpaqueStringValue, OpaqueSequenceValue) or _iteration_method(v) or _dynamic_scalar(v)
            for v in operands):
        return
    source = LocalSource(f"{STACK_PREFIX}{slot}").describe()
    if any(type(v) is OpaqueSequenceValue or _iteration_method(v) for v in operands):  # NOTE [Comprehension results
        # of changing length]; a method's result too: `d.items()` (NOTE [Loops over sequences of changing length])
        body.dynamic_ints = body.dynamic_ints | {source}  # an int a symbol, a list or tuple opaque, a str too
        if any(getattr(v, "changes", False) for v in operands):  # NOTE [Lengths that change between calls]
            body.dynamic_ints = body.dynamic_ints | {changes_marker(source)}
    makes_string = inst.name in _STRING_MAKERS or inst.name == "CALL" and any(
        getattr(v, "obj", None) is maker for v in operands[:2] for maker in (str, repr, format))
    if makes_string:  # a str there is opaque (an int or a list is not made by these)
        body.dynamic_ints = body.dynamic_ints | {source}
    body.dynamic_floats = body.dynamic_floats | {source}  # a float there is a graph input


# NOTE [Results shaped by data are dynamic in resume functions]: a break at a call (or subscript) whose op's output
# shape depends on tensor data (pack_padded_sequence's `_pack_padded_sequence`, nonzero, `x[x > 0]`: the fake
# tensor raised DynamicOutputShapeException) hands its result to the resume function, whose first trace made its
# sizes static: the next call's lengths recompiled it, and a packed LSTM/GRU compiled [2, 1, 2] graphs over 3 calls
# where stock torch.compile compiles [1, 0, 1]. Such sizes change with the data on nearly every call, so dim 0 of
# the result and of each of its first items (a PackedSequence's data, batch_sizes and indices) is symbolic in the
# resume function from its first trace, as automatic dynamic would make it at the second. Only marks: the resume
# function's own trace guards what it reads (0 and 1 stay static, a size it specialises is guarded). Not under
# dynamic=False (marks are not read there).
_SHAPED_ITEMS = 8


def mark_shaped_by_data(body: Any, slot: int) -> None:
    """The result at stack slot `slot` of the resume function `body` (a FrameHook) was made by an op whose output
    shape depends on data: dim 0 of it and of its first items is symbolic there from the first trace."""
    if not hasattr(body, "dynamic_dims"):
        return
    source = LocalSource(f"{STACK_PREFIX}{slot}").describe()
    dims = dict(body.dynamic_dims)
    for name in (source, *(f"{source}[{i}]" for i in range(_SHAPED_ITEMS))):
        dims[name] = dims.get(name, frozenset()) | {0}
    body.dynamic_dims = dims


def data_break(name: str, error: Exception) -> Unsupported:
    """The break at a kernel whose fake needed tensor data; `shaped_by_data` when its output's shape did."""
    from torch._subclasses.fake_tensor import DynamicOutputShapeException
    err = Unsupported(BreakKind.DATA_DEPENDENT, f"{name} needs tensor data to decide ({type(error).__name__})")
    err.shaped_by_data = isinstance(error, DynamicOutputShapeException)
    return err


def mark_break_result(gen: Any, body: Any, slot: int, split: bool = True) -> None:
    """NOTE [Unbind along a symbolic length] (graph_calls.py; a call's result only) and NOTE [Results shaped by data
    are dynamic in resume functions], for the result of the break `gen` (a BreakCodegen)."""
    if split and getattr(gen, "split_result", False):
        mark_opaque(body, slot)
    if getattr(gen, "shaped_by_data", False):
        mark_shaped_by_data(body, slot)


def mark_opaque(body: Any, slot: int) -> None:
    """The result at stack slot `slot` of the resume function `body` (a FrameHook) is a sequence of changing
    length there from its first trace."""
    if hasattr(body, "dynamic_ints"):  # its size changed between calls (NOTE [Lengths that change between calls])
        source = LocalSource(f"{STACK_PREFIX}{slot}").describe()
        body.dynamic_ints = body.dynamic_ints | {source, changes_marker(source)}


# NOTE [Lengths that change between calls]: a sequence is opaque (NOTE [Sequences of changing length carried
# across breaks]) once its length changed between two calls of a resume function; that may be the calls of
# one loop's steps (`for i in range(3): fs.append(lambda: x * i); print(i)`: fs has 1, 2, 3 items at the
# print, the same 3 at `[f() for f in fs]` on every call) or calls of the whole frame (fs built from the rows
# of an input whose size changes). Only the second makes a comprehension over it run as Python (NOTE
# [Comprehensions over sequences of changing length] in python_loops.py): the first kept its one graph for
# the comprehension's body (test_breaks_cells's closures_in_loop: 0 graphs on 3.13 when it ran as Python,
# which reverted 17a3129). The frame's dynamic values hold `changes_marker(source)` for such a sequence: set
# by the hook when a length guard failed with no loop position among the failures (the same call site,
# another length), for an unbind's result along a size that changed (mark_opaque), for what a call reading
# such a sequence returns (`list(rows)`: inherit_dynamic_results), for a comprehension's result over a
# symbolic range (changing_result), and handed on to the next resume function (inherit_symbols); wrapped as
# an OpaqueSequenceValue with `changes` set. Without it the comprehension breaks at its GET_ITER as before
# and its resume function takes the list iterator guarded by its length.
def changes_marker(source: str) -> str:
    """What the frame's dynamic values hold for a sequence at `source` whose length changes between calls."""
    return "length changes: " + source


# NOTE [Only views of opaque containers are opaque]: the result of `d.keys()`, `.values()`, `.items()` of an
# opaque container is opaque in the next resume function, so a loop over it runs as Python; the result of any
# other method (`k, v = d.popitem()`, `d.pop(0)`, `l.index(v)`) is not: an opaque tuple there broke again at
# its UNPACK_SEQUENCE, and the dict itself was then guarded by its keys in the resume function after that
# break, once per size until the recompile limit ran it eagerly.
_ITERATION_METHODS = frozenset({"keys", "values", "items", "__iter__"})


def _iteration_method(value: Value) -> bool:
    return type(value) is OpaqueMethodValue and getattr(value.obj, "__name__", None) in _ITERATION_METHODS


def _failed_arguments(fn_code, args: tuple, failures, kind: str, accept) -> set[str]:
    """The sources `L['name']` of a resume function's arguments whose `kind` guard failed in a recompile and
    whose value `accept`s."""
    by_name = dict(zip(fn_code.co_varnames[:fn_code.co_argcount], args))
    found = set()
    for failure in failures:
        source = str(failure.guard.source)
        match = re.fullmatch(r"L\['(\w+)'\]", source)
        if failure.guard.kind == kind and match and accept(match.group(1), by_name.get(match.group(1))):
            found.add(source)
    return found


# NOTE [Bound methods of sequences of changing length]: a break inside the arguments of `select.append(...)`
# (ViLT's visual_embed: `select.append(rows[i][torch.multinomial(...)])` in a loop stepped as Python) passes
# the bound method to the resume function on the stack; its list is read there as `L['___stack2'].__self__`
# and guarded by length. The list grows on every step, so that resume function recompiled per length (and
# again on the next call, whose steps met the newest entry first) although `L['select']` itself had become
# opaque. The owner of a bound list or tuple method whose length guard failed is opaque too, from its
# `.__self__` source: the builder wraps it as an OpaqueSequenceValue there, and its append is a break.
def _failed_method_owners(fn_code, args: tuple, failures, values) -> set[str]:
    by_name = dict(zip(fn_code.co_varnames[:fn_code.co_argcount], args))
    found = set()
    for failure in failures:
        source = str(failure.guard.source)
        match = re.fullmatch(r"L\['(\w+)'\]\.__self__", source)
        if failure.guard.kind != "LENGTH" or not match:
            continue
        name = match.group(1)
        owner = getattr(by_name.get(name), "__self__", None)
        if (not name.startswith(STACK_PREFIX) or name in values) and type(owner) in (list, tuple):
            found.add(source)
    return found


def changed_strings(fn_code, args: tuple, failures) -> set[str]:
    """The str arguments of a resume function whose value guards failed in a recompile."""
    return _failed_arguments(fn_code, args, failures, "CONSTANT_MATCH", lambda name, value: type(value) is str)


class OpaqueSequenceValue(Value):
    """A list or tuple argument of a resume function whose length changed between calls (NOTE [Sequences
    of changing length carried across breaks]): guarded by type only; any use of it is a graph break."""

    def __init__(self, obj: list | tuple, source: Source, changes: bool = False) -> None:
        self.obj = obj
        self.source = source
        self.changes = changes  # NOTE [Lengths that change between calls]

    def python_type(self) -> type:
        return type(self.obj)

    def describe(self) -> str:
        changing = "" if type(self.obj) in (bytearray, memoryview) else " of changing length"
        return f"{type(self.obj).__name__}({self.source.describe()}){changing}"


# NOTE [Sequences of changing length carried across breaks]: a list built by a loop over a symbolic range run
# as Python (`outs = []; for i in range(x.size(0)): outs.append(x[i] * 2)`, NOTE [Loops over symbolic
# ranges]) or by a loop whose body breaks reaches the resume function after the loop as an argument guarded
# by its length (and its items' sources): the owner frame served every size, but that resume function
# compiled once per length until the recompile limit ran it eagerly (stock torch.compile: 8 graphs over 10
# lengths, then eager). When a resume function recompiles because the length of a list or tuple local
# changed, the hook marks it (its source among the frame's dynamic values, like a string: NOTE [Strings
# carried across breaks]); later traces wrap it as an OpaqueSequenceValue, pinned by its type only: its
# first use (`torch.stack(outs)`, `len(outs)`, a loop over it) breaks and runs in Python, and the code after
# that use is a resume function again, whose tensors (the stacked result: its size is the length) become
# symbolic by automatic dynamic. So the resume function compiles twice for every length. Only locals of
# resume functions and their stack arguments of kind "value" (not a loop's iterator: carried loops have their
# own rule, NOTE [Loops carried across breaks]; NOTE [Comprehension results of changing length]); a user
# function's list argument is guarded by length as stock does.
#
# NOTE [Mutable buffers carried across breaks]: a `bytearray` or `memoryview` (made after a break at its
# construction, or passed in) has no value of its own; it was "L['b'] is a bytearray" when the resume
# function holding it started, which then ran wholly eagerly. It is wrapped as an opaque sequence too, from
# any source: held and moved as it is, each use (and each call of its method) a break run in Python, and
# its iterator steps in Python (NOTE [Iterators stepped as Python]).
def opaque_sequence(out, obj: list | tuple | bytearray | memoryview, source: Source) -> OpaqueSequenceValue:
    out.guard_type(source, type(obj))
    out.opaque_sequences = True  # the translator checks its operands from now on (check_opaque_operands)
    return OpaqueSequenceValue(obj, source, changes_marker(source.describe()) in (out.dynamic_ints or ()))


class OpaqueMethodValue(Value):
    """`seq.name` of an OpaqueSequenceValue, for a method of its exact type (list or tuple, guarded), loaded
    for a call (NOTE [Methods of sequences of changing length]): reloaded from its source where the call
    breaks; any read of it is a graph break."""

    def __init__(self, obj: Any, source: Source) -> None:
        self.obj = obj
        self.source = source

    def python_type(self) -> type:
        return type(self.obj)

    def describe(self) -> str:
        return f"method {self.source.describe()} of a sequence of changing length"


# NOTE [Methods of sequences of changing length]: `outs.append(y)` after the loop that built an opaque `outs`
# broke at LOAD_METHOD, so the bound method reached the next resume function as a stack argument, guarded
# by identity: a new object on every call, so that function recompiled on every call until the recompile
# limit ran it eagerly. A method load of a list or tuple method on an opaque sequence now pushes an
# OpaqueMethodValue instead (the type is guarded exactly, so the method is the type's own), and the break
# comes at the CALL that reads it: the whole call runs in Python (the bound method reloaded from the
# resume function's argument, the object eager's LOAD_METHOD bound), and only its result goes on.
def opaque_method(value: Value, name: str) -> OpaqueMethodValue | None:
    """The method `name` of an opaque sequence, or None when it is not a plain method of its type."""
    if type(value) is not OpaqueSequenceValue or not isinstance(type(value.obj).__dict__.get(name),
                                                                 types.MethodDescriptorType):
        return None
    from .sources import AttrSource
    method = OpaqueMethodValue(getattr(value.obj, name), AttrSource(value.source, name))
    method.changes = value.changes  # `rows.copy()` (NOTE [Lengths that change between calls])
    return method


# instructions that only move values: an opaque sequence on the stack may pass through them
_MOVERS = frozenset({"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_FAST_LOAD_FAST", "LOAD_CONST",
                     "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_CLOSURE", "STORE_FAST", "STORE_FAST_STORE_FAST",
                     "STORE_FAST_LOAD_FAST", "PUSH_NULL", "NOP", "RESUME", "KW_NAMES", "PRECALL", "CACHE",
                     "COPY_FREE_VARS", "MAKE_CELL", "EXTENDED_ARG", "RETURN_CONST", "POP_TOP", "COPY", "SWAP",
                     "JUMP", "JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP_ABSOLUTE"})


# how many values at the top of the stack an instruction reads, for the common ones (others: the whole stack)
_READS = {"LOAD_ATTR": lambda a: 1, "LOAD_METHOD": lambda a: 1, "UNARY_NEGATIVE": lambda a: 1,
          "UNARY_NOT": lambda a: 1, "UNARY_INVERT": lambda a: 1, "TO_BOOL": lambda a: 1, "GET_ITER": lambda a: 1,
          "BINARY_OP": lambda a: 2, "BINARY_SUBSCR": lambda a: 2, "COMPARE_OP": lambda a: 2,
          "IS_OP": lambda a: 2, "CONTAINS_OP": lambda a: 2, "CALL": lambda a: a + 2,
          "POP_JUMP_IF_TRUE": lambda a: 1, "POP_JUMP_IF_FALSE": lambda a: 1, "POP_JUMP_FORWARD_IF_TRUE": lambda a: 1,
          "POP_JUMP_FORWARD_IF_FALSE": lambda a: 1, "POP_JUMP_BACKWARD_IF_TRUE": lambda a: 1,
          "POP_JUMP_BACKWARD_IF_FALSE": lambda a: 1, "RETURN_VALUE": lambda a: 1, "FOR_ITER": lambda a: 1,
          "UNPACK_SEQUENCE": lambda a: 1, "UNPACK_EX": lambda a: 1, "STORE_ATTR": lambda a: 2,
          "STORE_SUBSCR": lambda a: 3, "DELETE_SUBSCR": lambda a: 2, "BUILD_TUPLE": lambda a: a,
          "BUILD_LIST": lambda a: a, "BUILD_SET": lambda a: a, "BUILD_STRING": lambda a: a,
          "BUILD_MAP": lambda a: 2 * a, "BUILD_SLICE": lambda a: a, "FORMAT_SIMPLE": lambda a: 1,
          "FORMAT_VALUE": lambda a: 1 + bool((a if isinstance(a, int) else 4 * bool(a[1])) & 4),
          "FORMAT_WITH_SPEC": lambda a: 2, "CONVERT_VALUE": lambda a: 1,
          # NOTE [Readers of opaque operands]: these read only their top slot (the target list, set or dict
          # deeper down is one the frame builds), and MAKE_FUNCTION its code object and the flagged tuples:
          # any other slot under them (`ks == {0, 1, 2}`, `sorted(it, key=lambda kv: kv[0])`) is read by a
          # later instruction, where the break is taken; a whole-stack window broke here, where no frame can
          # resume, and the function ran eagerly
          "SET_UPDATE": lambda a: 1, "LIST_EXTEND": lambda a: 1, "DICT_UPDATE": lambda a: 1,
          "DICT_MERGE": lambda a: 1, "LIST_APPEND": lambda a: 1, "SET_ADD": lambda a: 1, "MAP_ADD": lambda a: 2,
          "MAKE_FUNCTION": lambda a: 1 + bin(a & 15).count("1"), "SET_FUNCTION_ATTRIBUTE": lambda a: 2}


def check_opaque_operands(tx, inst) -> None:
    """Break before an instruction that may read an opaque sequence (NOTE [Sequences of changing length
    carried across breaks]): one that reads a stack slot holding one (any slot, for an instruction not
    listed in _READS), except plain loads and stores. The protocol functions would otherwise answer for it
    as for an unknown object (truth True, not iterable)."""
    if inst.name in _MOVERS or (inst.name == "LOAD_METHOD" and tx.stack
                                and opaque_method(tx.stack[-1], inst.arg) is not None):
        return  # a method of an opaque sequence: the load is kept, its call breaks
    reads = _READS.get(inst.name)
    try:
        n = reads(inst.arg) if reads is not None else len(tx.stack)
    except TypeError:
        n = len(tx.stack)
    window = tx.stack[len(tx.stack) - n:] if n > 0 else ()
    returned = _returned_as_is(tx, inst)
    for v in window:
        if type(v) is OpaqueSequenceValue and returned:
            continue  # returned as itself, reloaded from its source (as an opaque string below)
        if type(v) is OpaqueSequenceValue or type(v) is OpaqueMethodValue:
            exc = Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{inst.name} reads {v.describe()}: it runs as Python")
            if inst.name == "GET_ITER":  # NOTE [Loops over sequences of changing length] in python_loops.py
                from .python_loops import opaque_sequence_loop
                exc = opaque_sequence_loop(tx, inst, exc) or exc
            raise exc
        if type(v) is OpaqueStringValue and not returned:  # NOTE [Strings carried across breaks]: `if name:`
            # was True for ''
            raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{inst.name} reads a string that changes between "
                              "calls: it runs as Python")


def _returned_as_is(tx, inst) -> bool:
    """The root frame returns what `inst` reads unread: RETURN_VALUE, or the tuple or list built right
    before it (`return y, name`). An opaque string goes there as itself (reloaded from its source), so the
    frame's graph is kept (NOTE [Dynamic ints formatted into strings]); anywhere else the container could
    be compared or searched with the string's value unknown."""
    if tx.parent is not None:
        return False
    if inst.name == "RETURN_VALUE":
        return True
    insts = tx.program.insts
    return inst.name in ("BUILD_TUPLE", "BUILD_LIST") and tx.pc < len(insts) and insts[tx.pc].name == "RETURN_VALUE"


# NOTE [Comprehension results of changing length]: the list a comprehension over a symbolic range makes
# (NOTE [Comprehensions over symbolic ranges] in python_loops.py) reaches the resume function after it (a stack
# argument on 3.11, a stack argument or a local on 3.12+) guarded by its length, so that function compiled once
# per size (5 traces over 5 sizes; 8, then eager, over 10: stock torch.compile the same). Its length is known
# to change with the size, so it is opaque there from the first trace (as a string made from a dynamic int:
# NOTE [Dynamic ints formatted into strings]), and a stack argument of kind "value" whose length changed is
# made opaque like a local (resume.value_stack_args; a loop's iterator keeps NOTE [Loops carried across
# breaks]). An opaque sequence passed on to the next resume function is opaque there too
# (inherited_symbols.inherit_symbols), and what a call that read one returns (`len(ys)`, `sum(ys)`,
# `sorted(ys)`) is dynamic in the resume function after it from its first trace (`inherit_dynamic_results`):
# an int or float is a symbol or graph input, a list or tuple opaque. A tensor it returns (`torch.stack(ys)`)
# goes by automatic dynamic. Values are unchanged: each use of an opaque sequence runs in Python.
# NOTE [Dict and set results of changing size]: a dict or set comprehension's result was not opaque: the resume
# function after `d = {i: i * 2 for i in range(x.size(0))}` was guarded by its keys (DICT_KEYS, then an item's
# type) and compiled once per size, 11 traces over 10 sizes where stock compiles 8 frames and then runs the
# frame eagerly. It is opaque as a list is (the same OpaqueSequenceValue: any read of it breaks and runs in
# Python; `len(d)` is dynamic after it), from its first trace under dynamic=None and dynamic=True alike (a
# list stays unopaque under dynamic=True until its length changes, so `torch.stack(ys)` of a fixed length
# stays in the graph; a dict's keys are guarded one by one, so its size cannot be kept symbolic anyway).
# Only a comprehension's (or `dict(...)`/`set(...)` of a generator expression's) result: a dict or set
# argument whose keys change elsewhere keeps its guards (changed_lengths takes lists and tuples only).
def changing_result(body: Any, name: str | None, keyed: bool = False) -> None:
    """Mark the local or stack argument `name` of the resume function `body` (a FrameHook) opaque from its
    first trace when it holds a list, tuple, dict or set (NOTE [Comprehension results of changing length],
    [Dict and set results of changing size])."""
    if name is not None and hasattr(body, "dynamic_ints") and (keyed or getattr(body.request, "dynamic", None) is not True) \
            and LocalSource(name).describe() not in getattr(body, "never_opaque", ()):
        body.dynamic_ints = body.dynamic_ints | {LocalSource(name).describe()}
        if getattr(body.request, "dynamic", None) is None:  # the range's size changed (NOTE [Lengths that change
            body.dynamic_ints = body.dynamic_ints | {changes_marker(LocalSource(name).describe())}  # between calls])


# NOTE [Opaque sequences that cannot be carried]: an opaque list's first use may be an instruction no graph
# break can be taken at (a closure capturing it: STORE_DEREF; `[*ys, 1]`, `(*ys,)`, `{*ys}`, `f(*ys)`:
# LIST_EXTEND/SET_UPDATE; `{"ys": ys}`; review revP P3). The resume function then ran wholly eagerly from its
# first call (before NOTE [Comprehension results of changing length] it compiled once per length). When a
# trace with opaque sequence arguments ends in such an eager entry, the hook traces it again with those
# arguments' lengths guarded, and never makes them opaque again: one entry per length, as before.
_ARG = re.compile(r"L\['(.+)'\]")
# a dict's view too (`[*d.values()]`: NOTE [Only views of opaque containers are opaque])
_RETRACED_TYPES = (list, tuple, dict, set, frozenset, type({}.keys()), type({}.values()), type({}.items()))


def retrace_with_lengths(hook: Any, entry: Any, args: tuple, kwargs: dict, convert_frame: Any) -> Any:
    """A new entry for the call traced (by hook.py's `convert_frame`: capture imports go one way, test_import)
    with its opaque sequence arguments' lengths guarded, or None."""
    gb = getattr(entry, "graph_break", None)
    if not getattr(entry, "runs_eagerly", False) or gb is None or "of changing length" not in gb.explanation or kwargs:
        return None
    values = dict(zip(hook.fn.__code__.co_varnames, args))
    opaque = frozenset(s for s in hook.dynamic_ints if (m := _ARG.fullmatch(s)) and
                       type(values.get(m.group(1))) in _RETRACED_TYPES)
    if not opaque:
        return None
    from . import eager_frames
    from .requests import STATS
    eager_frames.forget(hook.fn.__code__, "of changing length")
    STATS["eager_entries"] -= 1
    hook.never_opaque = getattr(hook, "never_opaque", frozenset()) | opaque
    hook.dynamic_ints = hook.dynamic_ints - opaque
    logs.log("recompiles", "%s: %s cannot stay opaque (%s); its length is guarded from now on",
             hook.fn.__code__.co_qualname, ", ".join(sorted(opaque)), gb.explanation)
    return convert_frame(hook.fn, args, kwargs, hook.request, hook.dynamic_floats, hook.dynamic_dims, hook.dynamic_ints)


def changed_lengths(fn_code, args: tuple, failures) -> set[str]:
    """The list or tuple locals of a resume function whose length guards failed in a recompile (NOTE
    [Sequences of changing length carried across breaks]), each with its changes_marker where no loop
    position failed with them (NOTE [Lengths that change between calls])."""
    from .resume import value_stack_args
    values = value_stack_args(fn_code)
    found = _failed_arguments(fn_code, args, failures, "LENGTH", lambda name, value:
                              (not name.startswith(STACK_PREFIX) or name in values) and type(value) in (list, tuple))
    found |= _failed_method_owners(fn_code, args, failures, values)
    if found and not any(loop_position(str(f.guard.source)) for f in failures):
        found = found | {changes_marker(s) for s in found}
    return found


_DONE = object()


def loop_iterator(obj: Any) -> Any:
    """The iterator a carried loop argument stands for (a list's own iterator at its start)."""
    return iter(obj) if type(obj) is list else obj  # any other is an iterator: iter() of a user's could log


def loop_next(iterator: Any) -> Any:
    """One FOR_ITER step taken in Python: the next item, or a marker once the iterator is exhausted."""
    return next(iterator, _DONE)


def loop_done(item: Any) -> bool:
    return item is _DONE


__all__ = ["CarriedIteratorValue", "OpaqueMethodValue", "OpaqueSequenceValue", "OpaqueStringValue", "changed_lengths", "check_opaque_operands", "opaque_sequence", "carried_argument", "opaque_iterator", "changed_strings", "dynamic_loops", "inherit_steps", "loop_done", "loop_iterator", "loop_next", "opaque_method",
           "opaque_string", "loop_marker", "loop_position", "position_source", "step_value"]
