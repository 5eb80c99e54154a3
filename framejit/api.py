"""Public entry points: compile(), the wrapper types, explain(), reset(), disable(), stats().

`compile` mirrors `torch.compile`'s signature and meaning where that makes sense, so that switching is
a one-line change:

    fast = framejit.compile(fn_or_module, backend="eager", fullgraph=False, dynamic=None, options=None)

- A function (or any callable) becomes a `FrameHook` that captures it on first call.
- A bound method compiles its function and stays bound.
- An `nn.Module` becomes a module of a generated subclass of its own class that *shares the original's
  `__dict__`* (NOTE [Compiled modules]): attributes, parameters, `state_dict()` keys, `train()`/`eval()`,
  `to()` and hooks are the original's, and only calling it goes through capture. The original stays
  reachable as `compiled._orig_mod`.

Exceptions: `framejit.Unsupported` (a FramejitError) is raised only with `fullgraph=True`, at the first
step that cannot be captured; it carries `.graph_break` (kind, explanation, hint, the user's file:line).
`framejit.BackendCompilerFailed` (a FramejitError) is raised by a call whose graph the backend failed to
compile (it raised or returned a non-callable), whatever `fullgraph` says (NOTE [Backend failures raise]
in capture/backend_call.py); bad options of a built-in backend raise at `compile()` itself.
`framejit.ConstraintViolationError` (a FramejitError, and a torch ConstraintViolationError) is raised by the
call whose trace specialised a dimension marked with `mark_dynamic`, or met a size outside its min/max
(NOTE [Broken mark_dynamic contracts] in capture/shapes.py), as torch.compile raises it.
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import pickle
import sys
import types
import weakref
from typing import Any, Callable

import torch

from . import capture, config, versions
from .backends import registry
from .capture import (BackendCompilerFailed, CompileRequest, ConstraintViolationError, FrameHook, FramejitError,
                      GraphBreak, Unsupported, clean_traceback, module_call, module_forward, module_instance_forward,
                      stands_for_module_call)


def compile(model: Callable | None = None, *, backend: str | Callable = "eager", fullgraph: bool = False,
            dynamic: bool | None = None, options: dict | None = None, mode: str | None = None):
    """Compile a function, bound method or nn.Module; usable directly or as a decorator."""
    if versions.unsupported_reason() is not None:  # another CPython: the model runs eagerly (versions.py)
        return versions.eager_compile(model, stacklevel=4)
    request = _make_request(backend, fullgraph, dynamic, options, mode)
    from .backends.hook_dicts import install
    install()  # NOTE [Hooks of activations a None reaches] (backends/hook_dicts.py): before any trace
    if model is None:
        return lambda m: _compile_one(m, request)
    return _compile_one(model, request)


def _make_request(backend, fullgraph, dynamic, options, mode) -> CompileRequest:
    if not isinstance(fullgraph, bool):
        raise TypeError(f"framejit.compile(fullgraph=...) must be a bool, got {type(fullgraph).__name__}")
    if dynamic is not None and not isinstance(dynamic, bool):
        raise TypeError(f"framejit.compile(dynamic=...) must be None, True or False, got {type(dynamic).__name__}")
    if mode is not None:
        raise ValueError(f"framejit.compile(mode=...) accepts only None, got {mode!r}; use options= for backend settings")
    if options is not None:
        if not isinstance(options, dict):
            raise TypeError(f"framejit.compile(options=...) must be a dict or None, got {type(options).__name__}")
        bad = [k for k in options if not isinstance(k, str)]
        if bad:
            raise TypeError(f"framejit.compile(options=...) keys must be str, got {bad!r}")
    backend_fn, version_key = registry.resolve(backend)
    if options and isinstance(backend, str) and backend == "eager":
        raise ValueError(f"backend 'eager' accepts no options; got {sorted(options)}")
    if options and isinstance(backend, str):
        registry.check_options(backend, options)  # raises naming the backend and the accepted keys
    return CompileRequest(backend_fn, options or None, fullgraph, version_key=version_key,
                          artifacts=_artifacts(backend), dynamic=dynamic,
                          compile_args={"backend": backend, "fullgraph": fullgraph, "dynamic": dynamic,
                                        "options": options})


def _artifacts(backend) -> tuple | None:
    try:
        return registry.artifact_functions(backend)
    except ImportError:
        return None


def _compile_one(model: Any, request: CompileRequest, share: bool = True):
    if isinstance(model, torch.nn.Module):
        return _compile_module(model, request, share)
    if isinstance(model, FrameHook):
        model = model.fn
    if isinstance(model, types.MethodType) and isinstance(model.__func__, types.FunctionType):
        return types.MethodType(_hook(model.__func__, request), model.__self__)
    if isinstance(model, types.FunctionType):
        return _hook(model, request)
    if callable(model):
        return _hook(_trampoline(model), request)
    raise TypeError(f"framejit.compile(model): expected a function, a bound method, an nn.Module or another "
                    f"callable, got {type(model).__name__}")


def _hook(fn: types.FunctionType, request: CompileRequest) -> FrameHook:
    hook = FrameHook(fn, request)
    functools.update_wrapper(hook, fn)
    capture.call_frame_reader_directly(hook)  # NOTE [Frame readers called directly]
    return hook


def _trampoline(target: Callable) -> types.FunctionType:
    def call(*args, **kwargs):
        return target(*args, **kwargs)
    call.__name__ = getattr(target, "__name__", type(target).__name__)
    call.__qualname__ = call.__name__
    return call


# NOTE [Compiled modules]: the compiled module is an instance of a subclass of the module's own class
# whose instance dict IS the original's dict. Everything that reads or writes module state (parameters,
# buffers, training flag, hooks, submodules) therefore acts on the original, and isinstance checks hold;
# only __call__ differs: it enters capture with the original module as the frame's argument. A copy
# (`copy.deepcopy`, `copy.copy`) of a compiled module is the compiled form of a copy of the original, so
# it runs with its own parameters and entries, not those of the module it was copied from.
def _compile_module(module: torch.nn.Module, request: CompileRequest, share: bool = True) -> torch.nn.Module:
    original = getattr(type(module), "_orig_mod", None) if getattr(type(module), "_framejit_compiled", False) else None
    module = original or module
    cls = type(module)
    shared = _module_hook(cls, request) if share else _hook(module_call, request)  # explain(): its own hook
    own, traced = [], [0]

    def __call__(self, *args, **kwargs):
        if not own and (shared.limit_logged or traced[0] >= config.recompile_limit):
            own.append(_own_module_hook(request, traced[0] >= config.recompile_limit))
        hook = own[0] if own else shared
        before = None if own else len(shared.entries) - len(shared.loaded)
        try:
            return hook(type(self)._orig_mod, *args, **kwargs)
        except BaseException as e:  # KeyboardInterrupt too (review revN N1)
            clean_traceback(e)  # NOTE [Tracebacks past the hook] in capture/user_tracebacks.py
            raise
        finally:
            if before is not None:  # entries this module's calls traced (NOTE [Compiled modules of one class
                traced[0] += max(0, len(shared.entries) - len(shared.loaded) - before)  # share their code])

    stands_for_module_call(__call__.__code__)  # its frame stands for torch's two levels of a module call

    if _is_ddp(module):  # NOTE [Compiling a DistributedDataParallel module]
        inner = {}

        def __call__(self, *args, **kwargs):  # noqa: F811
            return _ddp_call(type(self)._orig_mod, inner, request, args, kwargs)

    def __deepcopy__(self, memo):
        # A copy is a compiled copy of the original (its own parameters), never the original itself:
        # the class attribute _orig_mod must not carry over to it.
        copied = copy.deepcopy(type(self)._orig_mod, memo)
        memo[id(self)] = result = _compile_module(copied, request)
        return result

    def __copy__(self):
        return _compile_module(copy.copy(type(self)._orig_mod), request)

    def __reduce_ex__(self, protocol):  # NOTE [Pickled compiled modules]
        if request.compile_args is None:
            raise pickle.PicklingError(f"cannot pickle a framejit-compiled {cls.__qualname__}: its compile "
                                       f"arguments are unknown")
        return _compiled_from_pickle, (type(self)._orig_mod, request.compile_args)

    namespace = {"__call__": __call__, "forward": _CompiledForward(cls, request), "__deepcopy__": __deepcopy__,
                 "__copy__": __copy__, "__reduce_ex__": __reduce_ex__, "_orig_mod": module,
                 "_framejit_compiled": True, "_framejit_hook": shared, "__module__": cls.__module__,
                 "__qualname__": cls.__qualname__}
    compiled_cls = type(cls.__name__, (cls,), namespace)
    compiled = object.__new__(compiled_cls)
    object.__setattr__(compiled, "__dict__", module.__dict__)
    return compiled


# NOTE [The forward of a compiled module]: `compiled.forward(x)` found the class's own forward (the compiled
# class inherits it) and ran it eagerly, bound to the compiled module: nothing was captured where
# torch.compile's module compiles that call too (code that calls `model.forward(...)` after compiling, or
# passes the bound method on). The compiled class's `forward` now calls the module's forward through a hook
# of its own (module_frame.module_forward, made with the module's compile request): as `module.forward(x)` in
# eager it runs no hooks. It carries the class forward's name and signature (`inspect.signature` of the bound
# method names its parameters, which some callers read). A `forward` set on the instance wins, as on the original
# (the instance dict is shared), but it is compiled too: `forward` is a data descriptor on the compiled class
# (`_CompiledForward`), which finds the instance's `forward` and calls it through a hook of
# module_frame.module_instance_forward (hhuntHF6 MED-2: accelerate's `m.forward = partial(new_forward, m)`, then
# `framejit.compile(m).forward(x)` ran eagerly, unlogged, where stock torch.compile captures one graph). Setting
# and deleting `compiled.forward` write the instance dict as before.
def _compiled_forward(cls: type, request: CompileRequest):
    hook = _hook(module_forward, request)

    @functools.wraps(cls.forward)
    def forward(self, *args, **kwargs):
        return hook(type(self)._orig_mod, *args, **kwargs)
    return forward


class _CompiledForward:
    """The compiled class's `forward` (NOTE [The forward of a compiled module]); traced code reads it as the
    function it stands for, or the instance's `forward` (capture/descriptors.py)."""

    framejit_compiled_forward = True

    def __init__(self, cls: type, request: CompileRequest) -> None:
        self.function = _compiled_forward(cls, request)
        self.request = request
        self.instance_hook: FrameHook | None = None
        self.made: tuple = (None, None)  # (the instance forward, its compiled form): read twice, the same object

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self.function
        own = obj.__dict__.get("forward", _CompiledForward)
        if own is _CompiledForward:
            return types.MethodType(self.function, obj)
        if self.made[0] is own:
            return self.made[1]
        if self.instance_hook is None:
            self.instance_hook = _hook(module_instance_forward, self.request)
        forward = _InstanceForward(own, self.instance_hook, type(obj)._orig_mod)
        self.made = (own, forward)
        return forward

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__["forward"] = value

    def __delete__(self, obj: Any) -> None:
        if "forward" not in obj.__dict__:
            raise AttributeError("forward")
        del obj.__dict__["forward"]


