"""Calls over abstract values: what `f(*args, **kwargs)` means for each kind of callable.

User functions and methods are inlined (Translator.inline); nn.Modules inline their forward, with their forward
hooks around it (module_hooks.py); torch functions and Tensor methods become graph nodes; Python builtins are
modelled in builtins.py, container methods in container_methods.py; classes construct namedtuples, dataclasses
and plain objects."""
from __future__ import annotations

import contextlib
import enum
import functools
import re
import types
from typing import Any

import torch

from ..guards.plain_reads import is_a
from . import lookup
from .breaks import BreakKind, Unsupported, UserException
from .compiled_callees import compiled_function, original_module
from .python_draws import drawing_call, record_draw
from .module_protocol import ModuleSliceValue
from .protocol import constant_fold, hashable as _hashable
from .values import (BoundMethodValue, BuiltinValue, ClassValue, ConstantValue, NewObjectValue, NNModuleValue,
                     ObjectValue, PartialValue, TensorMethodValue, TensorValue, TupleValue, UserFunctionValue, Value)
from .vmap_capture import check_functorch_call
from .torch_function_inline import route_call
from .unstarted_generators import inline_noting_generators
from .unbound_tensor_methods import (OBJECT_PROTOCOL_BREAKS, check_detach_, tensor_method_for, tensor_method_name,
                                     unbound_tensor_method)

# Tensor methods that read data into Python or touch state outside the graph.
TENSOR_METHODS_UNSUPPORTED = {
    "item": BreakKind.DATA_DEPENDENT, "tolist": BreakKind.DATA_DEPENDENT, "numpy": BreakKind.DATA_DEPENDENT,
    "__bool__": BreakKind.DATA_DEPENDENT, "__int__": BreakKind.DATA_DEPENDENT,
    "__float__": BreakKind.DATA_DEPENDENT, "__index__": BreakKind.DATA_DEPENDENT,
    "backward": BreakKind.UNSUPPORTED_CALL, "register_hook": BreakKind.UNSUPPORTED_CALL,
    "retain_grad": BreakKind.UNSUPPORTED_CALL, "requires_grad_": BreakKind.SIDE_EFFECT,
    "data_ptr": BreakKind.UNSUPPORTED_CALL, "storage": BreakKind.UNSUPPORTED_CALL, **OBJECT_PROTOCOL_BREAKS,
    "untyped_storage": BreakKind.UNSUPPORTED_CALL, "share_memory_": BreakKind.SIDE_EFFECT,
    "set_": BreakKind.SIDE_EFFECT, "resize_": BreakKind.SIDE_EFFECT, "__setstate__": BreakKind.SIDE_EFFECT,
    # facts of the real tensor that fake tensors do not carry (fakes answered False: red team, test_redteam2.py)
    "is_set_to": BreakKind.UNSUPPORTED_CALL, "is_inference": BreakKind.UNSUPPORTED_CALL,
    # the storage's shared-memory / pinned state (share_memory_(), pin_memory()), not guarded (red team 9)
    "is_shared": BreakKind.UNSUPPORTED_CALL, "is_pinned": BreakKind.UNSUPPORTED_CALL,
    "_is_view": BreakKind.UNSUPPORTED_CALL,  # an input's view-ness: fakes answered False for base[:2]
}

# torch functions with effects on global state, or that read data into Python: never graph nodes.
TORCH_FUNCTIONS_UNSUPPORTED = {
    torch.manual_seed, torch.seed, torch.set_printoptions, torch.save, torch.load,
    torch.set_num_threads, torch.use_deterministic_algorithms, torch.set_rng_state, torch.get_rng_state,
    torch.is_nonzero, torch.equal, torch.allclose, torch.autograd.grad, torch.autograd.backward,
    torch._nested_tensor_from_mask_left_aligned,  # a bool from the mask's data (fake tensors answer True)
    torch.is_inference,  # the real tensor's inference flag, which fakes do not carry
}

# re.Pattern and re.Match: NOTE [Regular expressions on constants] in library_substitutes.py
_PURE_CONSTANT_TYPES = (str, int, float, bool, tuple, bytes, torch.Size, torch.dtype, torch.device, complex,
                        type(None), range, slice, frozenset, re.Pattern, re.Match)


# NOTE [Imports of call_value]: the modules call_value dispatches to import this one, so they are imported when
# it first runs (as before), and their names bound as this module's globals once: the ten import statements
# it ran on every call cost 16-18 us per call (measured on the loaded 2-core machine; the check is 0.07 us), and
# every call a trace makes goes through call_value.
_CALL_VALUE_IMPORTS_BOUND = False


def _bind_call_value_imports() -> None:
    global _CALL_VALUE_IMPORTS_BOUND
    from .context import CloneValue, CtxValue, ExitValue, exit_
    from .generator_ctx import (OUTSIDE_CM_METHODS, GenCtxValue, GenMethodValue, call_cm_method, call_gen_method,
                                call_torch_ctx_method, decorate_with_generator_cm)
    from .abc_methods import abc_method_handler
    from .allowed_calls import call_allowed, is_allowed_in_graph
    from .autograd_function import call_apply, is_function_apply
    from .cached_calls import call_cached, call_dispatch, is_cached_function, is_singledispatch_dispatch
    from .entry_checks import entry_check, record_entry_check
    from .environ import call_environ, is_environ_read
    from .introspection import introspection_handler, signature_bind_method
    from .library_substitutes import call_pure, is_pure_on_constants
    from .fx_modules import calls_module_call
    from .lazy_generators import LazyGenMethodValue, call_lazy_gen_method
    from .weak_refs import call_read_weak_ref, is_read_weak_ref
    from .numpy_support import NdarrayMethodValue, call_method, call_numpy, involves_ndarray, numpy_callable
    globals().update(locals())
    _CALL_VALUE_IMPORTS_BOUND = True


