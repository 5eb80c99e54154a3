"""The transformed function's bytecode, written with the `bytecode` library.

`Codegen` writes instructions through emit.py, which spells them for the running CPython (PRECALL, KW_NAMES
or CALL_KW, the NULL of a call, LOAD_ATTR's forms, ...), so the rest of capture writes one sequence for
every CPython. `make_function` turns the emitted body
into a function with exactly the original's signature: CPython binds the call's arguments itself, and
the body reloads graph inputs from their sources, calls the compiled graph, and rebuilds the return
value (`Reconstructor`).

NOTE [Constants in co_consts]: compiled graphs, globals dicts and closure cells are referenced with
LOAD_CONST of the objects themselves: the fastest load there is, and nothing is added to the user's
globals. These code objects are never marshalled.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import sys
import itertools
import types
import weakref
from typing import Any

import bytecode
from bytecode import Instr

from . import emit, lifetimes
from .breaks import BreakKind, Unsupported
from .codegen_runtime import (bound_c_method, deque_iterator_at, exhausted_list_iterator, failing_iterator,
                              keys_iterator_at, list_iterator_at, make_closure, mutated_deque_iterator, namedtuple_of,
                              new_cell, new_object, range_iterator_at, rows_as, set_function_attrs, walk_at)
from .codegen_runtime import ITERTOOLS_ROWS, callable_iterator_of
_CALLABLE_ITERATOR = type(iter(lambda: None, None))
from .values.base import LazyArg
from .values import (BoundMethodValue, BuiltinValue, ClassValue, ConstantValue, DefaultDictValue, DictValue,
                     DictViewValue, IteratorValue, ListValue, NewObjectValue, ObjectValue, PartialValue,
                     PyModuleValue, SequenceValue, SetValue, SymNodeValue, TensorMethodValue, TensorValue, TupleValue,
                     UserFunctionValue, Value)
from .stdlib import GETTERS, getter_args
from .caught_exceptions import exception_rebuild, temporaries_cleared

from . import const_keys  # noqa: E402 - NOTE [Constants kept apart by type]: installed on import
_CONST_KEYS = const_keys
from .mappings_runtime import grad_mode_manager, make_defaultdict, make_reordered, view_of, view_of_object
from .context import rebuildable_manager
from .values.mappings import IdentityKey, key_value, viewed_object
from .set_tables import set_rebuild
from .partials import check_rebuildable, make_partial, partial_parts
from .lazy_combinators import combinator_at, rebuild_spec, spec_children
from .sources import LocalSource, ObjectSource, safe_local, with_prologue
from .sym_arith import SymRangeValue
from .raising_floats import byte_spans, clean_spans, note_spans
from .values.scalars import SymFloatValue

GRAPH_OUT = "___graph_out"  # the local holding the graph's outputs


class Codegen:
    """A list of instructions written through emit.py's version-specific spellings. A call is written
    `push_null()`, the callable, the arguments, `call(n)` on every CPython (NOTE [Call layouts])."""

    def __init__(self) -> None:
        self.insts: list[Instr] = []
        self.graph_call: Instr | None = None  # the CALL of the compiled graph (NOTE [Graph call span])
        self.prologue, self.kept = [], {}  # NOTE [Referents loaded once, at entry] (sources.kept_local)
        self.float_spans: list = []  # (first, last) of each preloaded rebuilt float: NOTE [Rebuilt floats that raise]

    def emit(self, name: str, arg: Any = bytecode.UNSET) -> None:
        self.insts.append(Instr(name, arg) if arg is not bytecode.UNSET else Instr(name))

    def load_const(self, value: Any) -> None:
        self.emit("LOAD_CONST", value)

    def load_fast(self, name: str) -> None:
        self.emit("LOAD_FAST", name)

    def store_fast(self, name: str) -> None:
        self.emit("STORE_FAST", name)

    def load_attr(self, name: str) -> None:
        self.insts.append(emit.load_attr(name))

    def subscr(self) -> None:
        self.emit("BINARY_SUBSCR")

    def push_null(self) -> None:
        """Start a call: the NULL below the callable (nothing on 3.13, NOTE [Call layouts])."""
        self.insts += emit.null_before_callable()

    def null_after_callable(self) -> None:
        """After the callable of a CALL_FUNCTION_EX: its NULL on 3.13."""
        self.insts += emit.null_after_callable()

    def call(self, nargs: int, kw_names: tuple[str, ...] = ()) -> None:
        """Call the callable (after `push_null()`) with the `nargs` arguments above it on the stack."""
        self.insts += emit.call(nargs, kw_names)

    def call_ex(self, has_kwargs: bool) -> None:
        self.insts += emit.call_ex(has_kwargs)

    def call_graph(self, compiled: Any, sources: list) -> None:
        """`___graph_out = compiled(*inputs)`, each input reloaded from its source; the CALL is remembered
        so that make_function records where it lies (NOTE [Graph call span])."""
        self.push_null()
        self.load_const(compiled)
        for source in sources:
            source.reload(self)
        self.call(len(sources))
        self.graph_call = self.insts[-1]
        self.store_fast(GRAPH_OUT)

    def build(self, kind: str, n: int) -> None:
        self.emit(kind, n)

    def return_value(self) -> None:
        self.emit("RETURN_VALUE")


def _stored_function_attrs(value: Any) -> dict:
    """What a function made while tracing must get after make_closure: its stored attributes, and the
    annotations MAKE_FUNCTION built unless a store replaced them."""
    attrs = dict(value.attrs or {})
    if value.annotations is not None and "__annotations__" not in attrs:
        from .function_attrs import annotations_dict
        attrs["__annotations__"] = annotations_dict(value)
    return attrs


from .values.containers import check_claims, position_read  # noqa: E402


def escaped_generator(value: IteratorValue) -> Unsupported:
    """A generator's iterator that outlives the graph (returned, stored, live at a break) must be the
    lazy generator eager code makes: a break at the call that made it (NOTE [Eager generators])."""
    e = Unsupported(BreakKind.SIDE_EFFECT, "a generator made in the compiled region escapes it: it runs as Python")
    e.root_index = value.made_at
    e.frame_eager = getattr(value, "frame_eager", False)  # NOTE [Generators with finalizers] in translator.py
    e.finalizes = getattr(value, "finalizes", False)  # a lazy one whose finally changes state: not moved earlier
    return e


_C_METHOD_DESCRIPTORS = (types.MethodDescriptorType, types.WrapperDescriptorType)


_LIST_ITERATOR = type(iter([]))


class Reconstructor:
    """Emits code that rebuilds an abstract value at run time from graph outputs and sources."""

    def __init__(self, cg: Codegen, output_index: dict[int, int], out_local: str,
                 frame_globals: dict | None = None) -> None:
        self.cg = cg
        self.frame_globals = frame_globals  # the globals the emitted code runs with (NOTE [Globals of a rebuilt closure])
        self.output_index = output_index  # id(fx node) -> index in the graph's output tuple
        self.out_local = out_local
        self.preloaded: dict[int, str] = {}  # id(value) -> local holding it (see preload)
        self._kept: list = []  # the preloaded values, alive so that their ids are not reused
        self.after_replay: list = []  # NOTE [Dict iterators built after replay]
        self._deferred: set[int] = set()  # their ids, until built: the first emission builds and keeps one
        self.output = None  # the trace's output, where known: guards the rebuilt sets' tables follow

    def preload(self, values: list, sourced: bool = True) -> None:
        """Load every value that is rebuilt from a source (when `sourced`) and every mutable object made
        while tracing into a local now.

        NOTE [Reload before replay]: side-effect replay changes containers (`items[:] = ...`), and a value
        whose source reads one of them (`items[0]`, popped while tracing) must be read before that.

        NOTE [Dict iterators built after replay]: CPython's iterator over a dict or set (or a view of one)
        raises at its next step when the table's size changed since it was made. An iterator the trace made
        over a dict from outside after the frame changed that dict (`d["new"] = 1; g = (v for v in
        d.values())`, a break at `next(g)`) was rebuilt before the replay of that change, so the real
        iterator saw the store and raised RuntimeError where eager runs on. Such an iterator is built after
        the replay, and so is every value made while tracing that holds it (`[it]`, the returned tuple):
        `after_replay`, preloaded by the break's code once the effects are replayed, elsewhere (the return)
        built where first emitted and then kept, so it stays one object. It reads the dict as the program
        had it when the iterator was made; one changed since then still fails as eager's does
        (failing_iterator).

        NOTE [One object per value]: a list, dict, set, object or context manager made while tracing may be
        reachable from several places (a local, a bound method `r.append` or `ng.__enter__` on the stack, an
        item of another container, a side effect). It is built once, into a local, and every place loads it,
        so a mutation through one path (the call at a graph break, the resume function) is seen by all."""
        for value in values:
            self._preload(value, sourced, set())

    def _preload(self, value: Any, sourced: bool, visiting: set[int]) -> None:
        if id(value) in self.preloaded or id(value) in visiting or not isinstance(value, Value):
            return
        if value.source is not None and not (isinstance(value, TensorValue) and id(value.node) in self.output_index):
            if sourced and isinstance(value, BoundMethodValue):  # its `__self__` too: NOTE [Reload before replay]
                self._preload(value.self_value, sourced, visiting)
            if sourced and not isinstance(value.source, (LocalSource, ObjectSource)):
                self._store_preloaded(value)  # a frame local or a fixed object cannot change meanwhile
            return
        visiting.add(id(value))
        start = len(self.cg.insts)
        children = _children(value)
        for child in children:
            self._preload(child, sourced, visiting)
        if sourced and any(id(child) in self._deferred for child in children):
            self._defer(value)  # NOTE [Dict iterators built after replay]: what holds one is built after it too
            return
        if isinstance(value, SymRangeValue):
            return  # rebuilt from its bounds; reading its value would specialise them
        if isinstance(value, SymFloatValue) and _replayable_float(value):
            self._store_preloaded(value)  # NOTE [Computed floats rebuilt in Python]
            self.cg.float_spans.append((self.cg.insts[start], self.cg.insts[-1]))  # NOTE [Rebuilt floats that raise]
            return
        if isinstance(value, (ListValue, DictValue, SetValue, NewObjectValue, PartialValue)) or _numpy_value(value) \
                or isinstance(value, ConstantValue) and isinstance(value.value, BaseException) \
                or rebuildable_manager(value) or _unentered_generator_cm(value) \
                or isinstance(value, UserFunctionValue) and value.attrs is not None:  # made while tracing
            if isinstance(value, UserFunctionValue):
                self._preload_cells(value)
            self._store_preloaded(value)  # an ndarray too: one array object however often it is reached
        elif isinstance(value, IteratorValue) and (value.made_at is None or rebuild_spec(value) is not None):
            if sourced and (isinstance(value.owner, (DictValue, SetValue)) and value.owner.source is not None
                            or value.deque_of is not None and value.deque_of.source is not None):
                self._defer(value)  # NOTE [Dict iterators built after replay]
                return
            self._store_preloaded(value)  # one iterator object: `it` and the loop's iterator advance together
        elif type(value) is TupleValue or isinstance(value, (BoundMethodValue, TensorMethodValue)) \
                or isinstance(value, BuiltinValue) and getattr(value, "bound_owner", None) is not None:
            # one tuple object: `u[0] is t`, `t.count.__self__ is t` after a break; one bound method object:
            # `m = o.f; m2 = m` is `m is m2` after it (each rebuild read `o.f` again, a new object each time;
            # `e = s.upper; e2 = e` of a str from outside too)
            self._store_preloaded(value)

    def _preload_cells(self, value: UserFunctionValue) -> None:
        """NOTE [Cells shared by rebuilt closures]: functions made while tracing over the same variable of
        the frame (`def get(): return k` and `def bump(): nonlocal k; k += 1`, returned together) share one
        cell in eager, so `bump()` is seen by `get()`. Each was rebuilt with a new cell of its own, so
        `get()` kept answering the traced value (red team 15). A cell made while tracing is built once, into
        a local, and every rebuilt function that closes over it gets that cell (`_new_function`)."""
        for cell in value.closure or ():
            if hasattr(cell, "cell") or id(cell) in self.preloaded:
                continue  # a real cell (shared as itself), or already built
            # a cell not set yet (or deleted: NOTE [Deleting a closure variable]) is built empty: NOTE [Closures
            # over cells not set yet] in break_callees.py
            self._call_const(new_cell, [] if cell.contents is None else [cell.contents])
            name = f"___pre{len(self.preloaded)}"
            self.cg.store_fast(name)
            self.preloaded[id(cell)] = name
            self._kept.append(cell)

    def _defer(self, value: Value) -> None:
        self.after_replay.append(value)
        self._deferred.add(id(value))
        self._kept.append(value)

    def _store_preloaded(self, value: Value) -> None:
        self._deferred.discard(id(value))
        self.emit(value)
        name = f"___pre{len(self.preloaded)}"
        self.cg.store_fast(name)
        self.preloaded[id(value)] = name
        self._kept.append(value)

    def emit(self, value: Value) -> None:
        cg = self.cg
        if id(value) in self.preloaded:
            cg.load_fast(self.preloaded[id(value)])
            return
        if id(value) in self._deferred:  # NOTE [Dict iterators built after replay]: one object however reached
            self._store_preloaded(value)
            cg.load_fast(self.preloaded[id(value)])
            return
        if isinstance(value, LazyArg):  # an argument never read while tracing (e.g. a cell's contents)
            cg.load_fast(value.name)
            return
        if isinstance(value, SymNodeValue) and id(value.node) in self.output_index:  # NOTE [Symbolic shapes]
            self._graph_output(self.output_index[id(value.node)])
        elif isinstance(value, TensorValue):
            index = self.output_index.get(id(value.node))
            if index is None:
                value.source.reload(cg)
            else:
                self._graph_output(index)
        elif value.source is not None and not isinstance(value, (ListValue, DictValue)):
            value.source.reload(cg)
        elif isinstance(value, SymRangeValue):  # NOTE [Loops over symbolic ranges] in python_loops.py
            self._call_const(range, [*value.bounds, ConstantValue(value.step)])
        elif isinstance(value, ConstantValue):
            self._constant(value)
        elif isinstance(value, DictViewValue) and viewed_object(value) is not None:
            obj, owner = viewed_object(value)  # NOTE [Views of dict objects from outside]
            self._call_const(view_of_object, [obj, ConstantValue(owner is not dict), ConstantValue(value.kind)])
        elif isinstance(value, DictViewValue):  # NOTE [Live dict views]
            self._call_const(view_of, [value.mapping, ConstantValue(value.kind)])
        elif isinstance(value, SequenceValue):
            self._sequence(value)
        elif isinstance(value, DictValue):
            self._dict(value)
        elif isinstance(value, NewObjectValue):
            self._new_object(value)
        elif isinstance(value, SetValue):
            self._set(value)
        else:
            self._other(value)

    def _graph_output(self, index: int) -> None:
        self.cg.load_fast(self.out_local)
        self.cg.load_const(index)
        self.cg.subscr()

    def _constant(self, value: ConstantValue) -> None:
        cg = self.cg
        if isinstance(value.value, BaseException):
            fn, constants, values = exception_rebuild(value)  # NOTE [Exceptions made while tracing]
            cg.push_null()
            cg.load_const(fn)
            for constant in constants:
                cg.load_const(constant)
            for item in values:
                self.emit(item)
            cg.call(len(constants) + len(values))
        elif type(value.value) in GETTERS:  # NOTE [Operator getters]
            cg.push_null()
            cg.load_const(type(value.value))
            for arg in getter_args(value.value):
                cg.load_const(arg)
            cg.call(len(getter_args(value.value)))
        else:
            from .shapes import concrete  # a size the trace kept symbolic is specialised here (guarded)
            cg.load_const(concrete(value.value))

    def _set(self, value: SetValue) -> None:
        if value.frozen is None and not value.is_constant():  # NOTE [Sets of tensors]
            from .identity_keys import identity_set_elements
            self._call_const(value.cls, [TupleValue(identity_set_elements(value))])
            return
        fn, args = set_rebuild(value, self.output)  # NOTE [Set tables rebuilt exactly]: a new set each call
        if fn is None:
            self.cg.load_const(args[0])  # a frozenset no call reproduces, kept by the code constructor
            return
        self._call_const(fn, [ConstantValue(a) for a in args])

    def _other(self, value: Value) -> None:
        """Methods, functions, iterators, objects, partials and the other values `emit` rebuilds."""
        cg = self.cg
        if isinstance(value, BoundMethodValue):
            raw = value.func.obj if isinstance(value.func, BuiltinValue) else None
            binder = bound_c_method if isinstance(raw, _C_METHOD_DESCRIPTORS) else types.MethodType
            self._call_const(binder, [value.func, value.self_value])
        elif isinstance(value, TensorMethodValue):
            self.emit(value.tensor)
            cg.load_attr(value.name)
        elif _numpy_value(value):  # NOTE [NumPy as torch]
            sys.modules[_NUMPY_SUPPORT].rebuild(self, value)
        elif isinstance(value, IteratorValue):
            self._iterator(value)
        elif getattr(value, "made_in_trace", False):  # NOTE [Modules made while tracing]
            raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"a module made in the compiled region ({value.describe()}) "
                                                           "escapes it")
        elif isinstance(value, BuiltinValue) and getattr(value, "bound_owner", None) is not None:
            owner = value.bound_owner  # `k.__mul__` of a value from outside: bound to the caller's object
            self._call_const(bound_c_method, [BuiltinValue(getattr(type(owner.value), value.obj.__name__)), owner])
        elif isinstance(value, (BuiltinValue, ClassValue, PyModuleValue, ObjectValue)):
            cg.load_const(value.obj)
        elif isinstance(value, UserFunctionValue) and value.closure is None and value.defaults is None:
            cg.load_const(value.fn)
        elif isinstance(value, UserFunctionValue):
            self._new_function(value)
        elif rebuildable_manager(value):  # a torch state manager made but not entered before a break
            self._call_const(grad_mode_manager, [ConstantValue(value.cls), ConstantValue(value.mode),
                                                 ConstantValue(getattr(value, "mode_before_init", None)),
                                                 ConstantValue(getattr(value, "entered_prev", None))])
        elif _unentered_generator_cm(value):  # returned by a frame (contextlib's `helper`), not entered
            self._call_const(contextlib._GeneratorContextManager,
                             [value.func, TupleValue(list(value.args)), DictValue(dict(value.kwargs))])
        elif isinstance(value, PartialValue):  # NOTE [Partials across breaks]
            check_rebuildable(value)
            self._call_const(make_partial, [value.func, TupleValue(list(value.args)), DictValue(dict(value.kwargs))])
        elif isinstance(value, SymFloatValue) and _replayable_float(value):
            self._float_expression(value.node, {root.node: root for root in (*value.roots, *value.int_roots)})
        elif hasattr(type(value), "rebuild_call"):  # e.g. NOTE [Weak references made in the trace]
            self._call_const(*value.rebuild_call())
        elif hasattr(type(value), "escape_break"):  # a value with no run-time object (NOTE [vjp functions])
            raise value.escape_break()
        elif value.is_constant():
            cg.load_const(value.as_constant())
        else:
            raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"cannot rebuild {value.describe()} after the graph")

    def _iterator(self, value: IteratorValue) -> None:
        if value.made_at is not None:
            spec = rebuild_spec(value)  # NOTE [Combinators rebuilt at breaks]
            if spec is None:
                raise escaped_generator(value)
            check_claims(value)  # rebuilt at its position: NOTE [Iterators claimed by a run ahead]
            self._call_const(combinator_at, [spec])
            return
        position_read(value)  # NOTE [Lent iterators], [Iterators claimed by a run ahead]
        if value.deque_of is not None:  # NOTE [Deque iterators]: CPython's own, or one that raises
            if value.deque_mutated():
                self._call_const(mutated_deque_iterator, [])
            else:
                self._call_const(deque_iterator_at, [value.deque_of, ConstantValue(value.index)])
        elif value.walk is not None:  # NOTE [Lazy module walks] in modules.py
            value.check()  # a mutation since it was made: a break where it was made
            module, name, options = value.walk
            drawn = len(value.items) + 1 if value.exhausted else value.index
            self._call_const(walk_at, [module, ConstantValue(name), ConstantValue(options), ConstantValue(drawn)])
        elif value.iter_type is not _LIST_ITERATOR and value.owner is None and not value.looped:
            self._own_type_iterator(value)  # NOTE [Iterators of their own type] in values/containers.py
        elif value.exhausted:
            self._call_const(exhausted_list_iterator, [])
        elif getattr(value.owner, "list_object", None) is not None:  # NOTE [List subclasses]: list's own iterator
            from .list_objects import list_object_iterator_at
            self._call_const(list_object_iterator_at, [value.owner.list_object, ConstantValue(value.index)])
        elif isinstance(value.owner, ListValue):
            self._call_const(list_iterator_at, [value.owner, ConstantValue(value.index)])  # NOTE [Live iteration]
        elif value.owner is not None:
            changed = value.changed()  # a dict or set iterator: CPython's own, or one that raises
            if not changed and list(value.owner.items) != value.keys:
                raise Unsupported(BreakKind.SIDE_EFFECT, "the keys of a dict or set changed while iterating over it")
            where = [ConstantValue(value.view), ConstantValue(value.reverse)] if value.view or value.reverse else []
            self._call_const(failing_iterator if changed else keys_iterator_at,
                             [ConstantValue(changed)] if changed else [value.owner, ConstantValue(value.index), *where])
        else:
            self._call_const(iter, [ListValue(value.items[value.index:])])

    def _own_type_iterator(self, value: IteratorValue) -> None:
        index = len(value.items) if value.exhausted else value.index
        constant = value.constant
        if type(constant) is range:
            self._call_const(range_iterator_at, [ConstantValue(c) for c in (constant.start, constant.stop,
                                                                               constant.step, index)])
        elif constant is not None and type(constant) is not tuple:  # str, bytes: the whole, advanced
            self._call_const(keys_iterator_at, [ConstantValue(constant), ConstantValue(index)])
        elif value.iter_type in (zip, enumerate, map, filter) or value.iter_type in ITERTOOLS_ROWS:
            # NOTE [Iterators of their own type], NOTE [itertools objects of their own type]
            self._call_const(rows_as, [ConstantValue(value.iter_type), TupleValue(value.items[index:])])
        elif value.iter_type in (itertools.product, itertools.combinations, itertools.permutations):
            e = Unsupported(BreakKind.UNSUPPORTED_VALUE, f"an itertools.{value.iter_type.__name__} object "
                            "outlives the graph (NOTE [itertools objects of their own type])")
            e.root_index = getattr(value, "escape_at", None)
            raise e
        elif value.iter_type is _CALLABLE_ITERATOR:  # NOTE [Regular expressions with Python callbacks]
            self._call_const(callable_iterator_of, [TupleValue(value.items[index:])])
        elif value.iter_type is reversed:  # reversed(a tuple): over what is left, in the tuple's order
            self._call_const(reversed, [TupleValue(value.items[index:][::-1])])
        else:
            self._call_const(iter, [TupleValue(value.items[index:])])

    # NOTE [Closures rebuilt over cells found through sources]: a closure made in the trace over a real cell
    # that the trace found through a source (a cell passed to a resume function, `L['i']`: NOTE [Cells passed
    # to resume functions]; a cell of a closure guarded by its code, `L['f'].__closure__[0]`) is rebuilt over
    # the cell that source names on this call. Rebuilt over the trace's cell object (a constant), a resume
    # function of `for i in ...: def g(a): return a + i * k; out.append(g(_opaque(x)))` made every later
    # call's `g` read the first call's `i` (eager [x, x + k, x + 2k], framejit [x, x + 2k, x + 2k] from the
    # second call on: the old cell held the last value of the first call's loop).
    def _new_function(self, value: UserFunctionValue) -> None:
        """A function made inside the compiled region (a closure escaping as a return value): rebuilt
        with fresh cells holding the traced contents, sharing the cells that exist outside."""
        cells = []
        for cell in value.closure or ():
            if hasattr(cell, "cell"):  # a real cell of an enclosing function (translator.RealCell); one found
                # through a source (NOTE [Closures rebuilt over cells found through sources]) is reloaded from it
                cells.append(ConstantValue(cell.cell, getattr(cell, "source", None)))
            elif id(cell) in self.preloaded:  # one cell for every function sharing it (NOTE above)
                cells.append(cell)
            elif cell.contents is None and getattr(cell, "deleted", False):
                cells.append(TupleValue([]))  # () means: a new empty cell (NOTE [Deleting a closure variable])
            elif cell.contents is None:
                raise Unsupported(BreakKind.UNSUPPORTED_VALUE, "a closure over a variable that is not set yet")
            else:
                cells.append(TupleValue([cell.contents]))  # (contents,) means: make a new cell
        # NOTE [Globals of a rebuilt closure]: a function made by an *inlined* callee from another module
        # (`torch.vmap`'s `wrapped`, a user factory `moda.make(k)` returning `inner`) must see that module's
        # globals, not the compiled frame's: rebuilt with the caller's, `inner` raised NameError for every
        # global it reads. The dict is passed as a constant (persisted by a ("globals", module) locator)
        # when it is not the globals of the function the code runs in.
        f_globals = value.fn.__globals__
        extra = [] if f_globals is self.frame_globals else [ConstantValue(f_globals)]
        attrs = _stored_function_attrs(value)  # NOTE [Attributes of functions made while tracing]
        if attrs:
            self.cg.push_null()
            self.cg.load_const(set_function_attrs)
        self._call_const(make_closure, [ConstantValue(value.fn.__code__), ConstantValue(value.fn.__name__),
                                        TupleValue(list(value.defaults or ())),
                                        DictValue(dict(value.kwdefaults or {})), TupleValue(cells)] + extra)
        if attrs:
            self.emit(DictValue(attrs))
            self.cg.call(2)

    # NOTE [Computed floats rebuilt in Python]: a float computed from dynamic float inputs (NOTE [Dynamic
    # floats]: `group["lr"] * gamma` in an LR scheduler) that escapes the graph (stored back into a
    # param_group, returned, put in a list) was emitted as the constant it had while tracing, which
    # specialised its inputs: every new learning rate recompiled the frame. Its node is a small expression
    # of Python float operations (operator and math functions) over float inputs and number constants, so
    # it is rebuilt by running the same operations on the same floats in the transformed function: the
    # value eager computes, bit for bit, with the inputs guarded by type only. It is preloaded (NOTE
    # [Reload before replay]): its inputs are read from their sources before side effects replace them
    # (`param_group["lr"] = lr * gamma` stores into the very item `lr` was read from). One that raises for a
    # later value (`1.0 / v` at 0.0) reruns the call eagerly: NOTE [Rebuilt floats that raise].
    def _float_expression(self, node: Any, inputs: dict) -> None:
        import torch.fx
        if node in inputs:
            self.emit(inputs[node])
            return
        self.cg.push_null()
        self.cg.load_const(node.target)
        for arg in node.args:
            if isinstance(arg, torch.fx.Node):
                self._float_expression(arg, inputs)
            else:
                self.cg.load_const(arg)
        self.cg.call(len(node.args))

    def _call_const(self, fn: Any, args: list[Value]) -> None:
        self.cg.push_null()
        self.cg.load_const(fn)
        for arg in args:
            self.emit(arg)
        self.cg.call(len(args))

    def _sequence(self, value: SequenceValue) -> None:
        cg = self.cg
        if value.source is not None and isinstance(value, ListValue):
            value.source.reload(cg)  # the caller's own list object (never mutated: see ListValue)
            return
        if value.cls in (tuple, list):
            for item in value.items:
                self.emit(item)
            cg.build("BUILD_TUPLE" if value.cls is tuple else "BUILD_LIST", len(value.items))
            return
        cg.push_null()
        named = hasattr(value.cls, "_fields")  # the tuple itself, not a call of the class's own __new__
        cg.load_const(namedtuple_of if named else value.cls)  # (NOTE [Namedtuples made by their own __new__])
        if named:
            cg.load_const(value.cls)
        for item in value.items:
            self.emit(item)
        if named:
            cg.call(len(value.items) + 1)
        elif getattr(value, "maxlen", None) is not None:  # NOTE [Deques with a maxlen]
            cg.build("BUILD_TUPLE", len(value.items))
            cg.load_const(value.maxlen)
            cg.call(2)
        else:
            cg.build("BUILD_TUPLE", len(value.items))
            cg.call(1)

    def _dict(self, value: DictValue) -> None:
        cg = self.cg
        if value.source is not None:
            value.source.reload(cg)
            return
        if isinstance(value, DefaultDictValue):
            factory = value.factory if value.factory is not None else ConstantValue(None)
            self._call_const(make_defaultdict, [factory, DictValue(value.items)])
            return
        if type(value.items) is collections.OrderedDict and list(value.items) != list(dict.keys(value.items)):
            linked = TupleValue([key_value(k) for k in value.items])  # NOTE [Reordered OrderedDicts made ...]
            underlying = DictValue(dict(dict.items(value.items)))  # in mappings.py
            self._call_const(make_reordered, [ConstantValue(value.cls), underlying, linked])
            return
        if value.cls is not dict:
            cg.push_null()
            cg.load_const(value.cls)
        for key, item in value.items.items():
            self.emit(key_value(key))  # a constant, or the tensor an IdentityKey stands for
            self.emit(item)
        cg.build("BUILD_MAP", len(value.items))
        if value.cls is not dict:
            cg.call(1)

    def _new_object(self, value: NewObjectValue) -> None:
        cg = self.cg
        cg.push_null()
        cg.load_const(new_object)
        cg.load_const(value.cls)
        self._dict(DictValue(value.attrs))
        cg.call(2)


_NUMPY_SUPPORT = "framejit.capture.numpy_support"


def _numpy_value(value: Value) -> bool:
    """An ndarray value (NOTE [NumPy as torch]); numpy_support is imported once such values exist."""
    module = sys.modules.get(_NUMPY_SUPPORT)
    return module is not None and isinstance(value, (module.NdarrayValue, module.NdarrayMethodValue))


def _unentered_generator_cm(value: Any) -> bool:
    """A contextlib manager made while tracing whose generator has not started (NOTE [Generator context
    managers]): rebuilt as `_GeneratorContextManager(func, args, kwds)`, which runs none of its code."""
    from .generator_ctx import GenCtxValue
    return isinstance(value, GenCtxValue) and value.frame is None and not value.done


def _replayable_float(value: Any) -> bool:
    """A computed float whose node is an expression of plain calls over its input floats' placeholders
    (and its int roots': NOTE [Symbolic ints inside dynamic floats]) and number constants (NOTE [Computed
    floats rebuilt in Python])."""
    import torch.fx
    from .float_parts import plain_target
    if value.source is not None or not value.roots or value.roots == (value,):
        return False
    from .sym_arith import float_inputs_unchanged  # NOTE [Sizes beside dynamic floats]
    if not float_inputs_unchanged(value.roots):
        return False
    inputs = {root.node for root in (*value.roots, *value.int_roots)}
    pending = [value.node]
    while pending:
        node = pending.pop()
        if node in inputs:
            continue
        if node.op != "call_function" or node.kwargs or not plain_target(node.target):
            return False
        for arg in node.args:
            if isinstance(arg, torch.fx.Node):
                pending.append(arg)
            elif type(arg) not in (int, float, bool):
                return False
    return True


def _children(value: Value) -> list:
    if isinstance(value, SymFloatValue) and _replayable_float(value):
        return [*value.roots, *value.int_roots]  # read before side effects (NOTE [Computed floats rebuilt in Python])
    if isinstance(value, DictViewValue):
        return [viewed_object(value)[0] if viewed_object(value) is not None else value.mapping]
    if isinstance(value, DefaultDictValue) and value.factory is not None:
        return [*value.items.values(), value.factory]
    if isinstance(value, SequenceValue):
        return list(value.items)
    if isinstance(value, DictValue):
        return [key_value(k) for k in value.items if isinstance(k, IdentityKey)] + list(value.items.values())
    if isinstance(value, NewObjectValue):
        return list(value.attrs.values())
    if isinstance(value, BoundMethodValue):
        return [value.func, value.self_value]
    if isinstance(value, TensorMethodValue):
        return [value.tensor]
    if isinstance(value, ConstantValue) and getattr(value, "context", None) is not None:
        return [value.context]  # NOTE [Contexts of exceptions raised while handling]: built first
    if _numpy_value(value):  # NOTE [NumPy as torch]
        return sys.modules[_NUMPY_SUPPORT].children(value)
    if isinstance(value, IteratorValue) and spec_children(value):
        return spec_children(value)  # NOTE [Combinators rebuilt at breaks]
    if isinstance(value, IteratorValue) and value.deque_of is not None:
        return [value.deque_of]  # NOTE [Deque iterators]
    if isinstance(value, IteratorValue):
        return [value.owner] if value.owner is not None else value.items[value.index:]
    if isinstance(value, UserFunctionValue):
        return [c.contents for c in value.closure or () if getattr(c, "contents", None) is not None] + \
            [*(value.defaults or ()), *(value.kwdefaults or {}).values(), *value.attr_values()]
    if isinstance(value, PartialValue):
        return partial_parts(value)
    if _unentered_generator_cm(value):  # its arguments are the frame's objects (review revX H2)
        return [value.func, *value.args, *value.kwargs.values()]
    if isinstance(value, SetValue):
        return [key_value(k) for k in value.items if not isinstance(key_value(k), ConstantValue)]
    if isinstance(value, SymRangeValue):
        return list(value.bounds)
    if hasattr(type(value), "rebuild_call"):
        return list(value.rebuild_call()[1])
    return []


@dataclasses.dataclass
class FunctionShape:
    """The signature-related parts of the original code object, copied onto generated code."""

    argcount: int
    posonlyargcount: int
    kwonlyargcount: int
    flags: int
    argnames: tuple[str, ...]
    name: str
    qualname: str
    filename: str
    firstlineno: int

    @classmethod
    def of(cls, code: types.CodeType) -> "FunctionShape":
        nargs = code.co_argcount + code.co_kwonlyargcount
        nargs += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
        return cls(code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
                   code.co_flags & (0x04 | 0x08), code.co_varnames[:nargs], code.co_name,
                   code.co_qualname, code.co_filename, code.co_firstlineno)

    def params_source(self) -> str:
        """The parameter list as source text, e.g. `x, y, /, *args, k, **kw` (for guard functions); a
        parameter that is not an identifier (a comprehension's `.0`) is renamed as guard expressions name
        it (NOTE [Locals that are not identifiers] in sources.py)."""
        names = [safe_local(name) for name in self.argnames]
        pos = names[:self.argcount]
        parts = list(pos)
        if self.posonlyargcount:
            parts.insert(self.posonlyargcount, "/")
        rest = names[self.argcount:]
        kwonly = rest[:self.kwonlyargcount]
        rest = rest[self.kwonlyargcount:]
        if self.flags & 0x04:
            parts.append("*" + rest.pop(0))
        elif kwonly:
            parts.append("*")
        parts += kwonly
        if self.flags & 0x08:
            parts.append("**" + rest.pop(0))
        return ", ".join(parts)


def frame_signature(fn: types.FunctionType):
    """The signature CPython binds a call of `fn` with: its own code's parameters and defaults.

    `inspect.signature(fn)` is not that: it follows `__wrapped__` (so a `functools.wraps` wrapper taking
    `(*args, **kwargs)` would be described by the wrapped function's parameters) and honours a
    `__signature__` attribute. Binding with either would make the generated code read locals the frame
    does not have. A bare copy of the function carries neither."""
    import inspect
    bare = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    bare.__kwdefaults__ = fn.__kwdefaults__
    return inspect.signature(bare, follow_wrapped=False)


def make_function(shape: FunctionShape, body: Codegen, f_globals: dict, defaults: tuple | None,
                  kwdefaults: dict | None, suffix: str = "framejit") -> types.FunctionType:
    bc = bytecode.Bytecode()
    bc.argcount = shape.argcount
    bc.posonlyargcount = shape.posonlyargcount
    bc.kwonlyargcount = shape.kwonlyargcount
    bc.argnames = list(shape.argnames)
    bc.name = shape.name
    bc.qualname = f"{shape.qualname}.<{suffix}>"
    bc.filename = shape.filename
    bc.first_lineno = shape.firstlineno
    bc.flags = bytecode.CompilerFlags.OPTIMIZED | bytecode.CompilerFlags.NEWLOCALS | shape.flags
    bc.append(Instr("RESUME", 0))
    bc.extend(lifetimes.expand_release(temporaries_cleared(with_prologue(body), shape.argnames), shape.argnames))
    code = _assemble(bc, body.graph_call, clean_spans(body, shape.argnames))
    fn = types.FunctionType(code, f_globals, shape.name, defaults)
    fn.__kwdefaults__ = kwdefaults
    return fn


# NOTE [Graph call span]: a graph that raises at run time may rerun its frame eagerly (NOTE [Graph failures
# rerun eagerly] in convert.py) when the exception came from the graph's own CALL. Codegen.call_graph
# remembers that instruction when it writes it; make_function assembles the code itself and records the
# byte offsets [CALL, next instruction) (a traceback's tb_lasti may point into the CALL's inline caches),
# keyed by the code object's id while it lives (its constants, a globals dict, make it unhashable).
_GRAPH_CALL_SPANS: dict[int, tuple[int, int]] = {}


def graph_call_span(code: types.CodeType) -> tuple[int, int]:
    """The offsets of the graph call in a transformed function's code ((-1, -1): none)."""
    return _GRAPH_CALL_SPANS.get(id(code), (-1, -1))


# NOTE [One flow analysis per assembly]: `bc.to_code()` builds the control-flow graph once (stack size and
# exception-table depths) and assembles that graph's bytecode. The concrete instructions are needed here as well
# (the graph call's offsets), so the same steps are taken here and the concrete bytecode kept: asking the
# library for the stack size, then for the concrete bytecode, then for its code built the graph three times
# and converted the concrete bytecode back to abstract and again to concrete. The code objects are the same
# (compared field by field, nested code included, at all 1,854 assemblies of 9 capture, guard, frame-cache and
# HF test files on 3.11, 3.12 and 3.13); make_function takes about half the time.
def _assemble(bc: bytecode.Bytecode, graph_call: Instr | None, float_spans: list) -> types.CodeType:
    if graph_call is None and not float_spans:
        return bc.to_code()
    cfg = bytecode.ControlFlowGraph.from_bytecode(bc)
    stacksize = cfg.compute_stacksize(compute_exception_stack_depths=True)
    concrete = cfg.to_bytecode().to_concrete_bytecode(compute_exception_stack_depths=False)
    code = concrete.to_code(stacksize=stacksize, compute_exception_stack_depths=False)
    spans = byte_spans(bc, concrete, [(graph_call, graph_call)] * (graph_call is not None) + float_spans)
    if graph_call is not None:
        _GRAPH_CALL_SPANS[id(code)] = spans.pop(0) or (-1, -1)
        weakref.finalize(code, _GRAPH_CALL_SPANS.pop, id(code), None)
    note_spans(code, spans)  # NOTE [Rebuilt floats that raise]
    return code


__all__ = ["Codegen", "FunctionShape", "Reconstructor", "frame_signature", "graph_call_span", "make_function"]
