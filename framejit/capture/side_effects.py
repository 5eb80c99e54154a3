"""Side effects recorded while tracing and replayed after the graph.

While tracing, a mutation of state that outlives the frame is applied to the abstract values (so later
reads inside the trace see it) and recorded here; the transformed function replays the final state
after the graph ran, so the program state after a compiled call equals the state after an eager call:
- lists, dicts and sets that came from outside (they have a Source): `lst[:] = [...]`,
  `d.clear(); d.update(...)`, `s.clear(); s.update(...)` (the caller's objects keep their identity);
- attribute stores on objects and modules from outside: `setattr(obj, name, value)`;
- global stores: `module_globals[name] = value`; stores to free variables: `cell.cell_contents = value`.
In-place tensor ops on inputs are not recorded here: they stay in the graph, and every backend keeps
input mutations (functionalisation writes them back).

NOTE [Mutation log]: a container from outside is replayed as the method calls the traced code made on
it (`lst.append(v)`, `d[k] = v`, `d.pop(k)`, ...), in program order, when every mutation of it is such a
call (`record_op` names each one); otherwise its final contents are assigned as above. Replaying the calls
is what eager does, step for step: another thread's append made while the graph ran is kept (assigning a
final state computed from an earlier read would overwrite it). Mutations are keyed by the abstract value,
and an object reached through two sources is one value (NOTE [Objects by identity] in graph.py), so each
object's mutations are recorded and replayed once.

A list, dict or set from outside is read only as far as the trace uses it (NOTE [Lists from outside] in
values/outside.py): its logged calls are replayed on the live object without the trace having read it.

Invariant: containers are replayed in the order of their first mutation (their calls in program order),
then attributes, globals and cells, each written once with its final value. Every value the replay needs
is computed before the first write.
"""
from __future__ import annotations

import collections
import copy

import operator
import types
from typing import Any

import torch

from .breaks import BreakKind, Unsupported
from .lookup import is_module_default
from .sources import AttrSource, GlobalSource
from .values import (ConstantValue, DictValue, ListValue, NNModuleValue, ObjectValue, SetValue, TensorValue,
                     TupleValue, UserFunctionValue, Value)


# NOTE [Stores under a dict the trace holds]: an object's `__dict__` (or a module's, or the frame's
# globals) wrapped as a dict value (`v = o.__dict__`, `vars(o)` before a break, `globals()`) is a snapshot
# of a live mapping; an attribute or global store recorded here would not show through it, so `v` would
# miss `o.b = 2` (eager's `len(v)` counts it). A store that CPython makes as `o.__dict__[name] = value`
# (an object whose class keeps object.__setattr__, or object.__setattr__ called past a custom one, and no
# data descriptor of that name: _check_plain_setattr) is made in the dict value too, as the live dict would
# show it (`_store_shows_through`); so is a store recorded before the dict was first wrapped
# (`apply_pending_attrs`, called by `_link_instance_dict` in values/builder.py). transformers' configs read
# their own `__dict__` on every attribute read (HeterogeneousConfigMixin.__getattribute__) and their loss
# functions store `config.problem_type`: every classification head's training step hit this (issue 11).
# Any other such store (an nn.Module's, whose __setattr__ may file the value elsewhere; a global under a
# held `globals()`) is a graph break: it runs in Python, and the dict is read again after it. A write
# through the dict already was a break (NOTE [Instance dicts as dicts]).


# NOTE [Effects before a failing graph] (graph_errors.py): int arithmetic that cannot raise at run time;
# a node of one of these is no "op" that makes later effects late
SAFE_INT_OPS = frozenset({operator.add, operator.sub, operator.mul, operator.neg, operator.iadd, operator.isub,
                          operator.imul, operator.pos})


# NOTE [Tensor ops that cannot fail at run time]: elementwise arithmetic whose arguments fake tracing
# already checked (shapes broadcast, dtypes cast, an in-place target neither overlapping itself nor its
# arguments, autograd's leaf and inference checks) reads no data that decides whether it raises: no index,
# no division (integer division by zero raises), no linear-algebra check. Once traced it cannot raise at run
# time, so it makes no later effect "late" either: `x.add_(1); st.n += 1; x[idx]` makes `st.n += 1` when the
# index is out of range, as eager does (the in-place write forbids the eager rerun). Kept tight on purpose.
SAFE_TENSOR_FUNCTIONS = frozenset({operator.add, operator.sub, operator.mul, operator.neg, operator.pos,
                                   operator.iadd, operator.isub, operator.imul, torch.add, torch.sub, torch.mul,
                                   torch.neg, torch.clone, torch.sin, torch.cos, torch.exp, torch.tanh,
                                   torch.sigmoid, torch.relu, torch.abs})
SAFE_TENSOR_METHODS = frozenset({"add", "add_", "sub", "sub_", "mul", "mul_", "neg", "neg_", "clone", "zero_",
                                 "sin", "cos", "exp", "tanh", "sigmoid", "relu", "abs", "detach"})


def is_size_read(node: Any) -> bool:
    """`t.size(d)`, `t.size()`, `t.numel()`, `t.dim()` or an item of `t.size()`, `t` a graph input: a read of
    sizes fake tracing already made (the dim in range), which cannot raise at run time (NOTE [Effects before a
    failing graph]: no "op"; graph_errors computes it again from the input's source)."""
    if node.op == "call_function" and node.target is operator.getitem and not node.kwargs and \
            len(node.args) == 2 and type(node.args[1]) is int and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
        return is_size_read(node) and node.target == "size" and len(node.args) == 1
    return node.op == "call_method" and node.target in ("size", "numel", "dim") and not node.kwargs and \
        isinstance(node.args[0], torch.fx.Node) and node.args[0].op == "placeholder" and \
        all(type(a) is int for a in node.args[1:]) and len(node.args) <= (2 if node.target == "size" else 1)