class _InstanceForward:
    """A compiled module's instance `forward` as `compiled.forward` reads it: a call goes through the hook; every
    other attribute (`func`, `keywords`, `__self__`, a callable object's own state, `__signature__` through
    `__wrapped__`) is read and written on the instance forward itself, and it compares equal to it (revAP H3:
    a copy of its attributes made once went stale; L1: `.func`, `.__self__`, `==` differed)."""

    __slots__ = ("__wrapped__", "_hook", "_module")

    def __init__(self, own: Any, hook: Any, module: Any) -> None:
        object.__setattr__(self, "__wrapped__", own)
        object.__setattr__(self, "_hook", hook)
        object.__setattr__(self, "_module", module)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._hook(self._module, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__wrapped__, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.__wrapped__, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self.__wrapped__, name)

    def __eq__(self, other: Any) -> bool:
        return self.__wrapped__ == (other.__wrapped__ if isinstance(other, _InstanceForward) else other)

    def __hash__(self) -> int:
        return hash(self.__wrapped__)

    def __repr__(self) -> str:
        return repr(self.__wrapped__)


# NOTE [Compiled modules of one class share their code]: every compiled module's frame is `module_call(module,
# *args)` with the module an argument, so its entries are guarded on the module as on any argument (its
# type, attributes and parameters as graph inputs), and an entry traced for one instance serves another
# of the same class when its guards pass. Compiling each block of a model on its own (PyTorch's regional
# compilation recipe, `for b in blocks: b.compile()` or `[framejit.compile(b) for b in blocks]`) therefore
# shares one hook per class and compile arguments, as torch.compile shares entries per code object: 12
# blocks made 12 graphs (one trace each), now 1. Each module compiled adds one recompile limit to the hook's
# budget (`entry_budget`), so blocks that need entries of their own (a `layer_idx` used as an index) still get
# as many as they got alone; and once the shared hook has reached its limit (one block that recompiles on
# every call would use up the budget of all), each module compiled on it goes on with a hook of its own, with
# a limit of its own, rather than run eagerly without ever being traced (review revN N6). A module that itself
# traced a recompile limit's worth of entries on the shared hook runs eagerly from then on, as it did alone, so
# one block that recompiles on every call cannot spend the whole pooled budget (review revM F9: 6 blocks, one
# storming, 41 traces where one hook per block made 13). Compile arguments that are not hashable (an unhashable
# backend callable, options holding lists) get a hook of their own, as before; so does a DDP module.
# `framejit.reset()` forgets the shared hooks.
# The table holds its hooks weakly (the compiled modules hold them), keyed by the class's id, so that a dropped
# model of a class made at run time frees its class, its hook and its graphs (review revN N10: a table keyed by
# the class kept them for the whole process).
_MODULE_HOOKS: "weakref.WeakValueDictionary[tuple, FrameHook]" = weakref.WeakValueDictionary()


