"""nn.Module support beyond attribute reads: iteration methods and traced substitutes.

- `parameters()`, `named_parameters()`, `buffers()`, `children()`, `modules()` and their named forms
  are answered from the real module tree at trace time; each yielded tensor or module is wrapped with
  its source (e.g. `L['self'].encoder.layer.0.weight`) and the structure walked is guarded (the key
  lists of every `_parameters`, `_buffers` and `_modules` dict read), so adding or removing one
  recompiles.
- SUBSTITUTES maps a few library functions to replacements the translator inlines instead: they
  compute the same thing in a form that can be traced (NOTE [RNN flat weights]).
"""
from __future__ import annotations

import functools
import types

import torch
from torch.nn.modules.rnn import RNNBase

from ..guards import COST_TENSOR
from .breaks import BreakKind, Unsupported, UserException
from .module_protocol import check_walk
from .sources import DictSlotSource
from .values import ConstantValue, IteratorValue, NNModuleValue, TupleValue, UserFunctionValue, Value
from .values.builder import wrap

_KINDS = {
    torch.nn.Module.parameters: ("_parameters", False), torch.nn.Module.named_parameters: ("_parameters", True),
    torch.nn.Module.buffers: ("_buffers", False), torch.nn.Module.named_buffers: ("_buffers", True),
    torch.nn.Module.children: ("children", False), torch.nn.Module.named_children: ("children", True),
    torch.nn.Module.modules: ("modules", False), torch.nn.Module.named_modules: ("modules", True),
}


def is_iteration_method(fn) -> bool:
    return fn in _KINDS


def call_iteration_method(tx, fn, args: list[Value], kwargs: dict[str, Value]) -> Value:
    mod_value, rest = args[0], args[1:]
    if not isinstance(mod_value, NNModuleValue) or mod_value.source is None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.__name__}() of a module without a source")
    options = _options(fn, rest, kwargs)
    slot, named = _KINDS[fn]
    items = []
    prefix = options.get("prefix") or ""
    for path, module_value, child_name in _walk(tx, mod_value, options, slot):
        if slot in ("children", "modules"):
            item = module_value
        else:
            item = wrap(tx.output, getattr(module_value.obj, slot)[child_name],
                        DictSlotSource(module_value.source, slot, child_name))
        name = ".".join(p for p in (prefix if slot != "children" else "", path, child_name) if p)
        items.append(TupleValue([ConstantValue(name), item]) if named else item)
    iterator = _lazy_walk(tx, fn, IteratorValue(items))
    iterator.walk = (mod_value, fn.__name__, tuple(options.items()))  # NOTE [Lazy module walks]
    return iterator


# NOTE [Lazy module walks]: parameters(), buffers(), children() and the rest are generators: eager walks
# the module when each item is drawn, the trace walks it when the generator is made. A store recorded
# between the two (`gen = self.buffers(); self.b = x * 2; list(gen)`, `self.a = None`, register_buffer)
# made the trace yield the old entries (red team 16). Any recorded mutation other than a tensor write
# before a step breaks where the walk was made, so that call runs as Python and the generator is drawn
# lazily, as for generator functions (NOTE [Eager generators]). A walk that outlives the graph (returned,
# stored, live at a break) is rebuilt as the real generator (codegen_runtime.walk_at: made again on the unchanged
# module and drawn as far as the trace drew it), so a store after the graph or at the break itself
# (`self.a = None` breaks when `a` is a submodule) is seen by the items drawn later, as in eager. A for
# loop over a walk that breaks in its body then steps that generator as Python (NOTE [Iterators stepped
# as Python]), its body a resume function.
def _lazy_walk(tx, fn, iterator: IteratorValue) -> IteratorValue:
    effects = tx.output.side_effects
    made = effects.version - effects.tensor_writes - effects.module_flag_stores
    root = tx
    while root.parent is not None:
        root = root.parent
    made_at = root.current.index if root.current is not None else None

    def check() -> None:
        if effects.version - effects.tensor_writes - effects.module_flag_stores != made:  # NOTE [Flag stores
            # during module walks] in side_effects.py
            e = Unsupported(BreakKind.SIDE_EFFECT, f"state changed while {fn.__name__}() is drawn: it walks the "
                                                   "module lazily, as Python")
            e.root_index = made_at
            raise e
    iterator.check = check
    return iterator