def _is_op(node: Any) -> bool:
    if node.op == "call_function" and node.target in SAFE_INT_OPS and \
            not isinstance(node.meta.get("val"), torch.Tensor):
        return False
    if is_size_read(node):
        return False
    if (node.op == "call_function" and node.target in SAFE_TENSOR_FUNCTIONS or
            node.op == "call_method" and node.target in SAFE_TENSOR_METHODS) and "out" not in node.kwargs:
        return False  # NOTE [Tensor ops that cannot fail at run time]
    return node.op in ("call_function", "call_method", "call_module")


def _may_fail(node: Any) -> bool:
    """An op of the graph that may raise at run time: an `_is_op` whose success depends on tensor values (NOTE [Ops
    that fail on values] in failing_ops.py), but not an entry check (it raises before every op, and the call then
    reruns eagerly: NOTE [Entry checks])."""
    from .entry_checks import is_entry_check
    from .failing_ops import fails_on_values
    return _is_op(node) and not is_entry_check(node) and fails_on_values(node)


def _instance_dict(obj: Any) -> dict | None:
    from .codegen_runtime import real_instance_dict  # NOTE [Instance dicts read without user code]
    return real_instance_dict(obj)


class SideEffects:
    def __init__(self, by_object: dict | None = None) -> None:
        # the trace's objects by identity (OutputGraph._by_object, NOTE [Objects by identity]): read to
        # find a wrapped dict a store would change (NOTE [Stores under a dict the trace holds])
        self.by_object = by_object if by_object is not None else {}
        self.containers: dict[int, Value] = {}
        self.attrs: dict[tuple[int, str], tuple[Value, str, Value]] = {}
        self.raw_attrs: set[tuple[int, str]] = set()  # stores made by object.__setattr__ (NOTE [Custom __setattr__])
        self.deleted_attrs: set[tuple[int, str]] = set()  # NOTE [Attribute deletes on objects from outside]
        self.readded_attrs: set[tuple[int, str]] = set()  # NOTE [Stores after a delete of the same name]
        self.globals: dict[tuple[int, str], tuple[dict, str, Value]] = {}
        self.cells: dict[int, tuple[Any, Value]] = {}
        self.cell_sources: dict[int, Any] = {}  # where a cell is found at run time, when not by identity
        self.iterators: dict[int, Value] = {}  # list iterators from outside (NOTE [Iterators from outside])
        self.ops: list[list] = []  # [container, (method, args) or None], in program order (NOTE [Mutation log])
        # NOTE [Eager generators] (translator.py): `version` counts mutations of state any code may see
        # (outside containers and objects, globals, cells, in-place tensor ops); `touched` lists the
        # values made while tracing that were mutated, in order
        self.version = 0
        self.touched: list[Value] = []
        self.tensor_writes = 0  # the in-place tensor ops among `version`'s counts
        self.module_flag_stores = 0  # NOTE [Flag stores during module walks]: among `version`'s counts
        # NOTE [Finishing calls]: `(function, [objects from outside])` run after every other replayed
        # write, in the order recorded: a state change of an outside object that no store expresses
        # (an outside generator context manager the trace entered and left, generator_ctx.py)
        self.finishing_calls: list[tuple[Any, list[Value]]] = []
        # NOTE [Tensor hooks registered after the graph]: `(tensor, hook, id offset)` per `t.register_hook(fn)`
        self.tensor_hooks: list[tuple[Value, Value, int]] = []
        # NOTE [Item stores into dict objects from outside] (dict_objects.py): `(object, dict or OrderedDict,
        # key, value)` per `super().__setitem__(key, value)` on a dict-subclass instance from outside
        self.item_writes: list[tuple[Value, type, Any, Value]] = []
        self.written_dict_objects: set[int] = set()  # ids of their real objects
        # NOTE [Effects before a failing graph] (graph_errors.py): `graph` is the trace's fx graph (set by
        # OutputGraph); `late` holds the keys of the effects recorded after its first op
        self.graph: Any = None
        self.late: set = set()
        self._any_op = False
        self._targets: dict[int, str] = {}  # NOTE [Write targets bound before the writes], set by emit
        # NOTE [Effects between failing ops] (graph_errors.py): each effect key's count of ops that may fail
        # recorded before its first write (`first_marks`), from `_ordinals` (op node -> ordinal, in program order)
        self.first_marks: dict[tuple, int] = {}
        self._ordinals: dict = {}
        self._cursor: Any = None
        self.region_reads: Any = None  # NOTE [State the frame writes around a reentrant call] (reentrant_reads.py)

    def _mark(self, key: tuple) -> None:
        """An effect keyed `key` is recorded now: late when the graph already holds an op (a container's
        logged call: its index in `ops` joins `late` too, so the calls before the first op stay early)."""
        if not self._any_op and self.graph is not None:
            self._any_op = any(map(_is_op, self.graph.nodes))
        if self._any_op or self.graph is None:
            self.late.add(key)
            self.late.add(("op", len(self.ops)))
        count = self._count_failing_ops()
        self.first_marks.setdefault(key, count)
        if key[0] == "container":
            self.first_marks.setdefault(("op", len(self.ops)), count)

    def _count_failing_ops(self) -> int:
        """How many ops that may fail at run time the graph recorded so far (NOTE [Effects between failing ops]);
        each gets its ordinal once, walking on from the last node walked."""
        graph = self.graph
        if graph is None:
            return 0
        node = self._cursor if self._cursor is not None and not self._cursor._erased else graph._root
        node = node.next
        while node is not graph._root:
            if node not in self._ordinals and _may_fail(node):
                self._ordinals[node] = len(self._ordinals) + 1
            self._cursor, node = node, node.next
        return len(self._ordinals)

    def last_failing_op(self) -> float:
        """The ordinal of the final graph's last op that may fail at run time (NOTE [Effects between failing
        ops]): 0 for none, infinite for one recorded after the last effect. An effect keyed `k` has such an op
        after its first write when this exceeds `first_marks.get(k, 0)` (an effect never marked counts as
        written before every op)."""
        if self.graph is None:
            return 0
        return max((self._ordinals.get(node, float("inf")) for node in self.graph.nodes if _may_fail(node)), default=0)

    def __bool__(self) -> bool:
        return bool(self.containers or self.attrs or self.globals or self.cells or self.finishing_calls or
                    self.tensor_hooks or self.item_writes or self._moved_iterators())

    def _moved_iterators(self) -> list[Value]:
        """Outside list iterators the trace advanced or exhausted (NOTE [Iterators from outside])."""
        return [it for it in self.iterators.values() if it.index != it.start or it.exhausted]

    # ---- recording ----------------------------------------------------------------------------
    def mutate_container(self, value: Value) -> None:
        """`value` (a list or dict) is about to be mutated in place; `record_op` may then name the call."""
        if value.source is None:
            self.touched.append(value)
            return
        if getattr(value, "instance_dict_of", None) is not None:  # NOTE [Instance dicts as dicts] (builder.py)
            raise Unsupported(BreakKind.SIDE_EFFECT, f"a write into the instance dict of "
                                                     f"{value.instance_dict_of.describe()} through the dict")
        if isinstance(value, SetValue):
            value.order = None  # NOTE [Set order]: the order read at entry no longer holds
            value.reordered = True  # an OutsideSetValue read after this does not take the entry order either
        self.version += 1
        if _hook_dict(value):
            self.module_flag_stores += 1  # NOTE [Flag stores during module walks]
        if value.source is not None:
            self._mark(("container", id(value)))
            self.containers.setdefault(id(value), value)
            self.ops.append([value, None])

    def record_op(self, value: Value, method: str, args: tuple = ()) -> None:
        """The mutation just announced by `mutate_container(value)` is `value.method(*args)`."""
        if value.source is not None and self.ops and self.ops[-1][0] is value and self.ops[-1][1] is None:
            self.ops[-1][1] = (method, tuple(args))

    def bump(self, value: Value | None = None) -> None:
        """A mutation that is not replayed from here happened: an in-place tensor op, or a store into
        `value`, an object made while tracing (NOTE [Eager generators])."""
        if value is None:
            self.version += 1
            self.tensor_writes += 1  # NOTE [Custom autograd functions in the graph]: told apart there
        else:
            self.touched.append(value)

    def store_attr(self, obj: Value, name: str, value: Value, raw: bool = False) -> None:
        """`obj.name = value`; `raw`: `object.__setattr__(obj, name, value)`, past the class's own
        `__setattr__` (NOTE [Custom __setattr__] in getattribute.py), replayed the same way."""
        self.version += 1
        if isinstance(obj, UserFunctionValue) and not raw and self._store_function_attr(obj, name, value):
            return
        if not isinstance(obj, ObjectValue) or obj.source is None:
            raise Unsupported(BreakKind.SIDE_EFFECT, f"assignment to the attribute {name!r} of {obj.describe()}")
        _check_plain_setattr(obj, name, value, raw)
        if isinstance(obj, NNModuleValue) and self._held_dict(_buffer_table(obj.obj, name)) is not None:
            # NOTE [Stores under a buffer's name]
            raise Unsupported(BreakKind.SIDE_EFFECT, f"a store under the buffer name {name!r} while the trace "
                                                     "holds the module's _buffers")
        held = self._held_dict(_instance_dict(obj.obj))
        if held is not None and not self._store_shows_through(obj, held, raw, name, value):
            raise Unsupported(BreakKind.SIDE_EFFECT, f"a store to the attribute {name!r} of {obj.describe()}, "
                                                     "whose dict the trace holds as a dict")
        self._mark(("attr", id(obj.obj), name))
        if _module_flag_store(obj, name, value):
            self.module_flag_stores += 1
        self.attr_stores = getattr(self, "attr_stores", 0) + 1  # NOTE [Reentrant checkpoint in the graph]
        key = (id(obj.obj), name)
        if key in self.deleted_attrs:  # NOTE [Stores after a delete of the same name]
            del self.attrs[key]
            self.deleted_attrs.discard(key)
            self.readded_attrs.add(key)
        self.attrs[key] = (obj, name, value)
        (self.raw_attrs.add if raw else self.raw_attrs.discard)(key)
        if held is not None:
            _store_into(held, name, value)

    # NOTE [Attributes stored on functions from outside]: `f.calls += 1` on a function from outside (a counter
    # kept on the function itself) was a graph break, so such a frame was traced twice per specialisation (its
    # head and its resume function: 4 traces for 4 calls where stock torch.compile makes 2). A store of a name
    # that is no slot of FunctionType and no dunder goes into the function's plain `__dict__` in CPython
    # (functions have no `__setattr__` of their own), so it is recorded and replayed after the graph like an
    # object's attribute (`setattr` on the function reloaded from its source); later reads in the trace see
    # it (function_attrs.function_attr). A store into a `__dict__` the trace holds as a dict still breaks, and
    # so does a read of the function's `__dict__` (`f.__dict__`, `vars(f)`, functools.wraps copying it) while a
    # store on it is recorded (`stores_on`): the real dict lacks the store, and a write through it would be
    # replayed apart from the store (review revX HIGH-1).
    def _store_function_attr(self, fn: Value, name: str, value: Value) -> bool:
        real = fn.fn
        if (name.startswith("__") and name.endswith("__")) or \
                hasattr(types.FunctionType, name) or type(getattr(real, "__dict__", None)) is not dict or \
                self._held_dict(real.__dict__) is not None:
            return False
        if fn.source is None:  # NOTE [Attributes of functions reached without a source]: stored on the object
            from .function_attrs import function_source
            fn = copy.copy(fn)
            fn.source = function_source(fn)
        self._mark(("attr", id(real), name))
        self.attrs[(id(real), name)] = (fn, name, value)
        self.raw_attrs.discard((id(real), name))
        return True

    def _check_no_dict_value(self, d: Any, what: str) -> None:
        """NOTE [Stores under a dict the trace holds]."""
        seen = self.by_object.get(id(d)) if d is not None else None
        if seen is not None and seen[0] is d:
            raise Unsupported(BreakKind.SIDE_EFFECT, f"a store to {what}, whose dict the trace holds as a dict")

    def written_dict(self, d: Any) -> Value | None:
        """The value the trace holds for the dict `d` when the trace wrote into it (replayed after the graph)."""
        held = self._held_dict(d)
        return held if held is not None and id(held) in self.containers else None

    def _held_dict(self, d: Any) -> Value | None:
        """The value the trace holds for the dict `d` (by identity), if any."""
        seen = self.by_object.get(id(d)) if d is not None else None
        return seen[2] if seen is not None and seen[0] is d else None

    def _store_shows_through(self, obj: ObjectValue, held: Value, raw: bool, name: str, value: Value) -> bool:
        """Whether the store `obj.name = value` (already checked by _check_plain_setattr) is, in CPython,
        `obj.__dict__[name] = value` into the plain dict `held` models (NOTE [Stores under a dict the trace
        holds])."""
        if not (isinstance(held, DictValue) and held.cls is dict and id(held) not in self.containers):
            return False
        if isinstance(obj, NNModuleValue):
            return not raw and self._plain_module_store(obj.obj, name, value)
        return raw or getattr(type(obj.obj), "__setattr__", None) is object.__setattr__

    def _plain_module_store(self, module: torch.nn.Module, name: str, value: Value) -> bool:
        """NOTE [Module stores into a held instance dict]: nn.Module.__setattr__ (the class's own, checked by
        _check_plain_setattr, which also breaks on a Parameter or a module stored, and on a parameter's or
        submodule's name) files `value` in `_buffers` when the name is a buffer's (or the value a
        `torch.nn.Buffer`), and otherwise makes the plain `__dict__[name] = value`. So a store of a name that
        is in none of the module's tables, as the trace has them (the real table, or the trace's view of one
        it wrote: `register_buffer` before the store), of a value that is no tensor from outside (which
        could be marked a Buffer), shows through the instance dict the trace holds. transformers'
        dynamic-NTK RoPE stores `self.attention_scaling` and then calls `register_buffer`, which reads
        `"_buffers" not in self.__dict__`, and stores `self.max_seq_len_cached` after it: two breaks."""
        if isinstance(value, TensorValue) and value.source is not None:
            return False
        for table in ("_parameters", "_buffers", "_modules"):
            real = module.__dict__.get(table)
            if not isinstance(real, dict) or name in real:
                return False
            seen = self._held_dict(real)
            if seen is not None and (seen.has(name) if hasattr(seen, "has") else name in seen.items):
                return False
        return True

    def apply_pending_attrs(self, d: dict, value: Value) -> None:
        """`value` newly wraps the instance dict `d`: make the attribute stores recorded into it, in their
        order, or raise the break when one would not show through (NOTE [Stores under a dict the trace
        holds])."""
        for key, (obj, name, stored) in self.attrs.items():
            if isinstance(obj, ObjectValue) and _instance_dict(obj.obj) is d:  # (not a tensor's `.data`)
                deleted = key in self.deleted_attrs or key in self.readded_attrs
                if deleted and isinstance(obj, NNModuleValue) or \
                        not self._store_shows_through(obj, value, key in self.raw_attrs, name, stored):
                    raise Unsupported(BreakKind.SIDE_EFFECT, f"the instance dict of {obj.describe()} read while "
                                                             "stores to its attributes are not replayed yet")
                if deleted:  # NOTE [Attribute deletes on objects from outside]
                    value.items = {k: v for k, v in value.items.items() if k != name}
                if key not in self.deleted_attrs:
                    _store_into(value, name, stored)

    def check_dict_read(self, d: dict) -> None:
        """NOTE [Stores under a buffer's name]: the trace reads the real dict `d` (wraps it, or walks it):
        a break when it is a module's `_buffers` that a store recorded here (replayed after the graph) fills."""
        if any(isinstance(obj, NNModuleValue) and _buffer_table(obj.obj, name) is d
               for obj, name, _ in self.attrs.values()):
            raise Unsupported(BreakKind.SIDE_EFFECT, "reading a module's _buffers after a store into it, replayed "
                                                     "after the graph")

    def check_namespace_read(self, namespace: dict, name: str) -> None:
        """NOTE [Reads past writes through a namespace dict]: a global or module attribute read from the real
        `namespace` breaks when the trace wrote into it through a dict value (`globals()[name] = v`,
        `vars(mod).update(...)`), whose writes are replayed after the graph."""
        held = self._held_dict(namespace)
        if held is not None and id(held) in self.containers:
            raise Unsupported(BreakKind.SIDE_EFFECT, f"reading {name!r} from a namespace written through its "
                                                     "dict, replayed after the graph")

    def stores_on(self, obj: Any) -> bool:
        """Whether an attribute store on `obj` is recorded here (replayed after the graph)."""
        return any(key[0] == id(obj) for key in self.attrs)

    def delete_attr(self, obj: ObjectValue, name: str) -> None:
        """`del obj.name`, checked by attribute_deletes (NOTE [Attribute deletes on objects from outside]):
        replayed after the graph in the attribute writes' order; a later read of the name breaks."""
        self.version += 1
        key = (id(obj.obj), name)
        self._mark(("attr", *key))
        self.attrs[key] = (obj, name, ConstantValue(None))  # the value is not written (DELETE_ATTR)
        self.raw_attrs.discard(key)
        self.deleted_attrs.add(key)

    def attr(self, obj: Any, name: str) -> Value | None:
        if (id(obj), name) in self.deleted_attrs:
            raise Unsupported(BreakKind.SIDE_EFFECT, f"reading {name!r} after its delete, replayed after the graph")
        entry = self.attrs.get((id(obj), name))
        if entry is not None and self.region_reads is not None:
            self.region_reads.read("attrs", (id(obj), name), entry)
        return entry[2] if entry is not None else None

    def record_finishing_call(self, function: Any, objects: list[Value], walks_unchanged: bool = False) -> None:
        """Run `function(*objects)` after the replayed writes (NOTE [Finishing calls]); every object
        must have a Source (the replay reloads it from there) or be a constant."""
        if any(getattr(o, "source", None) is None and not isinstance(o, ConstantValue) for o in objects):
            raise Unsupported(BreakKind.SIDE_EFFECT, f"a finishing call of {getattr(function, '__name__', function)}")
        self.version += 1
        if walks_unchanged:  # NOTE [Flag stores during module walks]
            self.module_flag_stores += 1
        self.finishing_calls.append((function, list(objects)))

    def store_item(self, obj: ObjectValue, owner: type, key: Any, value: Value) -> None:
        """`owner.__setitem__(obj, key, value)` on a dict-subclass object from outside, made by the replay
        (NOTE [Item stores into dict objects from outside] in dict_objects.py)."""
        self.version += 1
        self._mark(("item", len(self.item_writes)))
        self.written_dict_objects.add(id(obj.obj))
        self.item_writes.append((obj, owner, key, value))

    def record_tensor_hook(self, tensor: Value, hook: Value, offset: int) -> None:
        """`tensor.register_hook(hook)`, its handle discarded: made after the graph (NOTE [Tensor hooks
        registered after the graph] in tensor_hooks.py)."""
        self.version += 1
        self._mark(("tensor_hook", len(self.tensor_hooks)))
        self.tensor_hooks.append((tensor, hook, offset))

    def store_global(self, f_globals: dict, name: str, value: Value) -> None:
        self._check_no_dict_value(f_globals, f"the global {name!r}")
        self.version += 1
        self._mark(("global", id(f_globals), name))
        self.globals[(id(f_globals), name)] = (f_globals, name, value)

    def global_value(self, f_globals: dict, name: str) -> Value | None:
        entry = self.globals.get((id(f_globals), name))
        if entry is not None and self.region_reads is not None:
            self.region_reads.read("globals", (id(f_globals), name), entry)
        return entry[2] if entry is not None else None

    def store_cell(self, cell: Any, value: Value, source: Any = None) -> None:
        """`cell.cell_contents = value`; with a `source`, the replay writes the cell that source names
        then (the cell of a closure guarded by its code: a later call may bring another closure)."""
        self.version += 1
        self._mark(("cell", id(cell)))
        self.cells[id(cell)] = (cell, value)
        if source is not None:
            self.cell_sources[id(cell)] = source

    def cell_value(self, cell: Any) -> Value | None:
        entry = self.cells.get(id(cell))
        if entry is not None and self.region_reads is not None:
            self.region_reads.read("cells", id(cell), entry)
        return entry[1] if entry is not None else None

    # ---- replay -------------------------------------------------------------------------------
    def _container_writes(self) -> list[tuple[Value, str | None, list[Value]]]:
        """(container, method, argument values) per replayed call, or (container, None, [final contents])
        for a container with a mutation that is not a known call (NOTE [Mutation log])."""
        logged = {id(c) for c in self.containers.values()}
        logged -= {id(c) for c, op in self.ops if op is None}
        writes = []
        for c in self.containers.values():
            if id(c) in logged:
                writes += [(c, op[0], list(op[1])) for value, op in self.ops if value is c]
            else:
                writes.append((c, None, [_final_contents(c)]))
        return writes

    def values(self) -> list[Value]:
        """Every value the replay rebuilds (graph outputs must include the tensors among them)."""
        result: list[Value] = [v for _, _, args in self._container_writes() for v in args]
        result += [v for _, _, v in self.attrs.values()]
        result += [v for _, _, v in self.globals.values()]
        result += [v for _, v in self.cells.values()]
        result += [v for tensor, hook, _ in self.tensor_hooks for v in (tensor, hook)]
        result += [v for _, _, _, v in self.item_writes]
        return result + self._made_targets()  # last: no write takes their temporaries (_bind_targets loads them)

    def _made_targets(self) -> list[Value]:
        """Tensors the graph made that an attribute store writes (NOTE [Attributes stored on tensors])."""
        return [obj for obj, _, _ in self.attrs.values() if obj.source is None and isinstance(obj, TensorValue)]

    def emit(self, rebuild) -> None:
        """Emit the replay with `rebuild` (a codegen.Reconstructor).

        Every new value is computed into a temporary first, and only then are the targets written: a
        value may be read from a container that the replay is about to change (e.g. `d["a"]` of a dict
        that is cleared and refilled). The writes then take the temporaries in the order `values()` made
        them."""
        cg = rebuild.cg
        temps = []
        for value in self.values():
            rebuild.emit(value)
            temps.append(f"___effect{len(temps)}")
            cg.store_fast(temps[-1])
        pending = iter(temps)
        self._targets = self._bind_targets(rebuild)
        self._emit_container_writes(cg, pending)
        self._emit_attribute_writes(cg, pending)
        self._emit_global_and_cell_writes(cg, pending)
        self._emit_hooks_and_item_writes(cg, pending)
        self._emit_iterator_moves(cg)
        self._emit_finishing_calls(cg)

    # NOTE [Write targets bound before the writes]: a write's target is reloaded from its source, a path from
    # the frame's entry state (`G['lst'][0]`). Reloaded when its own write comes, after the containers' writes,
    # the path may reach another object: `lst[0].calls += 1; lst[0] = f2` incremented f2, and so did
    # `box["o"].n += 1; box["o"] = o2` on o2 (review revX HIGH-2). Every target of a container, attribute or
    # item write, and every iterator moved, is loaded into a temporary before the first write, so each write
    # lands on the object the trace saw.
    def _bind_targets(self, rebuild) -> dict[int, str]:
        """A temporary per write target (by the identity of its value), loaded from its source (a tensor the
        graph made: its graph output)."""
        cg = rebuild.cg
        objects = [c if getattr(c, "list_object", None) is None else c.list_object
                   for c, _, _ in self._container_writes()]
        objects += [obj for obj, _, _ in self.attrs.values()] + [obj for obj, _, _, _ in self.item_writes]
        objects += self._moved_iterators()
        targets: dict[int, str] = {}
        for obj in objects:
            if id(obj) not in targets and getattr(obj, "source", None) is not None:
                targets[id(obj)] = f"___effect_target{len(targets)}"
                obj.source.reload(cg)
                cg.store_fast(targets[id(obj)])
        for obj in self._made_targets():
            if id(obj) not in targets:
                targets[id(obj)] = f"___effect_target{len(targets)}"
                rebuild.emit(obj)
                cg.store_fast(targets[id(obj)])
        return targets

    def _load_target(self, cg, obj: Value) -> None:
        """NOTE [Write targets bound before the writes]."""
        temp = self._targets.get(id(obj))
        if temp is None:
            obj.source.reload(cg)
        else:
            cg.load_fast(temp)

    def _emit_container_writes(self, cg, pending) -> None:
        for container, method, args in self._container_writes():
            arg_temps = [next(pending) for _ in args]
            if method is not None:
                _call_method(cg, self, container, method, arg_temps)
            elif isinstance(container, ListValue) and container.cls is collections.deque:
                _call_method(cg, self, container, "clear", [])  # NOTE [Deques from outside]: no slice assignment
                _call_method(cg, self, container, "extend", arg_temps)
            elif getattr(container, "list_object", None) is not None:  # NOTE [List subclasses]
                _call_method(cg, self, container, "__setitem__", [None, *arg_temps])
            elif isinstance(container, ListValue):
                cg.load_fast(arg_temps[0])
                self._load_target(cg, container)
                cg.load_const(slice(None))
                cg.emit("STORE_SUBSCR")
            else:
                _call_method(cg, self, container, "clear", [])
                _call_method(cg, self, container, "update", arg_temps)

    def _emit_attribute_writes(self, cg, pending) -> None:
        for key, (obj, name, _) in self.attrs.items():
            if key in self.deleted_attrs:  # NOTE [Attribute deletes on objects from outside]
                next(pending)
                self._load_target(cg, obj)
                cg.emit("DELETE_ATTR", name)
                continue
            if key in self.readded_attrs:  # NOTE [Stores after a delete of the same name]: then the store
                self._load_target(cg, obj)
                cg.emit("DELETE_ATTR", name)
            if key in self.raw_attrs:  # object.__setattr__(obj, name, value)
                cg.push_null()
                cg.load_const(object.__setattr__)
                self._load_target(cg, obj)
                cg.load_const(name)
                cg.load_fast(next(pending))
                cg.call(3)
                cg.emit("POP_TOP")
                continue
            cg.load_fast(next(pending))
            self._load_target(cg, obj)
            cg.emit("STORE_ATTR", name)

    def _emit_global_and_cell_writes(self, cg, pending) -> None:
        for f_globals, name, _ in self.globals.values():
            cg.load_fast(next(pending))
            cg.load_const(f_globals)
            cg.load_const(name)
            cg.emit("STORE_SUBSCR")
        for cell, _ in self.cells.values():
            cg.load_fast(next(pending))
            if id(cell) in self.cell_sources:
                self.cell_sources[id(cell)].reload(cg)
            else:
                cg.load_const(cell)
            cg.emit("STORE_ATTR", "cell_contents")

    def _emit_hooks_and_item_writes(self, cg, pending) -> None:
        from .codegen_runtime import register_tensor_hook
        for _, _, offset in self.tensor_hooks:  # NOTE [Tensor hooks registered after the graph]
            cg.push_null()
            cg.load_const(register_tensor_hook)
            cg.load_fast(next(pending))
            cg.load_fast(next(pending))
            cg.load_const(offset)
            cg.call(3)
            cg.emit("POP_TOP")
        for obj, owner, key, _ in self.item_writes:  # `OrderedDict.__setitem__(obj, key, value)`, as eager calls it
            cg.push_null()
            cg.load_const(owner)
            cg.load_attr("__setitem__")
            self._load_target(cg, obj)
            cg.load_const(key)
            cg.load_fast(next(pending))
            cg.call(3)
            cg.emit("POP_TOP")

    def _emit_iterator_moves(self, cg) -> None:
        """After the lists' own replay: the end an iterator is moved to is the list's final one."""
        from .codegen_runtime import advance_iterator, move_list_iterator, move_reverse_iterator
        from .values.containers import position_read
        for iterator in self._moved_iterators():
            position_read(iterator)  # NOTE [Lent iterators], [Iterators claimed by a run ahead]: eager's unknown
            reverse = iterator.reverse_from is not None  # NOTE [Reversed iterators from outside]
            own_type = iterator.owner is None and not reverse  # a tuple or range iterator: moved by steps
            cg.push_null()
            cg.load_const(advance_iterator if own_type else move_reverse_iterator if reverse else move_list_iterator)
            self._load_target(cg, iterator)
            cg.load_const(iterator.index - iterator.start if own_type else
                          iterator.reverse_from - iterator.index if reverse else iterator.index)
            cg.load_const(iterator.exhausted)
            cg.call(3)
            cg.emit("POP_TOP")

    def _emit_finishing_calls(self, cg) -> None:
        for function, objects in self.finishing_calls:  # NOTE [Finishing calls]
            cg.push_null()
            cg.load_const(function)
            for obj in objects:
                if obj.source is None:
                    cg.load_const(obj.as_constant())  # a constant argument (NOTE [Hooks registered in the trace])
                else:
                    obj.source.reload(cg)
            cg.call(len(objects))
            cg.emit("POP_TOP")