def _module_hook(cls: type, request: CompileRequest) -> FrameHook:
    args = request.compile_args or {}
    try:
        key = (id(cls), request.backend, args.get("backend"), tuple(sorted((args.get("options") or {}).items())),
               request.fullgraph, request.dynamic)
        hash(key)
    except TypeError:
        return _hook(module_call, request)
    hook = _MODULE_HOOKS.get(key)
    if hook is None or hook.shared_class() is not cls:  # a class freed and its id reused
        hook = _MODULE_HOOKS[key] = _hook(module_call, request)
        hook.shared_class = weakref.ref(cls)
        hook.entry_budget = 0
    hook.entry_budget += 1  # each module sharing the hook keeps the recompile budget it had alone
    return hook


def _own_module_hook(request: CompileRequest, limited: bool) -> FrameHook:
    """A module's own hook once the shared one cannot serve it: with no budget (it runs eagerly, its callees
    routed) when the module itself traced a recompile limit's worth of entries on the shared hook."""
    hook = _hook(module_call, request)
    if limited:
        hook.entry_budget = 0
    return hook


# NOTE [Pickled compiled modules]: the generated class of a compiled module has its class's name and
# qualname but is not the object that name resolves to, so pickle's default reduction (the class by
# reference) raised PicklingError where torch.compile's module pickles: `torch.save(compiled)` failed. A
# compiled module now pickles as its original module plus compile()'s own arguments (backend by name or
# the callable given, fullgraph, dynamic, options), and unpickling compiles the unpickled original again
# with them: like a copy (NOTE [Compiled modules]), the result runs with its own parameters and starts
# with no compiled entries (they are process state; the frame cache may still serve them). A backend
# callable that cannot be pickled fails as pickling it alone does.
def _compiled_from_pickle(module: torch.nn.Module, compile_args: dict) -> torch.nn.Module:
    return compile(module, **compile_args)