def store_into_module(tx, module: NNModuleValue, name: str, value: Value) -> bool:
    """`module.name = value` for a module from outside: True when made here as a write into `_parameters`
    (NOTE [Parameters registered in the trace]); False for the usual attribute store (checked here)."""
    from .parameter_stores import register_parameter_store
    if register_parameter_store(tx, module, name, value):
        return True
    check_marked_store(tx, module, name, value)
    return False


def check_marked_store(tx, module: Value, name: str, value: Value) -> None:
    """NOTE [Registering stores into modules]: Module.__setattr__ also registers a plain tensor marked
    `_is_buffer` (what `nn.Buffer(t)` returns) or `_is_param` (its isinstance checks go through
    _BufferMeta/_ParameterMeta), so `m.c = t` for such a `t` from outside made `c` a buffer that a later
    `named_buffers()` in the same graph missed (red team 16). Such a store breaks, as a Parameter's does,
    unless it re-files a buffer under its own name (NOTE [Buffers stored back under their name])."""
    from .type_checks import _TENSOR_MARKERS, _marked_tensor
    for spec in _TENSOR_MARKERS:
        marked = _marked_tensor(tx, value, spec)
        if marked is not None and marked.as_constant() and not (
                spec is not torch.nn.Parameter and _buffer_stored_back(tx, module, name, value)):
            raise Unsupported(BreakKind.SIDE_EFFECT, f"registering {name!r} (a tensor marked as a "
                                                     f"{spec.__name__}) on a module inside the graph")


# NOTE [Buffers stored back under their name]: `self.pe = self.extend_pe(x, self.pe)` (transformers'
# relative positional embeddings: SeamlessM4T, Wav2Vec2-Conformer) stores a tensor marked `_is_buffer`
# (often the buffer itself) under the name of a registered buffer. Module.__setattr__ then calls
# register_buffer(name, t, t.persistent), which does exactly what a plain tensor stored under that name
# does (register_buffer(name, t, name not in _non_persistent_buffers_set)) when `t.persistent` keeps the
# name's persistence: the store is recorded like any store under a buffer's name (NOTE [Stores under a
# buffer's name]; replayed by the real setattr after the graph, later reads in the trace see `t`). The two
# facts are guarded on the module (the name is a buffer, and its persistence), so a later call where
# either changed retraces. A new name, or a change of persistence, still breaks.
def _buffer_stored_back(tx, module: Value, name: str, value: Value) -> bool:
    mod = getattr(module, "obj", None)
    if not isinstance(mod, torch.nn.Module) or getattr(module, "source", None) is None or \
            name not in (mod.__dict__.get("_buffers") or {}):
        return False
    try:
        persistent = tx.getattr(value, "persistent")
    except UserException:
        return False
    keeps = name not in mod._non_persistent_buffers_set
    if not persistent.is_constant() or persistent.as_constant() is not keeps:
        return False
    e = module.source.expr(tx.output.names)
    tx.output.add_guard("MODULE_BUFFER", f"{name!r} in {e}._buffers", module.source,
                        expected=f"{name!r} a buffer of the module")
    tx.output.add_guard("MODULE_BUFFER", f"({name!r} in {e}._non_persistent_buffers_set) is {not keeps}",
                        module.source, expected=f"buffer {name!r} {'persistent' if keeps else 'not persistent'}")
    return True