def _final_contents(c: Value) -> Value:
    """What a container's final state is assigned from (`lst[:] = ...`, `d.update(...)`, `s.update(...)`)."""
    if isinstance(c, ListValue):
        return ListValue(list(c.items))
    if isinstance(c, SetValue):
        from .values.mappings import key_value
        return TupleValue([key_value(k) for k in c.items])
    return DictValue(dict(c.items))


def _call_method(cg, effects: SideEffects, container: Value, method: str, arg_temps: list[str]) -> None:
    """`container.method(*args)`, its result dropped; `list.method(obj, *args)` for the contents of a list
    object (NOTE [List subclasses]: list's own method, not its class's; a None temp is `slice(None)`)."""
    cg.push_null()
    target = getattr(container, "list_object", None)
    if target is not None:
        cg.load_const(getattr(list, method))
        effects._load_target(cg, target)
    else:
        effects._load_target(cg, container)
        cg.load_attr(method)
    for temp in arg_temps:
        if temp is None:
            cg.load_const(slice(None))
        else:
            cg.load_fast(temp)
    cg.call(len(arg_temps) + (target is not None))
    cg.emit("POP_TOP")


# NOTE [Stores that raise]: a store recorded here is made when the replay runs, after the graph and outside
# the user's `try`; one that raises in eager raised there instead, after effects eager never made (red team
# 16: `o.z = 1` into an `object()` or a `__slots__` instance from outside without that slot, `m.b = 3` for
# a buffer `b`: the user's `except AttributeError/TypeError` never ran, later appends were made, and the
# call raised). Such stores break, so Python makes them where the program does (and raises its message).
def _check_plain_setattr(obj: ObjectValue, name: str, value: Value, raw: bool = False) -> None:
    """Only stores whose replay is a plain setattr with the same effect are recorded."""
    cls = type(obj.obj)
    setattr_impl = getattr(cls, "__setattr__", object.__setattr__)
    if not raw and setattr_impl is not object.__setattr__ and not is_module_default(setattr_impl, "__setattr__"):
        raise Unsupported(BreakKind.SIDE_EFFECT, f"{cls.__name__} defines __setattr__")
    for klass in cls.__mro__:
        attr = klass.__dict__.get(name)
        if attr is not None and hasattr(type(attr), "__set__"):
            raise Unsupported(BreakKind.SIDE_EFFECT, f"{cls.__name__}.{name} is a descriptor (property setter)")
    if getattr(cls, "__dictoffset__", 0) == 0:  # NOTE [Stores that raise]: no instance dict
        raise Unsupported(BreakKind.SIDE_EFFECT, f"a store of {name!r} into a {cls.__name__} without __dict__")
    if isinstance(obj, NNModuleValue):
        mod = obj.obj
        if name in (mod.__dict__.get("_buffers") or {}) and not issubclass(value.python_type(),
                                                                            (torch.Tensor, type(None))):
            # NOTE [Stores that raise]: Module.__setattr__ raises TypeError
            raise Unsupported(BreakKind.SIDE_EFFECT, f"a store of a {value.python_type().__name__} under the "
                                                     f"buffer name {name!r}")
        if name in mod._modules and isinstance(value, NNModuleValue) and value.obj is mod._modules[name]:
            return  # `self.sub = self.sub.to(dtype)` (NOTE [Module.to without a change]): replayed, a no-op
        if name in mod._parameters or name in mod._modules:
            raise Unsupported(BreakKind.SIDE_EFFECT, f"replacing the parameter or submodule {name!r} inside the graph")
        # NOTE [Registering stores into modules]: Module.__setattr__ registers a Parameter in `_parameters`
        # and a module in `_modules` (and takes the name out of `__dict__`); replayed after the graph, the
        # trace's own reads of `m._parameters`, `named_parameters()` and the like did not see it (red team
        # 15: `m.extra = nn.Parameter(...)` then `list(m._parameters)` missed 'extra'). Such stores break.
        # (A tensor stored under a buffer's name is filed in `_buffers` the same way: common in forward and
        # read back through the attribute, which the trace answers; NOTE [Stores under a buffer's name].)
        if isinstance(value, Value) and issubclass(value.python_type(), (torch.nn.Parameter, torch.nn.Module)):
            raise Unsupported(BreakKind.SIDE_EFFECT, f"registering {name!r} on a module inside the graph")


