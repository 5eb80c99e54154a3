"""The frame cache: compiled frame entries persisted across processes (beyond Dynamo).

A new process whose cache is warm runs the first call of a compiled function without tracing and without
backend compilation: the hook finds the function's persisted entries, rebuilds each one's guard function
and transformed function, and loads the backend's saved artifact.

What is persisted for an entry (`save`), as plain data:
- its guards (expressions) and, for each object the expressions name, a *locator* that finds the same
  object in a new process: an importable `module.qualname`, a module's globals dict, a closure cell of
  the frame's function, a dtype or device, or a plain value (NOTE [Locators]);
- the graph (a pickled GraphModule) and the backend's artifact (`registry` save/load);
- the plan of the transformed function: the graph inputs' sources and the return value's structure, from
  which the same code generator rebuilds the function;
- the code hashes of the function and of every function inlined while tracing: a source change of any
  of them makes the entry a miss.

An entry is persisted only when every part of it can be located soundly; otherwise it is kept in memory
only, and the `cache` log says why. Entries of frames that broke or replay side effects persist their
transformed code itself (NOTE [Persisted break code] in persisted_code.py); frames that ran eagerly are
not persisted.

Storage: one store entry per (function, code hash, backend, options, dynamic mode: NOTE [Dynamic mode in
the key]), holding the list of its persisted entries; writers take the store's lock for the key.
"""
from __future__ import annotations

import dataclasses
import io
import pickle
import types
from typing import Any

import torch

from .. import config, logs
from ..guards import Guard, compile_guards
from .codegen import GRAPH_OUT, Codegen, FunctionShape, Reconstructor, make_function
from .locators import (NotPersistable, _class_attribute, _import_locator, closure_path, closures,  # noqa: F401
                       code_hash, code_locator, locate, resolve)  # (NotPersistable: convert.py)
from .break_locations import persisted_break, restored_break
from .guard_origins import live_origins, origin_places, relocated_source
from .input_versions import input_writes, keep_versions, unwrapped
from .handler_reruns import restore_plan, restoring  # NOTE [Failing graphs inside handlers]
from .persisted_code import load_code
from .size_graphs import runs_as_its_own_code
from .sources import (AttrSource, CallSource, ClosureSource, DictSlotSource, GlobalSource, ItemSource, LocalSource,
                      ObjectSource, Ref, Source)
from .values import (ConstantValue, DictValue, ListValue, NewObjectValue, SequenceValue, TensorValue, TupleValue,
                     Value)

FORMAT = 14  # 2: graphs saved node by node (NOTE [Persisted graphs]); 3: lookup facts guarded (NOTE [Lookup facts]);
# 4: library class attributes guarded, guards ordered so that none runs user code (NOTE [Guards run no user code]);
# 5: inlined code objects, MROs and ABC answers guarded (NOTE [Code replaced], [MRO guarded], [ABC answers]);
# 6: raw attribute sources (NOTE [Raw attribute reads]), version counts of written inputs (NOTE [Version counts
# of written inputs]); 7: graphs split at DDP's buckets, entries guarded on DDP (NOTE [Entries guarded on DDP]);
# 8: version counts of graph outputs (NOTE [Version counts of graph outputs]); 9: custom Function calls
# (NOTE [Persisted custom Function calls] in function_regions.py); 10: cells and functions by their path through
# closures (NOTE [Closure cells by path] in locators.py); 11: the break record (Persisted.graph_break); 12: its
# frames' places in the code (NOTE [Break locations from the live code] in break_locations.py); 13: items keyed
# by a source (NOTE [Keys by their source] in sources.py) and call sources; 14: effect nodes (NOTE [Persisted graphs])


# ---- sources and values -----------------------------------------------------------------------------
def encode_source(source: Source, fn: types.FunctionType) -> tuple:
    if isinstance(source, LocalSource):
        return ("L", source.name)
    if isinstance(source, GlobalSource):
        return ("G", locate(source.globals_ref.obj, fn), source.name)
    if isinstance(source, ClosureSource):
        return ("C", locate(source.cell_ref.obj, fn), source.name)
    if isinstance(source, AttrSource):
        return ("A", encode_source(source.base, fn), source.attr, source.raw)
    if isinstance(source, ItemSource) and source.key_source is not None:  # NOTE [Keys by their source]
        return ("K", encode_source(source.base, fn), encode_source(source.key_source, fn))
    if isinstance(source, ItemSource):
        return ("I", encode_source(source.base, fn), source.key)
    if isinstance(source, DictSlotSource):
        return ("S", encode_source(source.base, fn), source.slot, source.key)
    if isinstance(source, ObjectSource):
        return ("O", locate(source.ref.obj, fn), source.ref.label)
    if isinstance(source, CallSource):  # `raw_dict_items(d)`, `list(d)` (NOTE [Keys by their source])
        return ("F", locate(source.fn_ref.obj, fn), source.fn_ref.label, encode_source(source.base, fn))
    raise NotPersistable(f"source {type(source).__name__}")