def _options(fn, args: list[Value], kwargs: dict[str, Value]) -> dict:
    names = {"parameters": ("recurse",), "buffers": ("recurse",),
             "named_parameters": ("prefix", "recurse", "remove_duplicate"),
             "named_buffers": ("prefix", "recurse", "remove_duplicate"),
             "named_modules": ("memo", "prefix", "remove_duplicate")}.get(fn.__name__, ())
    options = dict(zip(names, (a.as_constant() for a in args)))
    options.update({k: v.as_constant() for k, v in kwargs.items()})
    if options.get("memo") is not None or type(options.get("prefix", "")) is not str:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.__name__}() with a memo or a non-str prefix")
    return options


def _walk(tx, root: NNModuleValue, options: dict, slot: str):
    """(path, module value, entry name) in torch's order, skipping None entries and, unless
    `remove_duplicate=False` (torch.func.functional_call asks for it), entries seen before."""
    seen: set[int] = set()
    unique = options.get("remove_duplicate", True) is not False
    recurse = options.get("recurse", True)
    modules = [("", root)]
    distinct: list = []  # NOTE [Walks that skip duplicates]
    if slot == "children":
        check_walk(tx, root)  # NOTE [Child tables written in the frame]
        tx.guard_module_keys(root)
        for name, child in root.obj._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                value = _child(tx, root, name)
                distinct.append(value.source)
                yield "", value, name
            elif child is not None:
                _child(tx, root, name)  # read through its source: guarded to alias the first
            else:
                _guard_none(tx, root, "_modules", name)
        _guard_distinct(tx, distinct)
        return
    if recurse or slot == "modules":
        modules = _all_modules(tx, root, unique)
        if unique:
            distinct += [value.source for _, value in modules]
    for path, module_value in modules:
        if slot == "modules":
            if not unique or id(module_value.obj) not in seen:
                seen.add(id(module_value.obj))
                yield "", module_value, path
            continue
        table = getattr(module_value.obj, slot)
        from .attributes import traced_slot
        traced = traced_slot(tx, module_value, slot)
        if traced is not None and (getattr(traced, "written", None) or getattr(traced, "materialized", True)):
            # NOTE [Module slots written while tracing]: the real dict is not what the program sees now
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"iterating a module's {slot} written while tracing")
        tx.output.side_effects.check_dict_read(table)  # NOTE [Stores under a buffer's name]
        _guard_keys(tx, module_value, slot)
        for name, value in table.items():
            if value is not None and (not unique or id(value) not in seen):
                seen.add(id(value))
                if unique:
                    distinct.append(DictSlotSource(module_value.source, slot, name))
                yield path, module_value, name
            elif value is not None:  # a duplicate: read through its source, guarded to alias the first
                wrap(tx.output, value, DictSlotSource(module_value.source, slot, name))
            else:
                _guard_none(tx, module_value, slot, name)
    _guard_distinct(tx, distinct)


# NOTE [Walks that skip duplicates]: parameters(), named_modules(), children() and friends skip an entry
# whose object was already seen (a shared submodule, a tied weight): the walk relies on which entries are
# one object. A repeated entry is read through its second source and guarded to alias the first (NOTE
# [Objects by identity]); the entries found distinct are guarded to stay distinct, so tying two weights or
# sharing a submodule after the first call (`m.layers[0] = m.layers[1]`) fails the guard instead of
# walking the old, longer list.
def _guard_distinct(tx, sources: list) -> None:
    if len(sources) < 2:
        return
    exprs = [source.expr(tx.output.names) for source in sources]
    tx.output.add_guard("NO_ALIASING", f"___distinct_objects({', '.join(exprs)})", None,
                        expected="distinct modules/parameters (a walk that skips duplicates)", cost=COST_TENSOR + 1)


def _all_modules(tx, root: NNModuleValue, unique: bool = True) -> list[tuple[str, NNModuleValue]]:
    """Every module below `root` with its dotted path, as `named_modules(remove_duplicate=unique)` walks
    them (a shared submodule is visited again under each of its names when not `unique`)."""
    result, seen = [], set()

    def visit(path: str, value: NNModuleValue) -> None:
        if id(value.obj) in seen:
            return
        if unique:
            seen.add(id(value.obj))
        result.append((path, value))
        check_walk(tx, value)  # NOTE [Child tables written in the frame]
        tx.guard_module_keys(value)
        for name, child in value.obj._modules.items():
            if child is not None:
                visit(f"{path}.{name}" if path else name, _child(tx, value, name))
            else:
                _guard_none(tx, value, "_modules", name)

    visit("", root)
    return result