# NOTE [Stores under a buffer's name]: `m.b = t` for a buffer `b` is Module.__setattr__ filing `t` in
# `m._buffers` (None too); recorded and replayed after the graph, it showed through `m.b` (answered from
# the recorded store) but not through the real `_buffers` the trace read later in the same graph:
# `named_buffers()`, `buffers()`, `m._buffers['b']` gave the old buffer, `m.b = None` still counted it (red
# team 16). Such a read breaks (the store is replayed at the break, and the rest reads the real dict):
# `check_dict_read`, called where a dict from outside is first wrapped (values/builder.wrap: `m._buffers`,
# or the dict reached any other way) and where modules._walk iterates one; a store while the trace already
# holds `m._buffers` as a dict breaks at the store.
# NOTE [Reads past writes through a namespace dict]: `globals()['X'] = v`, `globals().update(X=v)`,
# `vars(mod)['Y'] = v` or `mod.__dict__.update(...)` write the dict value the trace holds for a module's
# namespace (replayed after the graph), while a later `X` or `mod.Y` in the same graph read the real
# namespace: the old value, on every call (red team 16). Such a read breaks (check_namespace_read, called
# from Translator.load_global, for the globals and the builtins, attributes._module_attr,
# function_attrs.function_attr for a function's own `__dict__`, IMPORT_NAME for `sys.modules`, the call
# of a partial from outside for its `keywords`, which the trace took when it wrapped the partial); at the
# break the writes are replayed. (The hook dicts are read as the trace left them instead: NOTE [Hooks
# registered in the trace].)
def _module_flag_store(obj: Value, name: str, value: Value) -> bool:
    """NOTE [Flag stores during module walks]: a Python constant stored on a module under a name that is not
    one of its registries nor an entry of them (`child.training = mode` in `Module.train`) leaves every
    `_modules`/`_parameters`/`_buffers` dict as it was, so it cannot change what a lazy module walk yields
    (NOTE [Lazy module walks] in modules.py); such stores do not stop a walk being drawn. Nor do writes into
    the hook dicts (`_forward_hooks`, ..., torch's global ones: `_hook_dict`) and the hook-id counter's
    finishing call (NOTE [Hooks registered in the trace]): a walk over the children that registers a hook
    on each, as transformers' output capturing does, is traced whole."""
    if not isinstance(obj, NNModuleValue) or name in ("_modules", "_parameters", "_buffers", "__dict__"):
        return False
    try:
        kind = value.python_type()  # never as_constant(): that specialises a computed float (`self.t = self.t * 0.5`)
    except Exception:
        return False
    if kind not in (bool, int, float, str, type(None)):
        return False
    module = obj.obj
    return all(name not in getattr(module, table, {}) for table in ("_modules", "_parameters", "_buffers"))