def decode_source(data: tuple, fn: types.FunctionType) -> Source:
    tag = data[0]
    if tag == "L":
        return LocalSource(data[1])
    if tag == "G":
        return GlobalSource(Ref(resolve(data[1], fn), "G"), data[2])
    if tag == "C":
        return ClosureSource(Ref(resolve(data[1], fn), data[2]), data[2])
    if tag == "A":
        return AttrSource(decode_source(data[1], fn), data[2], data[3])
    if tag == "I":
        return ItemSource(decode_source(data[1], fn), data[2])
    if tag == "K":
        return ItemSource(decode_source(data[1], fn), None, decode_source(data[2], fn))
    if tag == "O":
        return ObjectSource(Ref(resolve(data[1], fn), data[2]))
    if tag == "F":
        return CallSource(Ref(resolve(data[1], fn), data[2]), decode_source(data[3], fn))
    return DictSlotSource(decode_source(data[1], fn), data[2], data[3])


def encode_value(value: Value, output_index: dict[int, int], fn: types.FunctionType) -> tuple:
    if isinstance(value, TensorValue):
        index = output_index.get(id(value.node))
        return ("out", index) if index is not None else ("src", encode_source(value.source, fn))
    if isinstance(value, (ListValue, DictValue)) and value.source is not None:
        return ("src", encode_source(value.source, fn))
    if value.source is not None:
        return ("src", encode_source(value.source, fn))
    if _not_plain_data(value):
        raise NotPersistable(f"return value {value.describe()}")
    if isinstance(value, ConstantValue):
        return ("const", locate(value.value, fn))
    if isinstance(value, SequenceValue):
        return ("seq", locate(value.cls, fn), [encode_value(v, output_index, fn) for v in value.items])
    if isinstance(value, DictValue):
        return ("dict", locate(value.cls, fn), [(k, encode_value(v, output_index, fn)) for k, v in value.items.items()])
    if isinstance(value, NewObjectValue):
        return ("new", locate(value.cls, fn), [(k, encode_value(v, output_index, fn)) for k, v in value.attrs.items()])
    raise NotPersistable(f"return value {value.describe()}")


def _not_plain_data(value: Value) -> bool:
    """defaultdicts (their factory), live dict views and dicts keyed by tensors (capture/mappings.py,
    identity_keys.py) are rebuilt by code this format does not describe."""
    from .values.mappings import DefaultDictValue, DictViewValue, IdentityKey
    return isinstance(value, (DefaultDictValue, DictViewValue)) or (
        isinstance(value, DictValue) and any(isinstance(k, IdentityKey) for k in value.items))


class _Output:
    """Stands for graph output `index` when a return value is rebuilt (a node-like identity)."""

    op = "call_function"


def decode_value(data: tuple, outputs: dict[int, int], fn: types.FunctionType) -> Value:
    tag = data[0]
    if tag == "out":
        node = _Output()
        outputs[id(node)] = data[1]
        return TensorValue(node, None)
    if tag == "src":
        return _Sourced(decode_source(data[1], fn))
    if tag == "const":
        return ConstantValue(resolve(data[1], fn))
    if tag == "seq":
        cls = resolve(data[1], fn)
        items = [decode_value(d, outputs, fn) for d in data[2]]
        return (ListValue if cls is list else TupleValue)(items, cls=cls)
    items = {k: decode_value(d, outputs, fn) for k, d in data[2]}
    if tag == "dict":
        return DictValue(items, cls=resolve(data[1], fn))
    return NewObjectValue(resolve(data[1], fn), items)


class _Sourced(Value):
    def __init__(self, source: Source) -> None:
        self.source = source


# ---- saving and loading -------------------------------------------------------------------------------
@dataclasses.dataclass
class Persisted:
    """One entry in persisted form (everything picklable)."""

    guards: list[tuple]
    namespace: dict[str, tuple]
    callees: list[tuple[tuple, str]]
    inputs: list[tuple]
    ret: tuple
    grad: tuple[bool, bool]
    graph: bytes
    artifact: bytes
    guard_source: str = ""  # the generated guard function, executed as it is on load
    code: bytes = b""  # a break's transformed code, instruction by instruction (NOTE [Persisted break code])
    writes: tuple = ()  # NOTE [Version counts of written inputs] (input_versions.py)
    out_versions: tuple = ()  # NOTE [Version counts of graph outputs] (input_versions.py)
    restore: tuple = ()  # NOTE [Failing graphs inside handlers] (handler_reruns.restore_plan)
    split: tuple = ()  # a graph split at DDP's buckets: (its BucketedGraph's assignment, each part's artifact)
    graph_break: Any = None  # the entry's breaks.GraphBreak (plain data), for explain and the logs of a warm process
    break_places: tuple = ()  # NOTE [Break locations from the live code] (break_locations.py)
    origin_places: tuple = ()  # NOTE [Guard origins from the live code] (guard_origins.py)
    clean: bool = False  # passes its arguments only to graphs (NOTE [Clean entries of a warm process], kept_joints.py)


def persist(fn: types.FunctionType, output, ret: Value, gm: torch.fx.GraphModule | None, compiled: Any,
            output_index: dict[int, int], request, code: bytes | None = None, code_of=None) -> Persisted:
    """The persisted form of a just-compiled entry (raises NotPersistable when it has none); `code_of()`
    gives the transformed code's persisted form, for a return value the plan cannot describe."""
    with closures(fn, output.inlined):  # NOTE [Closure cells by path]
        if code is None and ret is not None and code_of is not None:
            try:
                encode_value(ret, output_index, fn)
            except NotPersistable as e:  # NOTE [Return values the plan cannot describe]
                logs.log("cache", "frame entry of %s persisted as its code: %s", fn.__code__.co_qualname, e)
                code = code_of()
        return _persist(fn, output, ret, gm, compiled, output_index, request, code)