# NOTE [Entries set to None]: `m.sub = None` (or register_buffer/register_parameter(name, None)) keeps the
# name in the dict with None, which the walks skip; the key list guard still holds when the entry is set
# back to a module or tensor (`m.sub = nn.Sigmoid()`), so a skipped None is guarded to stay None (red team
# 16: children() kept walking one child after `m.a = None; m.a = nn.Sigmoid()`).
def _guard_none(tx, parent: NNModuleValue, slot: str, name: str) -> None:
    tx.output.guard_constant(DictSlotSource(parent.source, slot, name), None)


def _child(tx, parent: NNModuleValue, name: str) -> NNModuleValue:
    return wrap(tx.output, parent.obj._modules[name], DictSlotSource(parent.source, "_modules", name))


def _guard_keys(tx, module_value: NNModuleValue, slot: str) -> None:
    e = module_value.source.expr(tx.output.names)
    keys = list(getattr(module_value.obj, slot))
    tx.output.add_guard("MODULE_KEYS", f"___list({e}.{slot}) == {keys!r}", module_value.source,
                        expected=repr(keys), actual=f"___list({e}.{slot})")


def graph_break(reason: str):
    """Called from substitutes: a step that cannot be traced (the translator never inlines it)."""
    raise RuntimeError(reason)


def disabled_reason(f, args: list[Value]) -> str:
    """Why a call of the framejit.disable'd `f` breaks: a substitute's `graph_break(reason)` logs its reason (the
    log said only "graph_break is marked framejit.disable", not that a reentrant checkpoint was the cause)."""
    if f is graph_break and len(args) == 1 and args[0].is_constant():
        return str(args[0].as_constant())
    return f"{f.__qualname__} is marked framejit.disable"


# NOTE [RNN flat weights]: nn.LSTM/GRU/RNN keep their weights twice, as parameters and in the list
# `_flat_weights`, and `_update_flat_weights()` resynchronises the list through weak references before
# each forward. The substitute below instead checks, while tracing, that each list entry *is* the
# parameter of the same name: both reads go through sources, so the check becomes an alias guard, and a
# replaced weight recompiles instead of being missed. The rest of forward is inlined as written.
def _rnn_update_flat_weights(self):
    for index, name in enumerate(self._flat_weights_names):
        if self._flat_weights[index] is not getattr(self, name):
            graph_break("RNN flat weights are out of sync with its parameters")