# the hook dicts of every module and torch's global module hooks (NOTE [Flag stores during module walks])
_HOOK_DICTS = frozenset(k for k, v in vars(torch.nn.Module()).items() if isinstance(v, dict) and "hook" in k) | \
    frozenset(k for k, v in vars(torch.nn.modules.module).items() if isinstance(v, dict) and k.startswith("_global_")
              and "hook" in k)


def _hook_dict(value: Value) -> bool:
    """A write into `value` registers or removes a module hook: a hook dict read through its own name."""
    source = value.source
    name = getattr(source, "attr", None) if isinstance(source, AttrSource) else \
        getattr(source, "name", None) if isinstance(source, GlobalSource) else None
    return isinstance(value, DictValue) and name in _HOOK_DICTS


def _buffer_table(module: torch.nn.Module, name: str) -> dict | None:
    """`module._buffers` when it holds `name`, else None."""
    table = module.__dict__.get("_buffers")
    return table if isinstance(table, dict) and name in table else None


def _store_into(held: DictValue, name: str, value: Value) -> None:
    """`held[name] = value` in the trace's view of a dict, recording no write of its own (the attribute
    store is what is replayed)."""
    from .values.outside import OutsideDictValue
    if isinstance(held, OutsideDictValue):
        held.store(name, value)
    else:
        held.items[name] = value


__all__ = ["SAFE_INT_OPS", "SideEffects"]