# NOTE [Return values the plan cannot describe]: the plan of an entry (graph inputs, return value) describes
# plain return values: graph outputs, sourced values, constants, tuples, lists, dicts and objects of plain
# data. The transformed function rebuilds others with code of its own: an object made by calling its class
# (contextlib's `helper`, called at a break before a user `with my_ctx():`, returns
# `_GeneratorContextManager(func, args, kwds)`), a defaultdict with its factory, a dict view. Such an
# entry persists its transformed code itself, as a frame that breaks does (NOTE [Persisted break code]),
# whose constants are located like any other; what cannot be located keeps it in memory only.


def persist_break(persisted: Persisted, graph_break, fn: types.FunctionType, output) -> None:
    """Adds the entry's break record (NOTE [Break locations from the live code])."""
    callees = [f for f in output.inlined if f is not fn]  # in the order of Persisted.callees
    persisted.graph_break, persisted.break_places = persisted_break(graph_break, [fn, *callees])


def restored_graph_break(fn: types.FunctionType, persisted: Persisted):
    """The entry's break record, its frames made again from this process's code."""
    if not persisted.break_places:
        return persisted.graph_break
    callees = [_resolve_callee(locator, fn) for locator, _ in persisted.callees]
    return restored_break(persisted.graph_break, persisted.break_places, [fn, *callees])


def _persist(fn, output, ret, gm, compiled, output_index, request, code) -> Persisted:
    compiled = unwrapped(compiled)  # NOTE [Version counts of written inputs]: the counts are persisted apart
    if output.side_effects and code is None:
        raise NotPersistable("the frame replays side effects")
    from .state_blocks import default_dtype_changed
    if default_dtype_changed(output):
        raise NotPersistable("the frame changes the default dtype")  # NOTE [Default dtype changes]
    if output.__dict__.get("process_local"):
        raise NotPersistable(output.__dict__["process_local"])  # NOTE [Ids are per process] in stdlib.py
    if request.artifacts is None:
        raise NotPersistable("the backend cannot save what it compiled (a user callable)")
    from .ddp_buckets import BucketedGraph
    split = ()
    if isinstance(compiled, BucketedGraph):  # NOTE [Graphs split at DDP's buckets]: each part's artifact
        split = (compiled.assignment, tuple(request.artifacts[0](part) for part in compiled.parts))
        artifact = None if None in split[1] else b""
    else:
        artifact = request.artifacts[0](compiled) if gm is not None and not getattr(gm, "runs_as_own_code", False) \
            else b""
    if artifact is None:
        raise NotPersistable("the backend could not save this graph")
    guards = [_guard_data(g) for g in output.guards]
    namespace = {name: _locate_in_entry(obj, fn, output) for name, obj in output.names.namespace.items()}
    callees = [(_callee_locator(f, fn, output), code_hash(f.__code__)) for f in output.inlined if f is not fn]
    places = origin_places(output.guards, [fn, *(f for f in output.inlined if f is not fn)])
    inputs = [encode_source(i.source, fn) for i in output.inputs]
    ret_data = encode_value(ret, output_index, fn) if code is None else ("code",)
    graph = dump_graph(gm) if gm is not None else b""
    return Persisted(guards, namespace, callees, inputs, ret_data, (output.entry_grad_enabled, output.grad_enabled),
                     graph, artifact, code=code or b"", writes=input_writes(output), split=split,
                     out_versions=output.output_versions, origin_places=places, restore=restore_plan(output) or ())


def _locate_in_entry(obj: Any, fn: types.FunctionType, output) -> tuple:
    """A locator for an object the entry's guards name; a code object is the live code of the inlined
    function that has it (NOTE [Code replaced] in lookup.py; `restore` checks that code's hash)."""
    if isinstance(obj, types.CodeType):
        for f in output.inlined:
            if f is not fn and f.__code__ is obj:
                try:
                    return ("code", _function_locator(f, fn))
                except NotPersistable:
                    pass
        # a closure's code, found among its enclosing function's constants (NOTE [Nested code by its
        # enclosing function] in locators.py), in the module of the frame or of an inlined function
        modules = {f.__globals__.get("__name__") for f in (fn, *output.inlined) if isinstance(f, types.FunctionType)}
        found = code_locator(obj, sorted(m for m in modules if isinstance(m, str)))
        if found is not None:  # no callee's hash covers it: its own (NOTE [Code by its file's module])
            return ("hashed", found, code_hash(obj))
        from .call_located import code_by_call  # NOTE [Code found through the call's arguments]
        found = code_by_call(obj, output, fn)
        if found is not None:
            return found
        raise NotPersistable(f"the code object {obj.co_qualname} of no importable inlined function")
    if type(obj) is tuple and obj and isinstance(obj[0], type) and obj[0].__mro__ is obj:
        return ("mro", [locate(k, fn) for k in obj])  # NOTE [MRO guarded] in lookup.py
    if type(obj) is frozenset and obj is output.__dict__.get("allowed_ids_snapshot"):
        return _marks_locator(obj, fn)  # NOTE [Persisted marks]
    return locate(obj, fn)