# NOTE [Module.to without a change]: `module.to(dtype)` inside forward (switch_transformers' router casts
# its classifier on every call) converts each floating parameter and buffer (and their grads, which torch
# keeps in their parameter's dtype and device); in eager
# `Tensor.to` returns the very same tensor when it already has that dtype and device, so the module is
# left as it was. The substitute checks exactly that over the module tree (the tree, the dtypes and the
# devices it reads are guarded like any read of them) and returns the module; a conversion that would
# change a tensor, a memory format or complex dtype, or a module with its own `_apply` is a graph break,
# and the original runs. `torch._C._nn._parse_to` of constants is evaluated at trace time.
def _module_to(self, *args, **kwargs):
    device, dtype, non_blocking, convert_to_format = torch._C._nn._parse_to(*args, **kwargs)
    if dtype is not None and not (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(f"nn.Module.to only accepts floating point or complex dtypes, but got desired dtype={dtype}")
    if convert_to_format is not None or (dtype is not None and dtype.is_complex):
        graph_break("Module.to with a memory format or a complex dtype")
    for module in self.modules():
        if type(module)._apply is not torch.nn.Module._apply:
            graph_break("Module.to of a module with its own _apply")
        for tensor in [*module.parameters(recurse=False), *module.buffers(recurse=False)]:
            if _converts(tensor, device, dtype):  # (a grad has its parameter's dtype and device)
                graph_break("Module.to that converts a parameter or buffer")
    return self


def _converts(t, device, dtype) -> bool:
    if dtype is not None and (t.is_floating_point() or t.is_complex()) and t.dtype != dtype:
        return True
    return device is not None and t.device != device


SUBSTITUTES = {RNNBase._update_flat_weights: _rnn_update_flat_weights, torch.nn.Module.to: _module_to}


def _parse_to(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`torch._C._nn._parse_to(*args)` on constants: (device, dtype, non_blocking, memory_format)."""
    from .breaks import UserException
    if not all(a.is_constant() for a in args) or not all(v.is_constant() for v in kwargs.values()):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch._C._nn._parse_to of non-constant arguments")
    try:
        parsed = torch._C._nn._parse_to(*(a.as_constant() for a in args),
                                        **{k: v.as_constant() for k, v in kwargs.items()})
    except Exception as e:  # noqa: BLE001 - the parse error eager raises
        raise UserException(e) from None
    return TupleValue([ConstantValue(x) for x in parsed])


def _register_handlers() -> None:
    from . import foreach_groups, higher_order  # noqa: F401  (register their handlers: NOTE [Associative scan],
    # NOTE [Gradient clipping])
    from .builtins import BUILTIN_HANDLERS
    BUILTIN_HANDLERS[torch._C._nn._parse_to] = _parse_to
    from .module_hooks import TRACE_TIME
    TRACE_TIME[torch.nn.Module.__init__] = lambda tx, args, kwargs: _module_init_at_trace_time(tx, args, kwargs)


_register_handlers()


# NOTE [Dynamo's tagging Module.__init__]: importing torch._dynamo (any torch.compile in the process, also a
# library's `from torch._dynamo import allow_in_graph`) replaces torch.nn.Module.__init__ with a wrapper that
# calls the original and records the module in Dynamo's GenerationTracker (a weak dictionary). A module made
# while tracing then reached that wrapper in `super().__init__()` and broke at the weak-dictionary store
# (an activation module built in forward: 1 graph without Dynamo imported, a break with it). The wrapper is
# traced as the original it wraps: the tag is Dynamo's own bookkeeping of modules it may compile, and a
# module made while tracing never leaves the trace (NOTE [Modules made while tracing that outlive the trace]).
def unwrap_dynamo_tagging_init(fn):
    """The Module.__init__ that Dynamo's tagging wrapper `fn` calls, or None when `fn` is not that wrapper."""
    code = getattr(fn, "__code__", None)
    if code is None or code.co_name != "patched_init" or getattr(fn, "__module__", None) != "torch._dynamo.mutation_guard":
        return None
    cells = dict(zip(code.co_freevars, fn.__closure__ or ()))
    inner = cells["init"].cell_contents if "init" in cells else None
    return inner if callable(inner) else None


# NOTE [Modules made while tracing]: `torch.nn.Softmax(dim=-1)(x)` or `SmallNN()(x, y)` inside the
# compiled code builds a module and calls it. When every constructor argument is a constant and every
# `__init__` the class runs is torch's own (the class is from torch.nn, or a subclass that defines no
# `__init__`), the module is built for real at trace time: what it holds follows from the guarded class
# and the constant arguments alone. A module that then owns parameters or buffers (their values come from
# the RNG, and each eager call makes fresh ones) is a graph break, with the RNG state put back. The
# module has no source: its forward is inlined like any module's; storing into it, or letting it escape
# the frame, is a graph break at its construction (NOTE [Modules made while tracing that outlive the
# trace]). A class with its own Python __init__: NOTE [Modules with their own __init__ made while tracing].
def construct_module(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> Value:
    name = cls.__name__
    if not all(a.is_constant() for a in args) or not all(v.is_constant() for v in kwargs.values()):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"creating the module {name} from non-constant arguments")
    user_init = _user_init(cls)
    rng = torch.random.get_rng_state()
    try:
        if user_init is not None:  # NOTE [Modules with their own __init__ made while tracing]
            module = _construct_with_user_init(tx, cls, args, kwargs)
        else:
            module = _construct_for_real(cls, args, kwargs)
    finally:
        made_tensors = not torch.equal(rng, torch.random.get_rng_state())
        if made_tensors:
            torch.random.set_rng_state(rng)
    if made_tensors or any(True for _ in module.parameters()) or any(True for _ in module.buffers()):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"creating the module {name} (it owns parameters or buffers)")
    value = NNModuleValue(module)
    mark_made(tx, value)  # NOTE [Modules made while tracing that outlive the trace]
    return value


def _construct_for_real(cls: type, args: list[Value], kwargs: dict[str, Value]) -> torch.nn.Module:
    try:
        return cls(*(a.as_constant() for a in args), **{k: v.as_constant() for k, v in kwargs.items()})
    except Exception as e:  # noqa: BLE001 - the constructor's own error, as eager raises it
        from .breaks import UserException
        raise UserException(e) from None


def _user_init(cls: type):
    """The first `__init__` on cls's MRO (up to nn.Module) that is not torch's own, or None."""
    for klass in cls.__mro__:
        if klass is torch.nn.Module:
            return None
        if "__init__" in vars(klass) and not _torch_module_class(klass):
            return vars(klass)["__init__"]
    return None


# NOTE [Modules with their own __init__ made while tracing]: transformers builds activation modules inside
# forward (`ACT2FN["gelu"](x)`: ClassInstantier returns `GELUActivation()`, whose `__init__` calls
# `super().__init__()` and stores `self.act = nn.functional.gelu`); stock torch.compile traces that. Such a
# class (constant arguments, object's __new__, type's __call__, no __del__, nn.Module's __setattr__ and
# __delattr__, no `call_super_init`: all lookups guarded) is built as object.__new__(cls), then its __init__
# inlined with `self` a module made in the trace and marked under construction. While it is, torch's
# `Module.__init__` on it runs for real at trace time (TRACE_TIME), and a store into it is made for real
# (Module.__setattr__, which then runs no user code: no global module registration hook) when the value is
# a real Python object known at trace time: an immutable constant, a class or builtin, a function from
# outside, a method bound to the module itself, a partial of those, a module made in the trace. Any other
# store (a tensor, a list, a method of another object, a value made while tracing) is a graph break, and
# so is an error of the store itself (a module stored before Module.__init__ raises as eager does). The
# object is fresh and reaches nothing outside, so nothing but it changes; its effects on anything else
# (a global counter) are traced and replayed as any inlined code's. Later reads of what __init__ stored are
# facts of that guarded construction (made_module_attr). Afterwards the module is checked like any module
# made while tracing (no parameters or buffers, no RNG use: NOTE [Modules made while tracing]).
def _construct_with_user_init(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> torch.nn.Module:
    from .calls import _guard_plain_construction, _has_finalizer
    from .lookup import guard_lookup, is_module_default
    init = getattr(cls, "__init__")
    if cls.__new__ is not object.__new__ or type(cls).__call__ is not type.__call__ or _has_finalizer(cls) or \
            not isinstance(init, types.FunctionType) or not is_module_default(cls.__setattr__, "__setattr__") or \
            not is_module_default(cls.__delattr__, "__delattr__") or getattr(cls, "call_super_init", False):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"creating the module {cls.__name__} inside compiled code "
                                                      f"({cls.__name__}.__init__)")
    _guard_plain_construction(tx, cls)
    for name in ("__setattr__", "__delattr__", "call_super_init"):
        guard_lookup(tx.output, cls, name)
    module = object.__new__(cls)
    value = NNModuleValue(module)
    mark_made(tx, value)
    value.under_construction = True
    try:
        result = tx.inline(UserFunctionValue(init), [value, *args], kwargs)
    finally:
        value.under_construction = False
    if not (result.is_constant() and result.as_constant() is None):
        from .breaks import UserException
        raise UserException(TypeError(f"__init__() should return None, not '{result.python_type().__name__}'"))
    if "_parameters" not in vars(module):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__name__}.__init__ did not call Module.__init__")
    return module