# NOTE [Compiling a DistributedDataParallel module]
# `framejit.compile(DDP(m))` compiles what DDP runs, not DDP itself. DDP.forward is bookkeeping around the
# user's module: the C++ Logger and Reducer (prepare_for_forward, _rebuild_buckets, prepare_for_backward:
# opaque pybind calls, each a graph break) and `with self._inside_ddp_forward():`, a torch-disabled
# @contextmanager around `self.module(...)`; traced, that with-block ran eagerly as a whole and the model
# was never captured (0 graphs). Stock torch.compile does not trace DDP.forward either: its file is skipped
# and the frame hook captures the inner module's frame. framejit has no frame-evaluation hook, so the
# compiled DDP module runs DDP's own __call__/forward as plain Python (its hooks, reducer and buckets
# exactly as eager DDP) with `self.module` resolving, for the duration of the call, to the compiled form
# of the inner module (NOTE [Compiled modules]: same __dict__, parameters and state_dict keys): the model's
# forward is captured like `DDP(framejit.compile(m))`, and the reducer's per-parameter autograd hooks fire
# as the graphs' backward produces the gradients. The swap is undone in `finally` and nests; like DDP's
# own forward (reducer state) it is not meant for concurrent calls from several threads.
def _is_ddp(module: torch.nn.Module) -> bool:
    distributed = sys.modules.get("torch.nn.parallel.distributed")  # never imported for this check
    return distributed is not None and isinstance(module, distributed.DistributedDataParallel)


def _ddp_call(ddp: torch.nn.Module, inner: dict, request: CompileRequest, args: tuple, kwargs: dict):
    modules = ddp._modules
    original = modules["module"]
    if inner.get("for") is not original:  # first call, or ddp.module replaced since
        inner.update(compiled=_compile_module(original, request), **{"for": original})
    compiled = inner["compiled"]
    modules["module"] = compiled
    try:
        return ddp(*args, **kwargs)
    finally:
        modules["module"] = original