def call_value(tx, fn: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """The value of `fn(*args, **kwargs)` in the trace: inlined, recorded as graph nodes, answered at trace
    time, or Unsupported (a graph break)."""
    if not _CALL_VALUE_IMPORTS_BOUND:  # NOTE [Imports of call_value]
        _bind_call_value_imports()
    result = _call_numpy_or_tensor_maker(tx, fn, args, kwargs)
    result = route_call(tx, fn, args, kwargs) if result is _UNHANDLED else result  # NOTE [Inlined __torch_function__]
    if result is not _UNHANDLED and result is not None:
        return result
    if isinstance(fn, UserFunctionValue):
        return _call_user_function(tx, fn, args, kwargs)
    if is_function_apply(fn):  # NOTE [Custom autograd functions without grad]
        return call_apply(tx, fn, args, kwargs)
    if isinstance(fn, BoundMethodValue):
        return _call_bound_method(tx, fn, args, kwargs)
    if isinstance(fn, PartialValue):
        if fn.keywords is not None:  # NOTE [Reads past writes through a namespace dict]: `p.keywords[k] = v`
            tx.output.side_effects.check_namespace_read(fn.keywords, "keywords")
        return call_value(tx, fn.func, [*fn.args, *args], {**fn.kwargs, **kwargs})
    if isinstance(fn, TensorMethodValue):
        return call_tensor_method(tx, fn.tensor, fn.name, args, kwargs)
    if isinstance(fn, NNModuleValue):
        return call_module(tx, fn, args, kwargs)
    if isinstance(fn, ModuleSliceValue) and fn.sequential:
        result = args[0] if len(args) == 1 and not kwargs else _raise_type("Sequential takes one input")
        for child in fn.items:
            result = call_value(tx, child, [result], {})
        return result
    if isinstance(fn, BuiltinValue):
        return _call_builtin_value(tx, fn, args, kwargs)
    return _call_other(tx, fn, args, kwargs)


_UNHANDLED = object()


def _call_numpy_or_tensor_maker(tx, fn: Value, args: list[Value], kwargs: dict[str, Value]) -> Any:
    """NumPy calls (NOTE [NumPy as torch]), lazy generator methods, `torch.tensor` of symbolic ints; else _UNHANDLED."""
    if isinstance(fn, NdarrayMethodValue):  # NOTE [NumPy as torch]
        return call_method(tx, fn, args, kwargs)
    if isinstance(fn, LazyGenMethodValue):  # NOTE [Generators driven by send]; [Lent iterators]: a lent one's next()
        return call_lazy_gen_method(tx, fn, args, kwargs) if fn.gen.lent_at is None else fn.gen.next()  # breaks
    real_numpy = numpy_callable(fn)
    if real_numpy is not None:
        return call_numpy(tx, real_numpy, args, kwargs)
    if isinstance(fn, BuiltinValue) and _is_graph_op(fn.obj) and involves_ndarray(*args, *kwargs.values()):
        from .numpy_scalars import torch_call_arguments  # NOTE [Dynamic NumPy scalars]
        numbers = torch_call_arguments(fn.obj, args, kwargs)
        if numbers is not None:
            return call_value(tx, fn, *numbers)
        from .numpy_support import torch_call_on_arrays
        return torch_call_on_arrays(tx, fn.obj, args, kwargs)
    if isinstance(fn, BuiltinValue) and fn.obj is torch.linspace:
        from .sym_factories import linspace_of_symbolic_steps  # NOTE [Linspace of a symbolic length]
        made = linspace_of_symbolic_steps(tx, args, kwargs)
        if made is not None:
            return made
    if isinstance(fn, BuiltinValue) and fn.obj in (torch.tensor, torch.as_tensor) and args:
        from .sym_arith import tensor_of_ints  # NOTE [Tensors of symbolic ints]
        made = tensor_of_ints(tx, args, kwargs)
        if made is not None:
            return made
    return _UNHANDLED


def _call_user_function(tx, fn: UserFunctionValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    draw = drawing_call(tx, fn.fn, args, kwargs)  # `random.uniform(0, 1)`, `rng.gauss()`
    if draw is not None:  # NOTE [Draws from the random module]
        return record_draw(tx, draw)
    if fn.fn is entry_check:  # NOTE [Entry checks]
        return record_entry_check(tx, args, kwargs)
    if is_allowed_in_graph(tx, fn):  # NOTE [Allowed in graph]
        return call_allowed(tx, fn, args, kwargs)
    if fn.fn.__module__ in ("inspect", "dataclasses", "copy") and introspection_handler(fn.fn) is not None:
        return introspection_handler(fn.fn)(tx, args, kwargs)  # NOTE [Introspection at trace time]
    if is_singledispatch_dispatch(fn.fn):  # NOTE [singledispatch answered at trace time]
        result = call_dispatch(tx, fn, args, kwargs)
        if result is not None:
            return result
    if is_pure_on_constants(fn.fn):  # NOTE [Pure library checks on constants]
        result = call_pure(tx, fn.fn, args, kwargs)
        if result is not None:
            return result
    if fn.fn in OUTSIDE_CM_METHODS and args:  # `cm.__enter__()`, also `type(cm).__enter__(cm)` (ExitStack)
        called = call_cm_method(tx, fn.fn.__name__, args[0], args[1:], kwargs)
        if called is not None:  # NOTE [Generator context managers from outside]
            return called
    if args and isinstance(args[0], CtxValue) and getattr(args[0].cls, fn.fn.__name__, None) is fn.fn and \
            fn.fn.__name__ in ("__enter__", "__exit__"):  # NOTE [Torch managers entered by call]
        called = call_torch_ctx_method(tx, fn.fn.__name__, args[0], args[1:], kwargs)
        if called is not None:
            return called
    if args and abc_method_handler(BoundMethodValue(fn, args[0])) is not None:  # NOTE [Mapping mixins]
        return abc_method_handler(BoundMethodValue(fn, args[0]))(tx, args[1:], kwargs)  # `k in o`
    return inline_noting_generators(tx, fn, args, kwargs)  # NOTE [Unstarted generators rebuilt by their call]


def _call_bound_method(tx, fn: BoundMethodValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if is_environ_read(fn):  # NOTE [Environment reads]
        return call_environ(tx, fn, args, kwargs)
    if abc_method_handler(fn) is not None:  # NOTE [Mapping mixins]
        return abc_method_handler(fn)(tx, args, kwargs)
    if isinstance(fn.self_value, CtxValue) and isinstance(fn.func, BuiltinValue):  # `no_grad_instance.clone`
        return call_value(tx, tx.getattr(fn.self_value, fn.func.obj.__name__), args, kwargs)
    if getattr(fn, "symbolic_self", False):  # NOTE [Methods of symbolic ints]: the call needs the value, guarded
        return call_value(tx, tx.getattr(ConstantValue(fn.self_value.as_constant()), fn.func.obj.__name__), args, kwargs)
    return call_value(tx, fn.func, [fn.self_value, *args], kwargs)


def _call_builtin_value(tx, fn: BuiltinValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if isinstance(fn.obj, types.FunctionType) and \
            fn.obj.__name__ in ("__enter__", "__exit__"):  # NOTE [Exits of unmodelled context managers]
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.obj.__qualname__} of an object read as opaque")
    if signature_bind_method(fn.obj) is not None:  # NOTE [Binding a signature at trace time]
        return call_value(tx, signature_bind_method(fn.obj), args, kwargs)
    bound = _bound_slot_wrapper(tx, fn)
    if bound is not None:
        return call_value(tx, bound, args, kwargs)
    draw = drawing_call(tx, fn.obj, args, kwargs, fn.source)  # `random.random()`, `rng.random()`
    if draw is not None:  # NOTE [Draws from the random module]
        return record_draw(tx, draw)
    return call_builtin(tx, fn.obj, args, kwargs)


def _call_other(tx, fn: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if hasattr(type(fn), "call_in_trace"):  # a value that knows its own call (NOTE [vjp functions])
        return fn.call_in_trace(tx, args, kwargs)
    if isinstance(fn, ExitValue):
        return exit_(tx, fn)
    if isinstance(fn, GenMethodValue):  # NOTE [Generator context managers]
        return call_gen_method(tx, fn, args, kwargs)
    if isinstance(fn, GenCtxValue):  # `@cm(...)` over a function (NOTE [Context managers as decorators])
        return decorate_with_generator_cm(tx, fn, args, kwargs)
    if isinstance(fn, CloneValue):
        return fn.ctx.clone()
    if isinstance(fn, CtxValue) and fn.kind in ("grad", "saved_hooks"):  # NOTE [Context managers as decorators]
        from .generator_ctx import decorate_with_ctx
        return decorate_with_ctx(tx, fn, args, kwargs)
    if isinstance(fn, ClassValue):
        return call_class(tx, fn, args, kwargs)
    if is_cached_function(fn):  # NOTE [Cached functions]
        return call_cached(tx, fn, args, kwargs)
    from .stdlib import call_getter, getter_of
    if (getter := getter_of(tx, fn)) is not None:  # NOTE [Operator getters]
        return call_getter(tx, getter, args, kwargs)
    if (original := compiled_function(tx, fn)) is not None:  # NOTE [Compiled callables called while tracing]
        return call_value(tx, original, args, kwargs)
    if is_read_weak_ref(fn):  # NOTE [Weak references read from the program]
        return call_read_weak_ref(tx, fn, args, kwargs)
    if isinstance(fn, ObjectValue) and callable(fn.obj) or isinstance(fn, NewObjectValue) and _python_call(fn.cls):
        return tx.call_special_of(fn, "__call__", args, kwargs)  # on type(o) only: NOTE [Special method lookup]
    if fn.is_constant() and not callable(fn.as_constant()):
        raise UserException(TypeError(f"'{type(fn.as_constant()).__name__}' object is not callable"))
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"call of {fn.describe()}")


# NOTE [Exits of unmodelled context managers]: `with obj:` over an object framejit reads as opaque (a Builtin: a torch
# class it does not model, e.g. torch.autograd.profiler.record_function) is a break at BEFORE_WITH: the step enters it
# in Python and the resume function gets the bound `__exit__` on its stack, a method whose function is a BuiltinValue.
# Called like a torch function, the exit was folded to its constant result (None/False) and never ran (the autocast
# objects of 48ca1b2 left autocast switched on; record_function never closed its range). Calling a Python
# `__enter__`/`__exit__` read this way is a break now: the real method runs in Python at the break.
def _python_call(cls: type) -> bool:
    return isinstance(lookup.mro_lookup(cls, "__call__")[1], types.FunctionType)


def _raise_type(message: str):
    raise UserException(TypeError(message))


def call_tensor_method(tx, tensor: TensorValue, name: str, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if name == "type":
        from .stdlib import tensor_type
        return tensor_type(tx, tensor, args, kwargs)
    if name == "as_subclass":  # NOTE [Tensor subclasses traced as tensors]
        from .tensor_subclasses import as_subclass
        return as_subclass(tx, tensor, args, kwargs)
    if name == "numpy":  # NOTE [NumPy as torch]
        from .numpy_support import tensor_to_ndarray
        return tensor_to_ndarray(tx, tensor, args, kwargs)
    if name == "requires_grad_" and _requires_grad_unchanged(tensor, args, kwargs):
        return tensor  # already in that state: no effect (transformers' enable_input_require_grads hook)
    if name == "requires_grad_" and _fresh_leaf_without_grad(tensor, args, kwargs):
        return tx.output.call("call_method", name, (tensor, *args), kwargs)  # NOTE [requires_grad_ on fresh tensors]
    if name == "detach_":  # NOTE [detach_ of a tensor from outside] (unbound_tensor_methods.py)
        check_detach_(tensor)
    if name == "register_hook":
        from .tensor_hooks import register_hook  # NOTE [Tensor hooks registered after the graph]
        return register_hook(tx, tensor, args, kwargs)
    if name == "new_tensor" and len(args) == 1 and set(kwargs) <= {"dtype", "device"}:
        from .sym_arith import tensor_of_ints  # NOTE [Tensors of symbolic ints]
        options = {"dtype": ConstantValue(tensor.fake.dtype), "device": ConstantValue(tensor.fake.device), **kwargs}
        made = tensor_of_ints(tx, args, options)
        if made is not None:
            return made
    kind = TENSOR_METHODS_UNSUPPORTED.get(name)
    if name in ("item", "__int__", "__index__") and not args and not kwargs:
        from .packed_sequences import element_as_int  # NOTE [Packed sequences]
        element = element_as_int(tx.output, tensor)
        if element is not None:
            return element
        from .tensor_ints import python_int  # NOTE [Ints of tensors computed from sizes]
        element = python_int(tx.output, tensor, "item" if name == "item" else "int")
        if element is not None:
            return element
    if kind is not None:
        raise Unsupported(kind, f"Tensor.{name}() {'reads tensor data into Python' if kind is BreakKind.DATA_DEPENDENT else 'has effects outside the graph'}")
    return tx.output.call("call_method", tensor_method_for(name, args, kwargs), (tensor, *args), kwargs)  # NOTE [Tensor.new of a torch.Size]


def _sets_backend_state(fn: Any) -> bool:
    """`torch.backends.<x>.set_*` (cudnn/mkldnn `set_flags`) and `torch._C._set_*` not handled elsewhere:
    global backend state. Called like a graph op they would run at trace time, changing that state for
    real (measured: `torch.backends.cudnn.flags()` traced left cudnn disabled after the call)."""
    name, module = getattr(fn, "__name__", None) or "", getattr(fn, "__module__", None) or ""
    if not isinstance(name, str) or not isinstance(module, str):
        return False
    return (module.startswith("torch.backends") and name.startswith("set_")) or \
        (module == "torch._C" and name.startswith("_set_")) or \
        (module.split(".")[0] == "torch" and _TORCH_SETTER.match(name) is not None)


# NOTE [Torch state setters]: process-wide torch setters (`torch.set_anomaly_enabled`,
# `torch.set_float32_matmul_precision`, `torch.set_warn_always`, `torch.set_flush_denormal`,
# `torch.set_autocast_dtype`, `torch.set_default_device`, `torch.set_deterministic_debug_mode`, ...) return None
# and take no tensor: on the graph-op path their fake run changed the state for real at trace time and the
# None result was folded, so the compiled code never called them again (red team 11: the first call set
# anomaly mode, later calls did not). Any torch function whose name reads as a setter and that no handler
# models (set_default_dtype has one: NOTE [Default dtype changes]) is a graph break: it runs as Python.
_TORCH_SETTER = re.compile(r"^_*(set|use)_[a-z]")


# NOTE [Torch state changers by verb]: torch functions that change process-wide state without a `set_`/`use_`
# prefix (`torch.jit.enable_onednn_fusion(True)`, `torch.sparse.check_sparse_tensor_invariants.enable()`,
# `torch.autograd.forward_ad.enter_dual_level()`, `torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)`,
# `torch._C._jit_override_can_fuse_on_cpu(True)`, `torch._C._jit_set_profiling_executor(False)`) took the
# graph-op path: their fake run changed the state once, at trace time, and the constant result was folded, so a
# call that hit the entry never ran them (red team h12red3: the state reset between calls stayed reset after the
# 2nd compiled call; a second enter_dual_level, which eager refuses with RuntimeError, returned normally). Called
# with constant arguments only (a tensor factory never has one of these words in its name), a torch function
# whose name (snake_case or camelCase words) holds a word of _STATE_VERBS is a graph break: it runs as Python
# on every call. A getter called without arguments is not (NOTE [Zero-argument state getters]: it is guarded).
_STATE_VERBS = frozenset({
    "set", "enable", "disable", "enter", "exit", "push", "pop", "override", "reset", "clear", "seed", "allow",
    "preferred", "increment", "decrement", "register", "unregister", "install", "uninstall", "start", "stop",
    "lock", "unlock", "acquire", "release", "flush", "swap", "fork", "toggle", "synchronize", "attach", "init",
    "initialize", "record", "update", "remove", "mark", "emit", "wait"})
_NAME_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")  # snake_case and camelCase words


def _reads_as_a_state_change(fn: Any, args: list[Value], kwargs: dict[str, Value]) -> bool:
    name, module = getattr(fn, "__name__", None) or "", getattr(fn, "__module__", None) or ""
    if not isinstance(name, str) or not isinstance(module, str) or module.split(".")[0] != "torch":
        return False
    if not all(v.is_constant() for v in (*args, *kwargs.values())):
        return False
    from .compile_state import reads_as_a_getter
    if not args and not kwargs and reads_as_a_getter(name):
        return False
    return not _STATE_VERBS.isdisjoint(word.lower() for word in _NAME_WORDS.findall(name)) or \
        _binding_on_constants(fn, module, name, args, kwargs)


# NOTE [Torch bindings on constants]: a C binding of torch._C (not an operator namespace such as torch._C._nn)
# called with constant arguments only takes no tensor, so it is not an operator: it reads or changes the
# process's state, and a list of verbs cannot name them all. `torch._C._debug_only_display_vmap_fallback_warnings
# (True)` and `torch._C._get_graph_executor_optimize(False)` (a getter by name that sets the flag when given one)
# ran once, at trace time, and their answers were folded, so a state reset between calls stayed reset (review A
# F4; red team h12red). Such a call is a graph break (it runs as Python on every call), except a getter-named
# call with no arguments (NOTE [Zero-argument state getters]: called and guarded) and the bindings listed in
# _PURE_BINDINGS (telemetry whose only effect eager code cannot observe).
_OP_NAMESPACES = ("torch._C._nn", "torch._C._linalg", "torch._C._fft", "torch._C._special", "torch._C._nested",
                  "torch._C._sparse", "torch._C._VariableFunctions")
_PURE_BINDINGS = frozenset({"_log_api_usage_once", "_log_api_usage_metadata"})


def _binding_on_constants(fn: Any, module: str, name: str, args: list[Value], kwargs: dict[str, Value]) -> bool:
    if not isinstance(fn, types.BuiltinFunctionType) or not (module == "torch._C" or module.startswith("torch._C.")):
        return False
    return not module.startswith(_OP_NAMESPACES) and name not in _PURE_BINDINGS


def _disabled_by_torch(fn: Any) -> bool:
    """torch.compiler.disable'd, or torch's own lazy `torch._disable_dynamo` wrapper (Optimizer.zero_grad):
    plain Python by request. Called like a graph op it would run at trace time on fake tensors, and its
    effects (a list append, `p.grad = None`) with it, once, instead of on every call."""
    if getattr(fn, "_torchdynamo_disable", False) is True:
        return True
    code = getattr(fn, "__code__", None)
    return code is not None and code is _lazy_disable_code()


@functools.lru_cache(maxsize=1)
def _lazy_disable_code() -> types.CodeType | None:
    import torch._compile  # torch's decorator module, not torch._dynamo (which it imports only when called)
    wrapper = getattr(torch._compile, "_disable_dynamo", None)
    return wrapper(lambda: None).__code__ if wrapper is not None else None


def _not_a_graph_arg(value: Value) -> bool:
    """A module, an iterator (`m.parameters()`) or a Python callable: a torch function given one is inlined."""
    from .values.containers import IteratorValue
    return isinstance(value, (NNModuleValue, IteratorValue, UserFunctionValue, BoundMethodValue, PartialValue))


def _requires_grad_unchanged(tensor: TensorValue, args: list[Value], kwargs: dict[str, Value]) -> bool:
    """`t.requires_grad_(flag)` where t.requires_grad is already `flag`: eager changes nothing (and raises
    nothing, also for a non-leaf), so the call is the tensor itself."""
    flag = args[0] if len(args) == 1 and not kwargs else kwargs.get("requires_grad") if not args and len(kwargs) == 1 \
        else ConstantValue(True) if not args and not kwargs else None
    return flag is not None and flag.is_constant() and type(flag.as_constant()) is bool \
        and tensor.fake.requires_grad == flag.as_constant()


# NOTE [requires_grad_ on fresh tensors]: `torch.zeros_like(q).requires_grad_()` (transformers' mra2_attention
# without its CUDA kernel) on a tensor this graph made (no source: not an input, parameter or buffer), a leaf,
# while grad mode is off: the flag changes only that graph-local tensor, so the call is a graph node (as
# stock torch.compile traces it) instead of a break. With grad mode on, the tensor would become a leaf of
# the autograd graph that the joint graph would have to expose: that stays a break.
def _fresh_leaf_without_grad(tensor: TensorValue, args: list[Value], kwargs: dict[str, Value]) -> bool:
    flag = args[0] if len(args) == 1 and not kwargs else kwargs.get("requires_grad") if not args and len(kwargs) == 1 \
        else ConstantValue(True) if not args and not kwargs else None
    return flag is not None and flag.is_constant() and type(flag.as_constant()) is bool \
        and tensor.source is None and tensor.node.op in ("call_function", "call_method", "call_module") \
        and tensor.fake.grad_fn is None and not torch._C.is_grad_enabled()


# NOTE [Bound slot wrappers from outside]: `m = items.__add__` (a method-wrapper: a slot of list, tuple, dict or
# set bound to its object) passed in, held in a global, or rebuilt at a break was called as if unbound: its
# `__objclass__` made call_builtin treat the first argument as the object (`m([3])` returned None, `m(x)`
# of `__eq__` None, `m()` of `__len__` an internal error). It is called as its type's slot with the object
# it is bound to, read through the method's source (`<m>.__self__`, whose identity _bound_builtin guards).
def _bound_slot_wrapper(tx, fn: BuiltinValue) -> Value | None:
    from .container_methods import is_container_method
    from .sources import AttrSource
    from .values.builder import wrap
    obj = fn.obj
    if fn.source is None or not isinstance(obj, types.MethodWrapperType):
        return None
    owner = obj.__self__
    descriptor = getattr(type(owner), obj.__name__, None)
    if not is_container_method(descriptor):
        return None
    return BoundMethodValue(BuiltinValue(descriptor), wrap(tx.output, owner, AttrSource(fn.source, "__self__")))


def call_builtin(tx, fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from .builtins import BUILTIN_HANDLERS
    from .container_methods import call_container_method, is_container_method
    from .compile_state import state_query_handler
    from .dict_objects import call_base_method, is_base_method_call
    from .getattribute import HANDLERS as GETATTRIBUTE_HANDLERS
    from .string_formats import bound_str_method

    if is_base_method_call(fn, args):  # NOTE [Dict-subclass objects made while tracing]
        return call_base_method(tx, fn, args, kwargs)
    from .frame_locals import caller_namespace_break
    reader = caller_namespace_break(tx, fn, args, kwargs)  # NOTE [Frame readers reached by value]
    if reader is not None:
        raise reader
    from .stdlib import forced_break
    forced_break(fn)
    from .nested_tensors import nested_tensor_call
    nested = nested_tensor_call(tx, fn, args, kwargs)  # NOTE [Metadata of nested tensors]
    if nested is not None:
        return nested
    handler = BUILTIN_HANDLERS.get(fn) if _hashable(fn) else None
    if handler is None:
        handler = state_query_handler(fn) or GETATTRIBUTE_HANDLERS.get(fn)  # NOTE [Compile-aware library paths]
        handler = handler or bound_str_method(fn)  # NOTE [format_map through the mapping's protocol]
    if handler is not None:
        return handler(tx, args, kwargs)
    check_functorch_call(fn)  # NOTE [functorch state]
    if is_container_method(fn):
        return call_container_method(tx, fn, args, kwargs, explicit=True)
    if _hashable(fn) and fn in TORCH_FUNCTIONS_UNSUPPORTED:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{_name(fn)} changes or reads state outside the graph")
    if _sets_backend_state(fn) or _reads_as_a_state_change(fn, args, kwargs):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{_name(fn)} changes state outside the graph")
    if _disabled_by_torch(fn):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{_name(fn)} is marked torch.compiler.disable")
    if (method := unbound_tensor_method(tx, fn, args)) is not None:  # NOTE [Tensor methods called unbound]
        return call_tensor_method(tx, args[0], method, args[1:], kwargs)
    if isinstance(fn, types.FunctionType) and any(_not_a_graph_arg(v) for v in (*args, *kwargs.values())):
        return tx.inline(UserFunctionValue(fn), args, kwargs)  # NOTE [Decorated torch functions] in builder.py
    if _is_graph_op(fn) and _makes_a_leaf_that_requires_grad(kwargs):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{_name(fn)}(requires_grad=True) makes a leaf that requires grad")
    if _is_graph_op(fn):
        if not args and not kwargs:
            from .compile_state import guard_state_getter
            guard_state_getter(tx, fn)  # NOTE [Zero-argument state getters]
        return tx.output.call("call_function", fn, tuple(args), kwargs)
    if is_a(getattr(fn, "__self__", None), re.Pattern):  # NOTE [Type facts without user code]
        from .regex_calls import regex_call  # NOTE [Regular expressions with Python callbacks]
        result = regex_call(tx, fn, args, kwargs)
        if result is not None:
            return result
    from .folded_results import fold_call, joined_items
    args = joined_items(tx, fn, args, kwargs)  # NOTE [Strings joined from generators]
    if all(a.is_constant() for a in args) and all(v.is_constant() for v in kwargs.values()) and _is_pure(fn):
        return fold_call(fn, args, kwargs, tx.output)  # NOTE [Folded calls on containers]
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"call of {_name(fn)}")


# NOTE [Factories of leaves that require grad]: `w = torch.ones(n, requires_grad=True)` in a traced frame made a graph
# node, and what a backend returns for it is its own output tensor: onnxrt and triton lose the flag (the kwarg does not
# survive lowering to aten), so `w.requires_grad` and every product with w were False where eager's are True (red team
# h12warm: `(x * w).requires_grad` after a break in a `no_grad` block), and no gradient could reach w. Such a leaf only
# exists outside a graph (inside a joint it would be an output, not a leaf), so the factory call is a graph break, as in
# stock torch.compile: it runs as Python, and the graphs after it take the leaf as an input.
def _makes_a_leaf_that_requires_grad(kwargs: dict[str, Value]) -> bool:
    flag = kwargs.get("requires_grad")
    return flag is not None and flag.is_constant() and flag.as_constant() is True


def _name(fn: Any) -> str:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}.{name}" if module else name


def _is_graph_op(fn: Any) -> bool:
    if isinstance(fn, torch.jit.ScriptFunction) and not hasattr(fn, "__name__"):  # NOTE [TorchScript functions
        return False  # are not graph ops]
    module = getattr(fn, "__module__", None) or ""
    if module == "torch" or module.startswith("torch.") or module.startswith("torch._C"):
        return not module.startswith("torch.nn.modules")
    if tensor_method_name(fn) is not None:  # a method of torch.Tensor read from its class
        return True
    return isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))


# NOTE [TorchScript functions are not graph ops]: a function made by torch.jit.trace is a torch.jit.ScriptFunction
# whose module is torch's, so it was recorded as a call_function node; FX names a node after its target's
# __name__, which a traced ScriptFunction lacks: an AttributeError inside framejit, and the whole frame ran
# eagerly (under fullgraph: an internal error). Its call is a graph break now: the graphs before and after it are
# captured, and it runs as TorchScript, as in eager. A torch.jit.script function has a __name__ and stays a node.
def _is_pure(fn: Any) -> bool:
    """Library functions safe to evaluate at trace time on constants (math, operator, str methods...)."""
    module = getattr(fn, "__module__", None)
    if module in ("math", "operator", "_operator", "cmath"):
        return True
    owner = getattr(fn, "__self__", _NO_OWNER)
    if owner is None and not _method_of_none(fn):
        return False  # a callable without an owner (np.random.seed, a Cython function): not a method of None
    if is_a(owner, (re.Pattern, re.Match)):  # NOTE [Regular expressions on constants]
        return getattr(fn, "__name__", None) in _PURE_RE_METHODS
    # NOTE [Type facts without user code] (guards/plain_reads.py): the owner may be a user object
    return is_a(owner, _PURE_CONSTANT_TYPES) or (is_a(owner, type) and issubclass(owner, enum.Enum))


# Pattern.finditer and Pattern.scanner return stateful iterators/scanners: folded, one object made at trace time
# was shared by every later call (a second call's finditer found nothing); they stay calls of Python.
_PURE_RE_METHODS = frozenset({"match", "search", "fullmatch", "split", "findall", "sub", "subn", "group", "groups",
                              "groupdict", "start", "end", "span", "expand", "__getitem__", "__eq__", "__ne__",
                              "__hash__", "__repr__", "__str__", "__format__"})

_NO_OWNER = object()


def _method_of_none(fn: Any) -> bool:
    """`None.__eq__`, `None.__format__`: a method bound to None (a C function made without a module also
    has `__self__` None: np.random.seed was folded at trace time and dropped from the compiled code)."""
    qualname = getattr(fn, "__qualname__", "")
    return type(fn) in (types.MethodWrapperType, types.BuiltinMethodType) and isinstance(qualname, str) and \
        qualname.startswith(("NoneType.", "object."))


def call_module(tx, mod_value: NNModuleValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`module(*args)`: nn.Module.__call__ without hooks is exactly `forward(*args)`, with forward hooks it
    is module_hooks.call_with_hooks; a class that overrides `__call__` has that method inlined instead (its
    type is guarded)."""
    if (original := original_module(tx, mod_value)) is not None:  # NOTE [Compiled callables called while tracing]
        return call_module(tx, original, args, kwargs)
    from .lazy_modules import initialise_at_trace
    initialise_at_trace(tx, mod_value, args, kwargs)  # NOTE [Lazy modules initialised while tracing]
    call = type(mod_value.obj).__call__
    _guard_call_path(tx, type(mod_value.obj))
    if not lookup.is_module_default(call, "__call__") and not calls_module_call(tx, mod_value, _MODULE_CALL) or \
            not lookup.is_module_default(type(mod_value.obj)._call_impl, "_call_impl"):  # NOTE [GraphModule calls]
        if not isinstance(call, types.FunctionType):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{type(mod_value.obj).__name__}.__call__")
        return tx.inline(UserFunctionValue(call), [mod_value, *args], kwargs)
    _guard_no_instance_call_impl(tx, mod_value)
    if tx.plan_module_call(mod_value):  # NOTE [Module hooks]
        from .module_hooks import call_with_hooks
        return tx.inline(UserFunctionValue(call_with_hooks), [mod_value, *args], kwargs)
    forward = tx.getattr(mod_value, "forward")
    return call_value(tx, forward, args, kwargs)


# torch's own (unpatched: `Module.__call__` is `_wrapped_call_impl` unless patched; NOTE [Library defaults patched])
_MODULE_CALL = torch.nn.Module._wrapped_call_impl  # a `_call_impl` patched before this import: is_module_default


def _guard_no_instance_call_impl(tx, mod_value: NNModuleValue) -> None:
    """torch's `_wrapped_call_impl` reads `self._compiled_call_impl` and `self._call_impl` on the instance,
    so a function stored on the instance (`m._call_impl = f`; `m.compile()` sets the other) replaces the
    call: not modelled (a graph break calls the module as Python), and guarded absent otherwise."""
    real = mod_value.obj
    for name in ("_call_impl", "_compiled_call_impl"):
        if name in real.__dict__:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{type(real).__name__} has {name} set on the instance")
        if mod_value.source is not None:
            lookup.guard_not_in_instance(tx.output, mod_value.source, real, name)


def _guard_call_path(tx, cls: type) -> None:
    """`module(*args)` runs `type(module).__call__`, which for nn.Module is `_wrapped_call_impl` calling
    `_call_impl`: all three class attributes are guarded, so a patched `nn.Module.__call__` (or a
    subclass's new `__call__`) is seen (NOTE [Library class attributes] in lookup.py)."""
    for name in ("__call__", "_wrapped_call_impl", "_call_impl"):
        if lookup.mro_lookup(cls, name)[0] is not None:
            lookup.guard_lookup(tx.output, cls, name)


def call_class(tx, cls_value: ClassValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    from .builtins import BUILTIN_HANDLERS

    from .context import is_ctx_class, make_ctx
    from .dict_objects import can_create as can_create_dict_object, create as create_dict_object

    cls = cls_value.obj
    handler = BUILTIN_HANDLERS.get(cls)
    if handler is not None:
        return handler(tx, args, kwargs)
    if cls is types.MethodType and len(args) == 2 and not kwargs and isinstance(args[0], UserFunctionValue) and \
            not (args[1].is_constant() and args[1].as_constant() is None):
        return BoundMethodValue(args[0], args[1])  # `MethodType(f, obj)`: how ExitStack binds a manager's __exit__
    if cls in (torch.no_grad, torch.enable_grad) and len(args) == 1 and isinstance(args[0], UserFunctionValue):
        from .generator_ctx import decorate_with_ctx  # `torch.no_grad(fn)`
        return decorate_with_ctx(tx, make_ctx(tx, cls, [], {}), args, kwargs)
    if is_ctx_class(cls):
        return make_ctx(tx, cls, args, kwargs)
    if cls is contextlib._GeneratorContextManager and len(args) == 3 and not kwargs:
        from .generator_ctx import new_generator_cm
        return new_generator_cm(tx, args)
    if cls is contextlib.nullcontext:
        from .generator_ctx import new_nullcontext
        return new_nullcontext(args, kwargs)
    from .mappings import is_plain_dict_subclass, make_dict_subclass
    if is_plain_dict_subclass(cls):
        return make_dict_subclass(tx, cls, args, kwargs)
    if issubclass(cls, BaseException) and builtin_made(cls) and all(a.is_constant() for a in args) and not kwargs:
        return constant_fold(cls, *(a.as_constant() for a in args))
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        own_new = _guard_namedtuple_construction(tx, cls)
        if own_new is not None:  # NOTE [Namedtuples made by their own __new__]
            return tx.inline(UserFunctionValue(own_new), [ClassValue(cls), *args], kwargs)
        return _make_namedtuple(tx, cls, args, kwargs)
    if issubclass(cls, enum.Enum) or cls in (torch.device, torch.Size, slice, range, complex):
        return constant_fold(cls, *(a.as_constant() for a in args), **{k: v.as_constant() for k, v in kwargs.items()})
    if issubclass(cls, torch.nn.Module):
        from .modules import construct_module
        return construct_module(tx, cls, args, kwargs)  # NOTE [Modules made while tracing]
    from .container_methods import make_set_subclass, plain_set_subclass
    if plain_set_subclass(cls):  # NOTE [Plain set subclasses]
        return make_set_subclass(tx, cls, args, kwargs)
    if can_create_dict_object(cls):  # NOTE [Dict-subclass objects made while tracing]
        return create_dict_object(tx, cls, args, kwargs)
    from .list_objects import can_create as can_create_list_object, create as create_list_object
    if can_create_list_object(cls):  # NOTE [List-subclass objects made while tracing]
        return create_list_object(tx, cls, args, kwargs)
    if cls.__new__ is object.__new__:
        made = _construct_plain_object(tx, cls, args, kwargs)
        if made is not None:
            return made
    if getattr(cls, "__module__", "") == "torch._C" and hasattr(cls, "__enter__"):
        # NOTE [torch._C guards are never run while tracing]: _InferenceMode, _DisableFuncTorch, the dispatch-key
        # guards... save the thread's dispatch state when made or entered and restore it when exited or freed;
        # made on fake tensors while tracing, they left the fake mode's Python keys set after the trace.
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__qualname__}() changes thread-local dispatch state")
    if issubclass(cls, torch.Tensor) or getattr(cls, "__module__", "").startswith("torch"):
        return tx.output.call("call_function", cls, tuple(args), kwargs)
    from .user_exceptions import make_exception  # NOTE [Exceptions with a Python __init__]; else a break
    return make_exception(tx, cls, args, kwargs)


def _construct_plain_object(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> Value | None:
    """`cls(...)` for a class whose __new__ is object.__new__: a new object whose Python __init__ is inlined, or
    CPython's TypeError for an abstract class; None where the class is not plain (the caller goes on)."""
    if getattr(cls, "__abstractmethods__", None) and _is_plain_class(cls, True):
        from .lookup import guard_lookup  # an abstract class: object.__new__ raises CPython's own TypeError
        guard_lookup(tx.output, cls, "__abstractmethods__")
        try:
            object.__new__(cls)
        except TypeError as e:
            raise UserException(e) from None
    if not _is_plain_class(cls):
        return None
    _guard_plain_construction(tx, cls)
    if _has_finalizer(cls):  # NOTE [Objects with a finalizer]
        e = Unsupported(BreakKind.UNSUPPORTED_CALL, f"creating an instance of {cls.__qualname__}, whose "
                        "class defines __del__: the frame runs eagerly")
        e.frame_eager = True
        raise e
    obj = NewObjectValue(cls)
    init = getattr(cls, "__init__")
    if isinstance(init, types.FunctionType):
        tx.inline(UserFunctionValue(init), [obj, *args], kwargs)
    elif args or kwargs:
        raise UserException(TypeError(f"{cls.__name__}() takes no arguments"))
    return obj


def _guard_plain_construction(tx, cls: type) -> None:
    """`cls(...)` traced as object.__new__ then `__init__`: the metaclass's `__call__` (type's), `__new__`
    (object's) and `__init__` stay what the lookups found (NOTE [Lookup facts]), and `__del__` too."""
    lookup.guard_lookup(tx.output, type(cls), "__call__")
    for name in ("__new__", "__init__", "__del__"):
        lookup.guard_lookup(tx.output, cls, name)


# NOTE [Objects with a finalizer]: an object made while tracing is a NewObjectValue; the real object is made
# only if it escapes the frame, at the frame's end. A class with `__del__` runs user code when the object
# dies: eager's `d = D(1); ...; del d` runs `D.__del__` at the `del` (1 appended before "after"), the
# compiled frame never made the object, so `__del__` never ran at all. A graph break there is not enough:
# passed on to the resume function, the object stays referenced by that call's arguments until it returns,
# so `__del__` ran after "after" (as for NOTE [Generators with finalizers] in translator.py). Making one makes
# the frame being compiled run eagerly, and `__del__`'s absence is a lookup fact of every construction.
def _has_finalizer(cls: type) -> bool:
    from .lookup import mro_lookup
    return mro_lookup(cls, "__del__")[0] is not None


def builtin_made(cls: type) -> bool:
    """NOTE [Exceptions made while tracing]: an exception class whose instances are made by CPython's own
    type.__call__, __new__ and __init__ and whose classes define no method or other descriptor (`__str__`
    runs for str(e) on the folded constant), so making and using one while tracing runs no user code."""
    return type(cls).__call__ is type.__call__ and all(
        k.__module__ == "builtins" or not any(hasattr(type(v), "__get__") for name, v in vars(k).items()
                                              if name not in ("__dict__", "__weakref__"))
        for k in cls.__mro__)


def _is_plain_class(cls: type, abstract: bool = False) -> bool:
    """Instances are made by type.__call__ (a plain metaclass or ABCMeta) and the class is not abstract
    (unless `abstract`)."""
    if type(cls) is not type and type(cls).__call__ is not type.__call__:
        return False
    if getattr(cls, "__abstractmethods__", None) and not abstract:
        return False
    return all(k.__module__ != "builtins" or k is object for k in cls.__mro__)


# NOTE [Namedtuples made by their own __new__]: `NT(a, b)` is traced as the tuple of its fields, which is what
# the `__new__` namedtuple generates and object's `__init__` make of it. A subclass with a `__new__` of its
# own (`return super().__new__(cls, a * 2, b)`, PackedSequence's) ran none of it: `Q(x, 1).a` was x where
# eager gives 2x. Such a `__new__`, a Python function, is inlined (it reaches the generated one through
# super()); an `__init__` other than object's or a metaclass `__call__` makes the call a break (it runs as
# Python). The lookups of `__new__`, `__init__` and the metaclass's `__call__` are guarded, so one added
# later recompiles. Returns the subclass's own `__new__` function, or None for the generated one.
def _guard_namedtuple_construction(tx, cls: type) -> types.FunctionType | None:
    from ..guards.codegen import generated_namedtuple_new
    _, new = lookup.mro_lookup(cls, "__new__")
    generated = generated_namedtuple_new(cls)  # not merely found on a class with _fields: a __new__ assigned to
    own = None if generated else getattr(new, "__func__", None)  # the namedtuple itself is its own
    from .values.plain_bases import plain_namedtuple_class  # NOTE [Subclasses modelled as their base]
    if not (generated or isinstance(own, types.FunctionType)) or type(cls).__call__ is not type.__call__ or \
            lookup.mro_lookup(cls, "__init__")[1] is not object.__init__ or not plain_namedtuple_class(tx.output, cls):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__qualname__}(...): own __init__/tuple methods, or metaclass __call__")
    lookup.guard_lookup(tx.output, type(cls), "__call__")
    lookup.guard_lookup(tx.output, cls, "__init__")
    if generated:  # NOTE [Generated namedtuple __new__] in guards/codegen.py: persistable, unlike its identity
        klass = tx.output.name_of(cls, cls.__name__)
        tx.output.add_guard("NAMEDTUPLE_NEW", f"___generated_namedtuple_new({klass})", None,
                            expected=f"{cls.__qualname__}(...) reaches the __new__ namedtuple generated")
    else:
        lookup.guard_lookup(tx.output, cls, "__new__")
    return own


def _make_namedtuple(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> Value:
    fields = cls._fields
    defaults = _namedtuple_defaults(tx, cls)
    items = list(args)
    for name in fields[len(args):]:
        if name in kwargs:
            items.append(kwargs.pop(name))
        elif name in defaults:
            from .values.builder import wrap_unguarded
            items.append(wrap_unguarded(defaults[name]))
        else:
            raise UserException(TypeError(f"{cls.__name__}.__new__() missing required argument: '{name}'"))
    if kwargs or len(items) != len(fields):
        raise UserException(TypeError(f"{cls.__name__}() got unexpected arguments"))
    return TupleValue(items, cls=cls)


def _namedtuple_defaults(tx, cls: type) -> dict:
    """The defaults `cls(...)` fills in: those of `cls.__new__` (what CPython uses; `_field_defaults` is
    only a record of them), guarded by value (`NT.__new__.__defaults__ = (5.0,)` after the first call
    kept the old default; red team, test_redteam2.py)."""
    values = getattr(cls.__new__, "__defaults__", None)
    expr = f"{tx.output.name_of(cls, cls.__name__)}.__new__.__defaults__"
    plain = values is not None and all(type(v) in (int, str, bool, type(None)) or (
        type(v) is float and v == v and v not in (float("inf"), float("-inf")) and v != 0.0) for v in values)
    types = "".join(f" and ___type({expr}[{i}]) is ___type({v!r})" for i, v in enumerate(values if plain else ()))
    check = (f"{expr} is None" if values is None else f"{expr} == {values!r}{types}" if plain  # (1,) == (True,)
             else f"{expr} is {tx.output.name_of(values, 'defaults')}")
    described = repr(values) if plain or values is None else "by identity"  # NOTE [Guard texts run no user code]
    tx.output.add_guard("ID_MATCH", check, None, expected=f"the defaults {described}", actual=expr)
    if not values:
        return {}
    return dict(zip(cls._fields[len(cls._fields) - len(values):], values))


__all__ = ["call_value", "call_builtin", "call_class", "call_module", "call_tensor_method"]