def _module_init_at_trace_time(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`super().__init__()` of a module under construction (NOTE [Modules with their own __init__ made
    while tracing]): torch's Module.__init__ run for real on the fresh object."""
    if not args or not getattr(args[0], "under_construction", False) or \
            not all(a.is_constant() for a in args[1:]) or not all(v.is_constant() for v in kwargs.values()):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "nn.Module.__init__ called inside compiled code")
    try:
        torch.nn.Module.__init__(args[0].obj, *(a.as_constant() for a in args[1:]),
                                 **{k: v.as_constant() for k, v in kwargs.items()})
    except Exception as e:  # noqa: BLE001 - Module.__init__'s own error (unexpected arguments), as eager raises it
        from .breaks import UserException
        raise UserException(e) from None
    return ConstantValue(None)


def store_during_construction(tx, obj: Value, name: str, value: Value) -> None:
    """`self.name = value` inside the __init__ of a module under construction: made for real (NOTE
    [Modules with their own __init__ made while tracing])."""
    real = _real_object(obj, value)
    if real is _NO_REAL:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"a store of {value.describe()} into the module "
                                                      f"{type(obj.obj).__name__} under construction")
    if isinstance(real, torch.nn.Module) and torch.nn.modules.module._global_module_registration_hooks:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a module stored into a module under construction while a "
                                                      "global module registration hook is registered")
    try:
        setattr(obj.obj, name, real)
    except Exception as e:  # noqa: BLE001 - Module.__setattr__'s own error, as eager raises it
        from .breaks import UserException
        raise UserException(e) from None