def disable(fn: Callable | None = None, recursive: bool = True):
    """Never capture `fn`: it always runs as plain Python (usable as a decorator)."""
    if fn is None:
        return lambda f: disable(f, recursive)
    target = fn.__func__ if isinstance(fn, types.MethodType) else fn
    if isinstance(target, FrameHook):
        return target.fn
    code = getattr(target, "__code__", None)
    if code is None:
        raise TypeError(f"framejit.disable(fn): expected a Python function or method, got {type(fn).__name__}")
    capture.disable_code(code)  # NOTE [Disable after compiling] in capture/hook.py
    return fn


def reset() -> None:
    """Forget everything compiled in this process (compiled wrappers recompile on their next call)."""
    capture.reset()
    _MODULE_HOOKS.clear()  # NOTE [Compiled modules of one class share their code]


def stats() -> dict[str, Any]:
    """Process-wide counters: frames traced, compiled and loaded from the frame cache, graphs, backend
    compiles, compile time; `frames` lists each compiled or loaded entry (function, location, backend,
    graphs, compile_time_s, cache "hit"/"miss"); `eager_frames` counts the frames framejit decided to run
    wholly eagerly and `eager_frame_reasons` lists them ({function, location, reason}; NOTE [Eager frames]);
    `graphs_own_code` counts graphs a training backend compiled that run as their own code instead, because the
    program may observe their results' autograd state (a graph ending at a break that passes on a tensor that
    requires grad, a hook on a result: NOTE [Autograd state observed after a break]); `python_loops` counts the
    for loops compiled code runs as Python, whose bodies' own operations run outside any graph, and
    `python_loop_reasons` lists them ({function, location, reason}; NOTE [Loop bodies run outside graphs])."""
    return capture.stats()


@dataclasses.dataclass
class ExplainOutput:
    graphs: list[torch.fx.GraphModule]
    graph_count: int
    graph_break_count: int
    break_reasons: list[GraphBreak]
    ops_per_graph: list[list[str]]
    guards: list[Any]
    eager_frames: list[dict] = dataclasses.field(default_factory=list)  # NOTE [Eager frames]

    def __str__(self) -> str:
        lines = [f"Graph count: {self.graph_count}", f"Graph break count: {self.graph_break_count}"]
        if self.eager_frames:
            lines.append(f"Eager frames: {len(self.eager_frames)}")
            lines += [f"  {e['function']} ({e['location']}): {e['reason']}" for e in self.eager_frames]
        for i, ops in enumerate(self.ops_per_graph):
            lines.append(f"Graph {i}: {len(ops)} ops: {', '.join(ops)}")
        for br in self.break_reasons:
            lines.append("Break: " + str(br).replace("\n", "\n  "))
        lines.append(f"Guards: {len(self.guards)}")
        lines += [f"  {g.describe()}" for g in self.guards]
        return "\n".join(lines)


def explain(fn: Callable, *, backend: str | Callable = "eager"):
    """`explain(fn)(*args, **kwargs)`: compile and run fn once, and report graphs, breaks and guards."""
    if not callable(fn):
        raise TypeError(f"framejit.explain(fn): expected a callable, got {type(fn).__name__}")

    def run(*args, **kwargs) -> ExplainOutput:
        request = _make_request(backend, False, None, None, None)
        compiled = _compile_one(fn, request, share=False)  # a report of this call's traces only
        capture.uncall_directly(_find_hook(compiled))  # explain traces it to report why it runs eagerly
        before = capture.eager_frame_count()
        compiled(*args, **kwargs)
        report = _report([_find_hook(compiled), *request.hooks.all()])  # the frame, its callees and resumes
        report.eager_frames = capture.eager_frames_since(before)
        return report

    return run