# NOTE [Persisted marks]: a trace that considers a function it cannot name stably (no source, no importable
# name) while some functions are marked allow_in_graph (importing transformers marks four) guards the set
# of marked ids as a whole (NOTE [Guarding the marks] in allowed_calls.py). Ids are per process, so such an
# entry was kept in memory only: most transformers models were traced again in every warm process. The set
# is persisted as the marked functions themselves, each by its locator (found once per set among the
# interpreter's objects), and a warm process guards the ids of the functions those locators find there:
# the same marks, as objects. A marked object no locator finds (a marked closure) keeps the entry in memory
# only, as before.
_MARKED: dict[frozenset, list] = {}


def _marks_locator(snapshot: frozenset, fn: types.FunctionType) -> tuple:
    if snapshot not in _MARKED:
        import gc
        _MARKED.clear()
        found = {id(o): o for o in gc.get_objects() if id(o) in snapshot}
        if len(found) < len(snapshot):  # NOTE [Marks after gc.freeze]
            found.update(_in_module_namespaces(snapshot - found.keys()))
        _MARKED[snapshot] = [found.get(i) for i in sorted(snapshot)]
    marked = _MARKED[snapshot]
    if any(o is None for o in marked):
        raise NotPersistable("a function marked allow_in_graph that is not found among the interpreter's objects")
    return ("marks", [locate(o, fn) for o in marked])


# NOTE [Marks after gc.freeze]: gc.get_objects() lists the objects of the collector's generations, not of its
# permanent one, where gc.freeze() moves every object alive (servers freeze after importing, before forking):
# marked functions were then "not found among the interpreter's objects" and every such entry was kept in
# memory only. The ids not found are looked for in the modules' namespaces and their classes' dicts, where
# a marked function lives (allow_in_graph marks by identity; a locator still has to find each one).
def _in_module_namespaces(ids) -> dict[int, Any]:
    import sys
    found: dict[int, Any] = {}
    for module in list(sys.modules.values()):
        for value in list(getattr(module, "__dict__", {}).values()):
            for candidate in (value, *(list(vars(value).values()) if isinstance(value, type) else ())):
                if id(candidate) in ids:
                    found[id(candidate)] = candidate
    return found


# NOTE [Functions made per call, persisted]: a frame that makes a nested function on every call (`def g(a):
# return a * k` in f, a lambda over a loop variable) and inlines it, or calls it at a break, was kept in memory
# only: the function object has no importable name (an inlined callee was located as a function, the code
# object `make_closure` rebuilds it from was a constant no locator found). Neither needs the object: the
# trace guards such a closure by its code and reads its cells through its source (NOTE [Closures guarded by
# code]) or rebuilds it from its code and traced contents, so a new process needs only the code, found among
# its enclosing function's constants (NOTE [Nested code by its enclosing function] in locators.py) with its
# hash checked on load. An inlined callee no locator finds as a function is persisted as ("code_only",
# locator of its code): restoring checks that code's hash as any callee's. A guard that pins the function
# object itself (identity) still keeps the entry in memory only: its namespace cannot be located.
class _CodeOnly:
    """An inlined callee found by its code only (NOTE [Functions made per call, persisted])."""

    def __init__(self, code: types.CodeType) -> None:
        self.__code__ = code
        self.__qualname__ = code.co_qualname


def _callee_locator(f: types.FunctionType, fn: types.FunctionType, output=None) -> tuple:
    try:
        return _function_locator(f, fn)
    except NotPersistable:
        modules = sorted({m for m in (fn.__module__, f.__module__) if isinstance(m, str)})
        locator = code_locator(f.__code__, modules) if isinstance(f, types.FunctionType) else None
        if locator is not None:
            return ("code_only", locator)
        from .call_located import function_by_call  # NOTE [Code found through the call's arguments]
        locator = function_by_call(f, output, fn) if output is not None else None
        if locator is None:
            raise
        return locator


def _resolve_callee(locator: tuple, fn: types.FunctionType, frame_locals=None) -> Any:
    if locator[0] == "call_function":
        from .call_located import resolve_by_call
        return resolve_by_call(locator, fn, frame_locals, {})
    if locator[0] == "code_only":
        code = resolve(locator[1], fn)
        if not isinstance(code, types.CodeType):
            raise NotPersistable(f"{locator[1]} is not a code object")
        return _CodeOnly(code)
    return resolve(locator, fn)


def _function_locator(f: types.FunctionType, fn: types.FunctionType) -> tuple:
    """An inlined function by its importable name, else by its path through closures (NOTE [Closure cells
    by path]), else by the class that holds it (NOTE [Functions by the class that holds them])."""
    try:
        return locate(f, fn) if hasattr(f, "__framejit_nested__") else _import_locator(f)  # Rk: nested_persist.py
    except NotPersistable:
        path = closure_path(f, fn)
        if path is None and isinstance(f, types.FunctionType):
            path = _class_attribute(f, fn)
        if path is None:
            raise
        return path