def made_module_attr(owner: Value, real):
    """An instance attribute of a module made in the trace: what its __init__ stored (facts of the guarded
    construction, so no guards); a method bound to the module and a partial become their traced values."""
    from .values import BoundMethodValue, PartialValue
    from .values.builder import wrap_unguarded
    if isinstance(real, types.MethodType) and real.__self__ is owner.obj and \
            isinstance(real.__func__, types.FunctionType):
        return BoundMethodValue(UserFunctionValue(real.__func__), owner)
    if type(real) is functools.partial:
        return PartialValue(made_module_attr(owner, real.func), [made_module_attr(owner, a) for a in real.args],
                            {k: made_module_attr(owner, v) for k, v in real.keywords.items()})
    if isinstance(real, (types.MethodType, torch.nn.Module)):  # not stored by a traced construction
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"the attribute {real!r} of a module made in the trace")
    return wrap_unguarded(real)


_NO_REAL = object()


def _immutable(obj) -> bool:
    if isinstance(obj, (tuple, frozenset)):
        return all(_immutable(o) for o in obj)
    return not isinstance(obj, (list, dict, set, bytearray))


def _real_object(owner: Value, value: Value):
    """The real Python object `value` stands for, when it is known at trace time, else _NO_REAL."""
    from .values import BoundMethodValue, BuiltinValue, ClassValue, PartialValue
    if isinstance(value, (BuiltinValue, ClassValue)) and not isinstance(value.obj, (types.MethodType, functools.partial)):
        return value.obj
    if value.is_constant():  # a list or dict would be a new container the trace stops modelling: a break
        real = value.as_constant()
        return real if _immutable(real) else _NO_REAL
    if isinstance(value, NNModuleValue) and (value is owner or getattr(value, "made_in_trace", False)):
        return value.obj
    if isinstance(value, UserFunctionValue) and value.attrs is None and value.closure is None and \
            value.defaults is None and value.kwdefaults is None:
        return value.fn
    if isinstance(value, BoundMethodValue) and value.self_value is owner:  # `self.act = self._scaled`
        func = _real_object(owner, value.func)
        return types.MethodType(func, owner.obj) if isinstance(func, types.FunctionType) else _NO_REAL
    if isinstance(value, PartialValue) and value.keywords is None:
        parts = [_real_object(owner, v) for v in (value.func, *value.args, *value.kwargs.values())]
        if any(p is _NO_REAL or isinstance(p, torch.nn.Module) for p in parts):
            return _NO_REAL
        return functools.partial(parts[0], *parts[1:1 + len(value.args)],
                                 **dict(zip(value.kwargs, parts[1 + len(value.args):])))
    return _NO_REAL