def _report(hooks: list[FrameHook]) -> ExplainOutput:
    # only entries that served a call (Entry.served): a hook also installs every entry persisted for its code,
    # guards failing or not, and those were listed with their breaks (an earlier explain's print() break)
    entries = [e for h in hooks for e in reversed(h.entries) if e.served]
    graphs = [g for e in entries for g in e.graphs]
    breaks = _distinct_breaks(e.graph_break for e in entries if e.graph_break is not None)
    ops = [[_op_name(n) for n in g.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
           for g in graphs]
    guards = [g for e in entries for g in e.guard.guards]
    return ExplainOutput(graphs, len(graphs), len(breaks), breaks, ops, guards)


def explain_compiled(hooks: list[FrameHook]) -> list[tuple[str, ExplainOutput]]:
    """A report for each compiled function among `hooks` (what `framejit explain SCRIPT` prints):
    (function name with file:line, report); resume functions and callees are part of their frame's."""
    owned = {id(h) for root in hooks for h in root.request.hooks.all()}
    reports = []
    for hook in hooks:
        if id(hook) in owned or not hook.entries:
            continue  # resume functions and callees are reported with the frame that made them
        code = hook.fn.__code__
        reports.append((f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})",
                        _report([hook, *hook.request.hooks.all()])))
    return reports


def _distinct_breaks(breaks) -> list[GraphBreak]:
    """One record per break site: a break inside a callee also ends each caller's graph, and those
    frames report the same innermost user location."""
    seen, result = set(), []
    for br in breaks:
        key = (br.kind, br.location, br.explanation)
        if key not in seen:
            seen.add(key)
            result.append(br)
    return result


def _find_hook(compiled: Any) -> FrameHook:
    if isinstance(compiled, FrameHook):
        return compiled
    if isinstance(compiled, types.MethodType):
        return compiled.__func__
    return type(compiled)._framejit_hook


def _op_name(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, str):
        return target
    return getattr(target, "__name__", str(target))


def mark_dynamic(tensor: torch.Tensor, dim: int | list | tuple, *, min: int | None = None,
                 max: int | None = None) -> None:
    """Dimension `dim` (or each of a list) of `tensor` is symbolic when a compiled function first sees the
    tensor, so other sizes reuse the compilation (NOTE [Symbolic shapes] in capture/shapes.py). Sets the
    attributes torch's own `torch._dynamo.mark_dynamic` sets, so torch.compile honours it too. A trace that
    specialises the dimension, or a size outside [min, max], raises ConstraintViolationError (NOTE [Broken
    mark_dynamic contracts]); `maybe_mark_dynamic` is the marker the code may specialise."""
    _mark(tensor, dim, "_dynamo_dynamic_indices")
    # NOTE [Markers torch.compile reads]: torch's own mark_dynamic records a range for EVERY marked dimension
    # (bounds None when not given), a hint-override dict, a `_specialize_on` dict and `_has_dynamo_dim_marking`;
    # torch.compile's builder pops the range of each marked dimension (IndexError on an empty set) and library
    # code marking the same tensor after framejit expects the dicts. Set them the same way.
    for attr, empty in (("_dynamo_dynamic_range", set), ("_dynamo_hint_overrides", dict), ("_specialize_on", dict)):
        if not isinstance(getattr(tensor, attr, None), empty):
            setattr(tensor, attr, empty())
    for d in ([dim] if isinstance(dim, int) else dim):
        d %= tensor.dim() or 1
        tensor._dynamo_dynamic_range = {r for r in tensor._dynamo_dynamic_range if getattr(r, "dim", None) != d}
        tensor._dynamo_dynamic_range.add(capture.DimRange(d, min, max))
        tensor._specialize_on.setdefault(d, [])
    tensor._has_dynamo_dim_marking = True


def maybe_mark_dynamic(tensor: torch.Tensor, dim: int | list | tuple) -> None:
    """Like mark_dynamic, but the dimension may still be specialised by the code (torch's weak marker)."""
    _mark(tensor, dim, "_dynamo_weak_dynamic_indices")


def mark_static(tensor: torch.Tensor, dim: int | list | tuple | None = None) -> None:
    """Dimension `dim` (all with None) of `tensor` is never symbolic, even under dynamic=True."""
    _mark(tensor, list(range(tensor.dim())) if dim is None else dim, "_dynamo_static_indices")


def _mark(tensor: torch.Tensor, dim, attr: str) -> None:
    dims = [dim] if isinstance(dim, int) else list(dim)
    for d in dims:
        if not isinstance(d, int) or not -tensor.dim() <= d < tensor.dim():  # none of a 0-d tensor's
            raise IndexError(f"dimension {d!r} out of range for a tensor of {tensor.dim()} dimensions")
    marked = set(getattr(tensor, attr, ()) or ())
    marked.update(d % tensor.dim() for d in dims)
    setattr(tensor, attr, marked)


__all__ = ["BackendCompilerFailed", "ConstraintViolationError", "FramejitError", "Unsupported", "compile", "disable", "explain", "mark_dynamic", "reset", "stats",
           "config", "mark_static", "maybe_mark_dynamic"]