# NOTE [Persisted graphs]: a GraphModule's own pickling saves its generated code and rebuilds the graph
# by symbolically tracing that code, which *runs* calls whose arguments are all constants instead of
# recording them: grad-mode and autocast nodes (`torch._C._set_grad_enabled(False)`) would vanish, and
# the loaded graph would compute under the wrong state. So the graph is saved node by node, with the marks a
# backend reads (`effect`: a persisted joint's key hashes it, NOTE [What a joint depends on] in joint_cache.py).
@dataclasses.dataclass(frozen=True)
class _NodeRef:
    index: int


def dump_graph(gm: torch.fx.GraphModule) -> bytes:
    """Every node of `gm` as (op, name, target, args, kwargs, (dynamic float input, effect)), node arguments
    as _NodeRef."""
    index: dict[torch.fx.Node, int] = {}
    nodes = []
    from .higher_order import _Checkpointed as Checkpointed
    for node in gm.graph.nodes:
        target = node.target
        if node.op == "call_module" and type(gm.get_submodule(node.target)) is Checkpointed:
            target = (node.target, gm.get_submodule(node.target))  # NOTE [Persisted checkpointed regions]
        elif node.op in ("get_attr", "call_module"):
            raise NotPersistable(f"the graph reads module state ({node.op} {node.target})")
        index[node] = len(nodes)
        args = torch.fx.node.map_arg(node.args, lambda n: _NodeRef(index[n]))
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: _NodeRef(index[n]))
        nodes.append((node.op, node.name, target, args, kwargs, (bool(node.meta.get("dynamic_float")),
                                                                 bool(node.meta.get("effect")))))
    buffer = io.BytesIO()
    try:
        _GraphPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(nodes)
    except NotPersistable:
        raise
    except Exception as e:  # a target or constant that has no importable name
        raise NotPersistable(f"the graph cannot be pickled: {type(e).__name__}: {e}") from None
    return buffer.getvalue()