# NOTE [Modules made while tracing that outlive the trace]: the module object made at trace time is a fact
# of the trace, never handed out: eager makes a new one per call. One that would outlive the graph (returned,
# stored outside the frame by a replayed effect, or live in the root frame at a graph break: a store into it
# after its construction, `m.eval()`, a hook registered on it) moves the break to the root instruction that
# made it (NOTE [Breaks moved earlier] in convert.py), so that call runs as Python and its module is real;
# the rest of the frame is traced with it as a local. `made_at` is that instruction; a submodule read from
# such a module shares it.
def mark_made(tx, value: NNModuleValue) -> None:
    from .lazy_combinators import _root_index
    value.made_in_trace = True  # never rebuilt after the graph (codegen.Reconstructor)
    value.made_at = _root_index(tx)
    tx.output.__dict__.setdefault("made_modules", []).append(value)


def made_module_site(output, roots: list) -> int | None:
    """The earliest root instruction that made a module made in the trace (or an OrderedDict given
    attributes: NOTE [Attributes of OrderedDicts made while tracing]) reachable from `roots`."""
    if not output.__dict__.get("made_modules"):
        return None
    sites = [v.made_at for v in _reachable(roots) if getattr(v, "made_at", None) is not None and
             (isinstance(v, NNModuleValue) and getattr(v, "made_in_trace", False) or getattr(v, "extra_attrs", None))]
    return min(sites, default=None)


# NOTE [Attributes of OrderedDicts made while tracing]: `Module.state_dict()` makes
# `destination = OrderedDict()` and stores `destination._metadata = OrderedDict()` (an OrderedDict instance
# has a __dict__, a plain dict has none); that store broke, so `self.state_dict()` inside forward (an EMA
# update, a checksum of the weights) was a break in every module it walked. An attribute stored into an
# OrderedDict made in the trace is kept on its value (`extra_attrs`, read back by attributes.getattr_value).
# The emitted code rebuilds such a dict without them, so one that would outlive the graph (returned, stored
# outside, live at a break) breaks at the root instruction that made the first attribute store instead
# (made_at, as NOTE [Modules made while tracing that outlive the trace]): that call runs as Python.
def store_into_new_ordered_dict(tx, obj: Value, name: str, value: Value) -> None:
    from .lazy_combinators import _root_index
    if getattr(obj, "extra_attrs", None) is None:
        obj.extra_attrs = {}
        obj.made_at = _root_index(tx)
        tx.output.__dict__.setdefault("made_modules", []).append(obj)
    obj.extra_attrs[name] = value


def _reachable(roots: list):
    """Every abstract value reachable from `roots` through containers and the attributes of values."""
    from .values import Value
    seen: set[int] = set()
    todo = list(roots)
    while todo:
        v = todo.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, (list, tuple, set, frozenset)):
            todo.extend(v)
        elif isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())
        elif isinstance(v, Value) or type(v).__module__.startswith("framejit.capture.values"):
            if isinstance(v, Value):
                yield v
            todo.extend(getattr(v, "__dict__", {}).values())
            todo.extend(getattr(v, slot) for slot in getattr(type(v), "__slots__", ()) if hasattr(v, slot))


def _torch_module_class(klass: type) -> bool:
    module = getattr(klass, "__module__", "") or ""
    return module.startswith("torch.nn.") or klass is torch.nn.Module