class _GraphPickler(pickle.Pickler):
    """Pickles a graph's nodes; a custom Function call as its plain data (NOTE [Persisted custom Function
    calls] in function_regions.py), rebuilt and checked by `_function_call` when the graph is loaded."""

    def reducer_override(self, obj):
        from .function_regions import FunctionCall
        if type(obj) is FunctionCall:
            return _function_call, (obj.persisted_data(),)
        if isinstance(obj, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            return _op, _op_data(obj)  # NOTE [Persisted operator targets]
        if isinstance(obj, types.FunctionType) and "<" in obj.__qualname__:
            # a target pickle cannot name (F.max_pool2d, made by boolean_dispatch): by its locator
            return _located, (_import_locator(obj),)
        from .func_capture import TransformCall
        from .higher_order import _Checkpointed as Checkpointed
        from .vmap_capture import VmapCall
        if type(obj) is Checkpointed:  # NOTE [Persisted checkpointed regions]
            return _checkpointed, (dump_graph(obj.region), obj.grad_positions, obj.options)
        if type(obj) is VmapCall:  # NOTE [Persisted transform regions]
            return _vmap_call, (dump_graph(obj.body), obj.in_dims, obj.out_dims, obj.randomness, obj.chunk_size,
                                obj.out)
        if type(obj) is TransformCall:
            return _transform_call, (obj.name, obj.apply, dump_graph(obj.body), obj.args, obj.n_args, obj.extra,
                                     obj.n_extra, obj.out, obj.random)
        return NotImplemented


# NOTE [Persisted transform regions]: a graph node running torch.vmap or a torch.func transform over a
# traced body (NOTE [vmap regions] in vmap_capture.py, NOTE [Transform regions] in func_capture.py) has as
# target an object holding the body's GraphModule and the transform's constant options (in_dims, out_dims,
# randomness, chunk size; argnums, has_aux as a functools.partial of func_capture's module-level `_apply_*`
# functions; the result templates). It is saved as that plain data with the body node by node (as any
# graph: NOTE [Persisted graphs]) and made again on load; anything in it that does not pickle keeps the
# entry in memory only, as before.
def _vmap_call(body: bytes, in_dims, out_dims, randomness, chunk_size, out):
    from .vmap_capture import VmapCall
    return VmapCall(load_graph(body), in_dims, out_dims, randomness, chunk_size, out)


def _transform_call(name, apply, body: bytes, args, n_args, extra, n_extra, out, random):
    from .func_capture import TransformCall
    call = TransformCall(name, apply, load_graph(body), args, n_args, extra, n_extra, out)
    call.random = random
    return call


# NOTE [Persisted checkpointed regions]: a graph whose checkpointed regions were moved into submodules
# (NOTE [Checkpointed regions] in higher_order.py) calls each as `call_module fj_checkpoint_N`. Such a
# submodule holds nothing but the region's own graph (no parameters, no buffers: those reach the region as
# its inputs) and the positions of the inputs that need grad, so it is saved as that data, with the region
# node by node (any get_attr or other submodule in it keeps the entry in memory only, as in any graph), and
# the loaded graph calls a new Checkpointed made from it under the same name. Other submodules still keep
# the entry in memory only.
def _checkpointed(region: bytes, grad_positions: tuple, options: tuple = ()):
    from .higher_order import _Checkpointed as Checkpointed
    return Checkpointed(load_graph(region), grad_positions, options)


def _located(locator: tuple):
    return resolve(locator, None)


def _function_call(data: tuple):
    from .function_regions import FunctionCall
    return FunctionCall.rebuild(data)


# NOTE [Persisted operator targets]: torch's OpOverload objects do not pickle (their C kernel records do
# not), so a graph calling `torch.ops.aten.x.default` or a custom op (`torch.library.custom_op`, called as
# `twice(x)`) was kept in memory only. Such a target is saved as (namespace, name, overload) and found again
# in torch.ops of the loading process, where the program has registered its custom ops by the time it calls
# the frame. A custom op's behaviour is Python code framejit traced through (its fake kernel gave the
# shapes the trace used) or that the graph runs: the op's schema and the code hashes of every function of
# its definition are saved with it, and loading refuses an op whose definition changed (the entry is then
# not used). An op of another namespace that no CustomOpDef describes (registered through torch.library's
# lower-level API, C++ extensions) is not persisted: nothing says its kernels are the same.
_TORCH_NAMESPACES = frozenset({"aten", "prims", "prim", "quantized", "_quantized", "rngprims", "higher_order",
                               "quantized_decomposed", "_c10d_functional", "c10d_functional", "_dtensor",
                               "debugprims"})


def _op_data(op) -> tuple:
    if isinstance(op, torch._ops.OpOverload):
        namespace, name, overload = op.namespace, op._schema.name.split("::")[-1], op._overloadname
    else:  # a packet (`torch.ops.ns.name(x)`): it has no `namespace` (a read of it looks for an overload)
        (namespace, _, name), overload = op._qualified_op_name.partition("::"), None
    return namespace, name, overload, _op_definition(namespace, name)


def _op_definition(namespace: str, name: str) -> tuple | None:
    if namespace in _TORCH_NAMESPACES:
        return None
    from torch._library import custom_ops
    opdef = custom_ops.OPDEFS.get(f"{namespace}::{name}")
    if opdef is None:
        raise NotPersistable(f"the graph calls the operator {namespace}::{name}, which no custom_op defines")
    functions = {"init": opdef._init_fn, "fake": opdef._abstract_fn, "setup_context": opdef._setup_context_fn,
                 "backward": opdef._backward_fn, "vmap": opdef._vmap_fn,
                 **{f"kernel_{k}": v for k, v in opdef._backend_fns.items()},
                 **{f"dispatch_{getattr(k, '__qualname__', k)}": v for k, v in opdef._torch_dispatch_fns.items()}}
    return str(opdef._schema), tuple(sorted((k, _function_digest(v)) for k, v in functions.items() if v is not None))


def _function_digest(f) -> str:
    """The code hash of `f` and of the functions its closure holds (a registered kernel is a wrapper)."""
    parts = []
    while isinstance(f, types.FunctionType) and len(parts) < 4:
        parts.append(code_hash(f.__code__))
        inner = [c.cell_contents for c in f.__closure__ or () if isinstance(_contents(c), types.FunctionType)]
        f = inner[0] if len(inner) == 1 else None
    return ":".join(parts) if parts else repr(type(f))


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return None


def _op(namespace: str, name: str, overload: str | None, definition: tuple | None):
    if namespace == "framejit":  # framejit's own ops (NOTE [Linspace of a symbolic length]) are registered
        from . import sym_factories  # noqa: F401 - on first use, which a process loading its graph may not make
    packet = getattr(getattr(torch.ops, namespace), name)
    if _op_definition(namespace, name) != definition:
        raise NotPersistable(f"the operator {namespace}::{name} changed since it was cached")
    return packet if overload is None else getattr(packet, overload)


def load_graph(data: bytes) -> torch.fx.GraphModule:
    from .pinned_targets import new_graph  # NOTE [Graph targets pinned by identity]
    graph = new_graph()
    made: list[torch.fx.Node] = []
    root = torch.nn.Module()
    for op, name, target, args, kwargs, (dynamic_float, effect) in pickle.loads(data):
        args, kwargs = torch.fx.node.map_aggregate((args, kwargs), lambda a: made[a.index] if isinstance(a, _NodeRef) else a)
        if op == "call_module":  # NOTE [Persisted checkpointed regions]
            target, module = target
            root.add_module(target, module)
        if op == "output":
            node = graph.output(args[0])
        else:
            node = graph.create_node(op, target, args, kwargs, name=name)
        node.meta.update({key: True for key, on in (("dynamic_float", dynamic_float), ("effect", effect)) if on})
        made.append(node)
    return torch.fx.GraphModule(root, graph)


def _guard_data(g: Guard) -> tuple:
    return (g.expr, g.kind, g.source, g.origin, g.expected, g.actual, g.cost, tuple(_guard_data(p) for p in g.parts))


def _guard(data: tuple, origins: dict[str, str]) -> Guard:
    """A persisted guard, its origin as this process names it (NOTE [Guard origins from the live code])."""
    expr, kind, source, origin, expected, actual, cost, parts = data
    return Guard(expr, kind, source, origins.get(origin, origin), expected, actual, cost,
                 tuple(_guard(p, origins) for p in parts))


def restore(fn: types.FunctionType, persisted: Persisted, request, args: tuple, kwargs: dict):
    """Rebuild (guard function, transformed function, graphs) from a persisted entry, or raise."""
    from .breaks import DISABLED
    from .call_located import call_locals, resolve_by_call
    functions, frame_locals = [fn], call_locals(fn, args, kwargs)
    for locator, digest in persisted.callees:
        callee = _resolve_callee(locator, fn, frame_locals)
        if code_hash(callee.__code__) != digest:
            raise NotPersistable(f"{callee.__qualname__} changed since it was cached")
        if callee.__code__ in DISABLED:
            raise NotPersistable(f"{callee.__qualname__} is now marked framejit.disable")
        functions.append(callee)
    by_call = ("call_code", "call_function")  # NOTE [Code found through the call's arguments]
    namespace = {name: resolve(loc, fn) for name, loc in persisted.namespace.items() if loc[0] not in by_call}
    namespace.update({name: resolve_by_call(loc, fn, frame_locals, namespace)
                      for name, loc in persisted.namespace.items() if loc[0] in by_call})
    _check_distinct(namespace)  # NOTE [Distinct objects stay distinct]
    shape = FunctionShape.of(fn.__code__)
    origins = live_origins(persisted.origin_places, functions)  # NOTE [Guard origins from the live code]
    guard = compile_guards([_guard(g, origins) for g in persisted.guards], shape.params_source(), namespace,
                           fn.__defaults__, fn.__kwdefaults__, name=f"guard_{fn.__code__.co_name}",
                           source=relocated_source(persisted.guard_source, origins) or None)
    sources = [decode_source(s, fn) for s in persisted.inputs]
    cg, graphs, outputs = Codegen(), [], {}
    if persisted.graph:
        gm = load_graph(persisted.graph)
        graphs.append(gm)
        make = _artifact_maker(gm, persisted, request.artifacts[1])
        try:
            examples = _example_inputs(guard, sources, namespace, args, kwargs)
        except Exception:  # NOTE [Artifacts loaded at the first call]
            compiled = _LoadAtFirstCall(make, gm)
        else:
            compiled = make(examples)
        compiled = restoring(keep_versions(compiled, gm, persisted.writes, persisted.out_versions), persisted.restore)
        cg.call_graph(compiled, sources)
    if persisted.code:  # NOTE [Persisted break code]
        body = load_code(fn, persisted.code, compiled if persisted.graph else None, request.hooks)
        return guard, make_function(shape, body, fn.__globals__, fn.__defaults__, fn.__kwdefaults__), graphs
    ret = decode_value(persisted.ret, outputs, fn)
    rebuild = Reconstructor(cg, outputs, GRAPH_OUT)
    entry_grad, final_grad = persisted.grad
    if entry_grad != final_grad:
        cg.push_null()
        cg.load_const(torch._C._set_grad_enabled)
        cg.load_const(final_grad)
        cg.call(1)
        cg.emit("POP_TOP")
    rebuild.emit(ret)
    cg.return_value()
    transformed = make_function(shape, cg, fn.__globals__, fn.__defaults__, fn.__kwdefaults__)
    return guard, transformed, graphs


# NOTE [Distinct objects stay distinct]: a guard compares a source with an object of the entry's namespace by
# identity, and two guards on one object share one name (hence one locator), so objects that were one object
# when traced are one object in every process that loads the entry. The converse was not kept: two objects
# that were distinct (two names) may be found by their locators as one object in a new process (`B = A if
# os.environ.get("SAME") else Obj()`), and a trace that relied on their being distinct (`A is B`,
# `{id(A), id(B)}`, `d.get(id(B))` with `d = {id(A): 3}`) was loaded there with the cold answer (review revE
# E6). The names of a namespace stand for distinct objects, so an entry whose names find one object twice is
# not used (a miss: the frame is traced in this process). Immutable plain values (numbers, strings, tuples)
# are compared by value where they are guarded and may be one object by interning; they are not checked.
_BY_VALUE = (type(None), bool, int, float, complex, str, bytes, tuple, frozenset)


def _check_distinct(namespace: dict) -> None:
    seen: dict[int, str] = {}
    for name, obj in namespace.items():
        if isinstance(obj, _BY_VALUE):
            continue
        other = seen.setdefault(id(obj), name)
        if other != name:
            raise NotPersistable(f"{other} and {name} were distinct objects when traced and are one object now")


def _artifact_maker(gm, persisted: Persisted, load):
    """examples -> the backend's callable for the persisted graph (its artifact loaded)."""
    eager_forward = gm.forward  # NOTE [Saved-tensors hooks at the call]

    def make(examples: list):
        if persisted.artifact == b"" and runs_as_its_own_code(gm):
            return eager_forward  # NOTE [Graphs that only read sizes] / [... select rows]: no artifact
        if persisted.split:  # NOTE [Graphs split at DDP's buckets]
            from .ddp_buckets import restore_split
            compiled = restore_split(gm, *persisted.split, load)
        else:
            compiled = load(persisted.artifact, gm, examples)
        from .saved_hooks import hook_aware
        return hook_aware(gm, compiled, eager_forward, persisted.grad[0], examples)
    return make


# NOTE [Artifacts loaded at the first call]: entries are restored at the first call of their frame in a new
# process, and the artifact loads with example inputs read through the entry's sources from that call. An
# entry made for a later state may have sources that this call cannot read: a compiled optimizer step reads
# `state[p]['step']`, and the first step of a new process finds the state empty (NOTE [Keys by their
# source]). Such an entry loads its artifact at its own first call instead, with the inputs its guard
# accepted as the examples; should the load fail there, the graph module itself runs (the same values).
class _LoadAtFirstCall:
    def __init__(self, make, gm) -> None:
        self._make, self._gm, self._compiled = make, gm, None

    def __call__(self, *inputs):
        if self._compiled is None:
            try:
                self._compiled = self._make(list(inputs))
            except Exception as e:
                logs.log("cache", "artifact of a persisted graph not loaded (the graph runs as it is): %s: %s",
                         type(e).__name__, e)
                self._compiled = self._gm
        return self._compiled(*inputs)


def _example_inputs(guard, sources, namespace, args, kwargs) -> list:
    frame_locals = guard.bind(*args, **kwargs)
    from .sources import NameTable
    names = NameTable()
    names.by_id = {id(obj): name for name, obj in namespace.items()}
    scope = dict(namespace)
    return [eval(s.expr(names), scope, dict(frame_locals)) for s in sources]


# ---- the store ---------------------------------------------------------------------------------------
def store_key(fn: types.FunctionType, args: tuple, request) -> str | None:
    from ..cache import cache_key
    from .module_frame import module_call, module_forward, module_instance_forward

    if request.artifacts is None:
        return None
    owner = f"{fn.__module__}.{fn.__qualname__}"
    if fn in (module_call, module_forward, module_instance_forward) and args:
        owner += f"[{type(args[0]).__module__}.{type(args[0]).__qualname__}]"
    options = repr(sorted((request.options or {}).items()))
    return cache_key(kind="frame", format=FORMAT, owner=owner, code=code_hash(fn.__code__),
                     backend=request.version_key, options=options, dynamic=dynamic_mode(request),
                     fullgraph=bool(request.fullgraph))  # an entry with breaks must not serve fullgraph=True


# NOTE [Dynamic mode in the key]: what may become symbolic depends on compile(dynamic=...) and on two knobs
# (automatic dynamic, dynamic floats), and an entry's guards only check what its graph needs: a symbolic
# entry accepts every size its relations allow. A process compiled with dynamic=False loading an entry that
# another process compiled with dynamic=None or True would serve new sizes from a symbolic graph (and new
# floats from a graph that takes them as inputs), against what it asked for; a process with dynamic=True
# loading a static entry would compile once more for the next size. So the mode is part of the key: each
# mode reads and writes its own entries. (Markers such as mark_dynamic are not part of the key: each entry
# guards the dimensions a tensor marks, as torch's DYNAMIC_INDICES guard, so entries made for marked tensors
# share the key of their mode.)
def dynamic_mode(request) -> str:
    """The part of the frame cache key that says what the process makes symbolic."""
    automatic = config.automatic_dynamic if request.dynamic is None else None
    return f"dynamic={request.dynamic};automatic={automatic};floats={config.dynamic_floats}"


# NOTE [Persisted entries per code]: entries loaded from the cache do not count toward a frame's recompile
# limit (NOTE [Loaded entries and the limit] in hook.py), so the cache itself bounds them: a store entry
# holds at most 2x the recompile limit of a code's entries (per owner and mode: the store key). A new entry
# past the bound is not persisted (logged on `cache`; the process keeps it), and a process loads at most the
# bound, the newest ones (a cache written before the bound may hold more). Without it every warm process of a
# frame that keeps recompiling added the limit's worth of entries, and every later process loaded them all.
def entries_bound() -> int:
    return 2 * config.recompile_limit


def load(fn: types.FunctionType, args: tuple, kwargs: dict, request) -> list[Persisted]:
    store = _store()
    key = store_key(fn, args, request) if store is not None and entries_bound() > 0 else None
    if key is None:
        return []
    entry = store.get(key)
    if entry is None:
        return []
    try:
        entries = pickle.loads(entry.files["entries"])
    except Exception as e:  # an unreadable entry is a miss, never an error
        logs.log("cache", "frame cache entry for %s unreadable (%s); ignored", fn.__qualname__, e)
        return []
    if len(entries) > entries_bound():
        logs.log("cache", "%d persisted entries of %s; loading the newest %d (2x the recompile limit)",
                 len(entries), fn.__qualname__, entries_bound())
        entries = entries[-entries_bound():]
    return entries


def save(fn: types.FunctionType, args: tuple, persisted: Persisted, request) -> None:
    store = _store()
    key = store_key(fn, args, request) if store is not None else None
    if key is None:
        return
    with store.lock(key) as locked:
        if not locked:
            return
        existing = store.get(key)
        entries = pickle.loads(existing.files["entries"]) if existing is not None else []
        entries = [e for e in entries if e.guards != persisted.guards]
        if len(entries) >= entries_bound():  # NOTE [Persisted entries per code]
            logs.log("cache", "frame entry of %s not stored: the cache holds %d entries of it (the bound is 2x "
                     "the recompile limit)", fn.__qualname__, len(entries))
            return
        entries.append(persisted)
        ok = store.put(key, {"entries": pickle.dumps(entries)},
                       {"backend": request.version_key, "function": fn.__qualname__,
                        "location": f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}", "kind": "frame"})
    logs.log("cache", "%s frame entry of %s (%d entries under this key)", "stored" if ok else "could not store",
             fn.__qualname__, len(entries))


def _store():
    if not config.cache_enabled:
        return None
    from ..cache import default_store
    return default_store()


__all__ = ["NotPersistable", "Persisted", "code_hash", "load", "persist", "restore", "save"]
