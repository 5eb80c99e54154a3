"""nn.Module calls with hooks: forward and forward-pre hooks are inlined, and the hook dicts are guarded.

NOTE [Module hooks]: `module(*args)` is `Module._call_impl`, which runs the global and per-module
forward-pre hooks, `forward`, then the forward hooks (and wraps everything for backward hooks). Instead of
tracing torch's `_call_impl` (which reads jit tracing state, builds BackwardHook objects and keeps always-
called bookkeeping), a module call is planned here:
- no hook anywhere: the call is exactly `forward(*args)`; guarded by the emptiness of the module's four
  hook dicts and of torch's four global hook dicts (`plan_module_call`);
- forward/forward-pre hooks only (per-module or global, with or without kwargs, `prepend`, `always_call`):
  `call_with_hooks`, a plain-Python copy of `_call_impl`'s forward part, is inlined. It asks `hooks_of`,
  which the translator answers at trace time (`trace_hooks_of`): each hook is wrapped through its source
  (`L['m']._forward_hooks[7]`, guarded like any function, bound method, partial or callable object; the
  callable objects of torch's own classes, such as prune's and spectral_norm's, have their `__call__`
  inlined) and the key lists of every hook dict read are guarded, so adding, removing or reordering a
  hook, or a global hook registered later (also in a new process over a warm frame cache), recompiles;
- backward hooks (per-module or global), or a lazy module whose parameters are not initialised yet (one
  that NOTE [Lazy modules initialised while tracing] did not initialise, lazy_modules.py):
  Unsupported(MODULE_HOOKS), so the module call is a graph break (`fullgraph=True` raises).

At a graph break (`callee_at_break`, NOTE [Module calls at breaks]) the module call becomes a call of a
function through a frame hook, with the module as its first argument: `call_with_hooks` for forward hooks,
`call_with_backward_hooks` for backward hooks, in which torch's own BackwardHook wraps the inputs and
outputs in helpers framejit never traces (DISABLED: each is a break) while the forward-pre hooks, `forward`
and the forward hooks are captured between them. Run as Python, both behave as `module(*args)` (they read
the hook dicts as they are at each call). A lazy module's first call runs as it is (torch initialises it);
the next call sees the initialised module (its class changes, or its initialising pre-hook is gone: both
are guarded) and captures it.

A hook registered while tracing (NOTE [Hooks registered in the trace], hook_handles.py) is written into a
hook dict from outside and replayed after the graph; the plan and `hooks_of` read such a dict as the trace
left it, so a module called after the registration in the same trace runs the new hook.

The forward hooks are read after forward, as torch reads them, so one registered by a forward-pre hook or
by forward itself runs in the same call (when the module had hooks when the call started; without any,
torch calls forward alone and so does the plan).

torch's other global hooks (`register_module_buffer/parameter/module_registration_hook`) run when a
module registers a tensor or child (inside Module.__setattr__, through which attribute stores recorded
while tracing are replayed), not as part of a call.

`always_call` hooks differ from the others only when forward raises; a traced call that raises runs the
frame eagerly, and `call_with_hooks` run as Python takes torch's exception path (`_call_catching`).
"""
from __future__ import annotations

import functools
import types
import warnings
from typing import Any

import torch
from torch.nn.modules import lazy as _lazy
from torch.nn.modules import module as _torch_module
from torch.utils import hooks as _torch_hooks
from torch.utils.hooks import BackwardHook

from .breaks import DISABLED, BreakKind, Unsupported
from .sources import AttrSource, GlobalSource, ItemSource, Ref, Source
from .values import ConstantValue, DictValue, NNModuleValue, ObjectValue, TupleValue, Value
from .values.builder import wrap

_GLOBALS = vars(_torch_module)  # torch.nn.modules.module's globals: the global hook dicts live here
_MODULE_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_DICTS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")
_BACKWARD = ("_backward_hooks", "_backward_pre_hooks")
_GLOBAL_BACKWARD = ("_global_backward_hooks", "_global_backward_pre_hooks")
# dicts whose key lists decide what `call_with_hooks` does (guarded when any forward hook applies)
_MODULE_KEYED = ("_forward_pre_hooks", "_forward_hooks", "_forward_pre_hooks_with_kwargs",
                 "_forward_hooks_with_kwargs", "_forward_hooks_always_called", *_BACKWARD)
_GLOBAL_KEYED = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_forward_hooks_with_kwargs",
                 "_global_forward_hooks_always_called", *_GLOBAL_BACKWARD)


# ---- the call, as plain Python (inlined by the translator, or run as it is after a break) --------------
def hooks_of(module: torch.nn.Module) -> tuple[tuple, tuple, bool]:
    """(pre hooks, forward hooks, any always-called): `(hook_id, hook, with_kwargs, always_called)` each,
    in the order `Module._call_impl` runs them (global hooks first). Answered at trace time by
    `trace_hooks_of`."""
    g = _torch_module
    pre = tuple((i, h, i in module._forward_pre_hooks_with_kwargs, False)
                for i, h in (*g._global_forward_pre_hooks.items(), *module._forward_pre_hooks.items()))
    post = tuple((i, h, i in module._forward_hooks_with_kwargs or i in g._global_forward_hooks_with_kwargs,
                  i in module._forward_hooks_always_called or i in g._global_forward_hooks_always_called)
                 for i, h in (*g._global_forward_hooks.items(), *module._forward_hooks.items()))
    return pre, post, bool(module._forward_hooks_always_called or g._global_forward_hooks_always_called)


def call_with_hooks(module, /, *args, **kwargs):
    """`module(*args, **kwargs)` for a module with forward and forward-pre hooks only."""
    pre_hooks, _, always = hooks_of(module)
    if always:
        return _call_catching(module, pre_hooks, args, kwargs)
    for _, hook, with_kwargs, _ in pre_hooks:
        if with_kwargs:
            new = hook(module, args, kwargs)
            if new is not None:
                if isinstance(new, tuple) and len(new) == 2:
                    args, kwargs = new
                else:
                    _bad_pre_hook_result(new)
        else:
            new = hook(module, args)
            if new is not None:
                if not isinstance(new, tuple):
                    new = (new,)
                args = new
    result = module.forward(*args, **kwargs)
    for _, hook, with_kwargs, _ in hooks_of(module)[1]:  # read after forward, as torch reads them
        if with_kwargs:  # one call per line: NOTE [Module calls past the hook] in caller_frames.py
            new = hook(module, args, kwargs, result)
        else:
            new = hook(module, args, result)
        if new is not None:
            result = new
    return result


def call_with_backward_hooks(module, /, *args, **kwargs):
    """`module(*args, **kwargs)` for a module with backward hooks, called at a graph break: torch's own
    BackwardHook wraps the inputs and the outputs in helpers framejit never traces (each call is a break),
    and the forward-pre hooks, `forward` and the forward hooks between them are captured."""
    pre_hooks, _, always = hooks_of(module)
    if always:
        return _call_as_is(module, args, kwargs)
    backward = _backward_hooks(module)
    args, kwargs = _run_pre_hooks(module, pre_hooks, args, kwargs)
    bw_hook, args = _setup_backward_inputs(module, backward, args)
    result = module.forward(*args, **kwargs)
    for _, hook, with_kwargs, _ in hooks_of(module)[1]:  # read after forward, as torch reads them
        if with_kwargs:  # one call per line: NOTE [Module calls past the hook] in caller_frames.py
            new = hook(module, args, kwargs, result)
        else:
            new = hook(module, args, result)
        if new is not None:
            result = new
    return _setup_backward_outputs(module, backward, bw_hook, args, result)


def _run_pre_hooks(module, pre_hooks, args, kwargs):
    for _, hook, with_kwargs, _ in pre_hooks:
        if with_kwargs:
            new = hook(module, args, kwargs)
            if new is not None:
                if isinstance(new, tuple) and len(new) == 2:
                    args, kwargs = new
                else:
                    _bad_pre_hook_result(new)
        else:
            new = hook(module, args)
            if new is not None:
                args = new if isinstance(new, tuple) else (new,)
    return args, kwargs


# The parts of Module._call_impl that framejit does not trace (DISABLED below): run as they are.
def _call_as_is(module, args, kwargs):
    return module(*args, **kwargs)


def _backward_hooks(module):
    """(full backward hooks, non-full backward hooks, backward pre-hooks), read before the forward-pre hooks
    run, as torch reads them."""
    full, non_full, pre = [], [], []
    if module._backward_pre_hooks or _torch_module._global_backward_pre_hooks:
        pre = module._get_backward_pre_hooks()
    if module._backward_hooks or _torch_module._global_backward_hooks:
        full, non_full = module._get_backward_hooks()
    return full, non_full, pre


def _setup_backward_inputs(module, backward, args):
    full, _, pre = backward
    if not (full or pre):
        return None, args
    bw_hook = BackwardHook(module, full, pre)
    return bw_hook, bw_hook.setup_input_hook(args)


def _setup_backward_outputs(module, backward, bw_hook, args, result):
    if bw_hook:
        if not isinstance(result, (torch.Tensor, tuple)):
            warnings.warn("For backward hooks to be called, module output should be a Tensor or a tuple of Tensors"
                          f" but received {type(result)}", stacklevel=2)
        result = bw_hook.setup_output_hook(result)
    non_full = backward[1]
    if non_full:
        var = result
        while not isinstance(var, torch.Tensor):
            if isinstance(var, dict):
                var = next(v for v in var.values() if isinstance(v, torch.Tensor))
            else:
                var = var[0]
        grad_fn = var.grad_fn
        if grad_fn is not None:
            for hook in non_full:
                grad_fn.register_hook(_torch_module._WrappedHook(hook, module))
            module._maybe_warn_non_full_backward_hook(args, result, grad_fn)
    return result


for _helper in (_call_as_is, _backward_hooks, _setup_backward_inputs, _setup_backward_outputs):
    DISABLED.add(_helper.__code__)


def _bad_pre_hook_result(result):
    raise RuntimeError(f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got {result}.")


def _call_catching(module, pre_hooks, args, kwargs):
    """`call_with_hooks` with torch's exception path: always-called forward hooks that have not run yet
    run when forward (or a hook) raises, their own errors turned into warnings, then the error propagates."""
    result = None
    called = []
    try:
        for _, hook, with_kwargs, _ in pre_hooks:
            if with_kwargs:
                new = hook(module, args, kwargs)
                if new is not None:
                    if isinstance(new, tuple) and len(new) == 2:
                        args, kwargs = new
                    else:
                        _bad_pre_hook_result(new)
            else:
                new = hook(module, args)
                if new is not None:
                    args = new if isinstance(new, tuple) else (new,)
        result = module.forward(*args, **kwargs)
        for hook_id, hook, with_kwargs, always_called in hooks_of(module)[1]:  # read after forward
            if always_called:
                called.append(hook_id)
            if with_kwargs:
                new = hook(module, args, kwargs, result)
            else:
                new = hook(module, args, result)
            if new is not None:
                result = new
        return result
    except Exception:
        _run_always_called(module, args, kwargs, result, called)
        raise


def _run_always_called(module, args, kwargs, result, called):
    """The except branch of `Module._call_impl` (global hooks without kwargs, as torch calls them)."""
    g = _torch_module
    for hook_id, hook in list(g._global_forward_hooks.items()):
        if hook_id in g._global_forward_hooks_always_called and hook_id not in called:
            try:
                new = hook(module, args, result)
                if new is not None:
                    result = new
            except Exception as e:
                warnings.warn("global module forward hook with ``always_call=True`` raised an exception "
                              f"that was silenced as another error was raised in forward: {str(e)}", stacklevel=2)
    for hook_id, hook in list(module._forward_hooks.items()):
        if hook_id in module._forward_hooks_always_called and hook_id not in called:
            try:
                if hook_id in module._forward_hooks_with_kwargs:
                    new = hook(module, args, kwargs, result)
                else:
                    new = hook(module, args, result)
                if new is not None:
                    result = new
            except Exception as e:
                warnings.warn("module forward hook with ``always_call=True`` raised an exception "
                              f"that was silenced as another error was raised in forward: {str(e)}", stacklevel=2)


# ---- trace time -------------------------------------------------------------------------------------
def plan_module_call(tx, mod_value: NNModuleValue) -> bool:
    """Decide how `module(...)` (nn.Module.__call__) is traced and guard that decision: False when it is
    exactly `forward(...)`, True when `call_with_hooks` is to be inlined; Unsupported(MODULE_HOOKS) for
    backward hooks and uninitialised lazy modules (NOTE [Module hooks]). A hook dict the trace wrote is
    read as the trace left it (NOTE [Hooks registered in the trace])."""
    m = mod_value.obj
    if _uninitialised_lazy(m):
        _guard_keys(tx, _module_dict_source(mod_value, "_forward_pre_hooks"), m._forward_pre_hooks)
        raise Unsupported(BreakKind.MODULE_HOOKS, f"the first call of the lazy module {type(m).__name__} "
                          "initialises its parameters (it runs as it is; later calls are captured)")
    live = _live_tables(tx, m)
    backward = [d for d in (*_BACKWARD, *_GLOBAL_BACKWARD) if live[d]]
    if backward:
        raise Unsupported(BreakKind.MODULE_HOOKS, f"{type(m).__name__} has backward hooks ({', '.join(backward)}); "
                          "the module is called as it is")
    if any(live[d] for d in (*_MODULE_DICTS, *_GLOBAL_DICTS)):
        if mod_value.source is None:
            raise Unsupported(BreakKind.MODULE_HOOKS, f"{type(m).__name__} has hooks and no source to guard them by")
        return True
    # a dict the trace wrote had its entry keys guarded when it was read (NOTE [Hooks registered in the trace])
    _guard_no_global_hooks(tx, [d for d in _GLOBAL_DICTS if _written(tx, _GLOBALS[d]) is None])
    unwritten = [d for d in _MODULE_DICTS if _written(tx, getattr(m, d, None)) is None]
    if mod_value.source is not None and unwritten:
        e = mod_value.source.expr(tx.output.names)
        hooks = " or ".join(f"{e}.{d}" for d in unwritten)
        tx.output.add_guard("NO_HOOKS", f"not ({hooks})", mod_value.source, expected="no hooks",
                            actual=f"[{hooks.replace(' or ', ', ')}]")
    return False


def callee_at_break(tx, mod_value: NNModuleValue):
    """The function a graph break calls in place of `module(...)`, with the module as its first argument
    (NOTE [Module calls at breaks]), or None to call the module as it is."""
    m = mod_value.obj
    try:
        with_hooks = plan_module_call(tx, mod_value)
    except Unsupported:
        if _uninitialised_lazy(m) or mod_value.source is None:
            return None
        _guard_hooked_path(tx, mod_value, _BACKWARD, _GLOBAL_BACKWARD)
        return call_with_backward_hooks  # it reads the hooks as they are at each call
    if with_hooks:
        _guard_hooked_path(tx, mod_value, _MODULE_DICTS, _GLOBAL_DICTS)
    return call_with_hooks if with_hooks else type(m).forward


# NOTE [Hooked paths at breaks are guarded]: which function a break calls in place of `module(...)` is
# fixed in the transformed code: `forward` is guarded by NO_HOOKS (plan_module_call), and so must the
# hooked ones be. Unguarded, an entry traced while the module had a forward pre-hook kept calling
# `call_with_hooks` after the hook was removed (newest entries are tried first): the values were right (it
# reads the hooks per call), but a `warnings.warn(msg, stacklevel=2..4)` in forward named module_hooks'
# levels of a hooked call (module.py's `inner` lines) where eager names `_call_impl`'s line or the caller
# (review A F2). HOOKED_PATH guards that one of the dicts that chose the path is non-empty (backward ones
# for call_with_backward_hooks, any hook dict for call_with_hooks, whose backward-hook absence
# plan_module_call decided). Not when the trace itself wrote one of those dicts (NOTE [Hooks registered in
# the trace]): the frame's entry state is not what decided.
def _guard_hooked_path(tx, mod_value: NNModuleValue, module_dicts: tuple, global_dicts: tuple) -> None:
    m = mod_value.obj
    tables = [getattr(m, d, None) for d in module_dicts] + [_GLOBALS[d] for d in global_dicts]
    if any(_written(tx, table) is not None for table in tables):
        return
    e = mod_value.source.expr(tx.output.names)
    g = tx.output.name_of(_GLOBALS, "G")
    hooks = " or ".join([f"{e}.{d}" for d in module_dicts] + [f"{g}[{d!r}]" for d in global_dicts])
    backward = " or ".join([f"{e}.{d}" for d in _BACKWARD] + [f"{g}[{d!r}]" for d in _GLOBAL_BACKWARD])
    expr = f"({hooks})" if module_dicts == _BACKWARD else f"({hooks}) and not ({backward})"
    tx.output.add_guard("HOOKED_PATH", expr, mod_value.source, expected="the hooks that chose this call",
                        actual=f"[{hooks.replace(' or ', ', ')}]")


def _uninitialised_lazy(m: torch.nn.Module) -> bool:
    return issubclass(type(m), _lazy.LazyModuleMixin) and m.has_uninitialized_params()  # by type (revA A4)


def _guard_no_global_hooks(tx, names: list[str]) -> None:
    if not names:
        return
    g = tx.output.name_of(_GLOBALS, "G")
    hooks = " or ".join(f"{g}[{d!r}]" for d in names)
    tx.output.add_guard("NO_GLOBAL_HOOKS", f"not ({hooks})", None, expected="no global module hooks",
                        actual=f"[{hooks.replace(' or ', ', ')}]")


def trace_hooks_of(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`hooks_of(module)` while tracing: the hooks as values read through their sources, every hook dict
    that decides the answer guarded by its key list (a dict the trace wrote: by the key guard of its
    wrapping, and read as the trace left it)."""
    mod_value = args[0]
    if kwargs or len(args) != 1 or not isinstance(mod_value, NNModuleValue) or mod_value.source is None:
        raise Unsupported(BreakKind.MODULE_HOOKS, "hooks of a module without a source")
    m = mod_value.obj
    sources = {name: _module_dict_source(mod_value, name) for name in _MODULE_KEYED}
    sources.update({name: GlobalSource(Ref(_GLOBALS, "G"), name) for name in _GLOBAL_KEYED})
    real = {name: getattr(m, name) for name in _MODULE_KEYED}
    real.update({name: _GLOBALS[name] for name in _GLOBAL_KEYED})
    held = {name: _written(tx, table) for name, table in real.items()}
    _guard_tables(tx, [(sources[n], real[n]) for n in _MODULE_KEYED if held[n] is None])
    _guard_tables(tx, [(sources[n], real[n]) for n in _GLOBAL_KEYED if held[n] is None])
    live = _live_tables(tx, m)

    def entries(global_name: str, module_name: str, kw_names: tuple, always_names: tuple) -> TupleValue:
        out = []
        for name in (global_name, module_name):
            for hook_id in live[name]:
                hook = held[name].items[hook_id] if held[name] is not None else \
                    _hook_value(tx, real[name][hook_id], ItemSource(sources[name], hook_id))
                out.append(TupleValue([ConstantValue(hook_id), hook,
                                       ConstantValue(any(hook_id in live[k] for k in kw_names)),
                                       ConstantValue(any(hook_id in live[k] for k in always_names))]))
        return TupleValue(out)

    pre = entries("_global_forward_pre_hooks", "_forward_pre_hooks", ("_forward_pre_hooks_with_kwargs",), ())
    post = entries("_global_forward_hooks", "_forward_hooks",
                   ("_forward_hooks_with_kwargs", "_global_forward_hooks_with_kwargs"),
                   ("_forward_hooks_always_called", "_global_forward_hooks_always_called"))
    always = bool(live["_forward_hooks_always_called"] or live["_global_forward_hooks_always_called"])
    return TupleValue([pre, post, ConstantValue(always)])


def _written(tx, table: Any) -> DictValue | None:
    """The trace's value of the hook dict `table` when the trace wrote into it (replayed after the graph)."""
    held = tx.output.side_effects.written_dict(table) if isinstance(table, dict) else None
    if held is not None and tx.output.side_effects.region_reads is not None:
        tx.output.side_effects.region_reads.saw(held)  # NOTE [State the frame writes around a reentrant call]
    return held if isinstance(held, DictValue) else None


def _live_tables(tx, m: torch.nn.Module) -> dict[str, list]:
    """The keys of every hook dict of `m` and the global ones, in order, as the trace has left them."""
    tables = {name: getattr(m, name, None) for name in (*_MODULE_DICTS, *_MODULE_KEYED)}
    tables.update({name: _GLOBALS[name] for name in (*_GLOBAL_DICTS, *_GLOBAL_KEYED)})
    live = {}
    for name, table in tables.items():
        held = _written(tx, table)
        live[name] = list(held.items if held is not None else table or ())
    return live


def _hook_value(tx, hook: Any, source: Source) -> Value:
    if _python_callable_object(hook):  # e.g. torch.nn.utils.prune's methods: their __call__ is inlined
        hook_value = tx.output.cached(source)
        if hook_value is None:
            tx.output.guard_type(source, type(hook))
            hook_value = tx.output.remember(source, ObjectValue(hook, source))
        return hook_value
    return wrap(tx.output, hook, source)


def _python_callable_object(hook) -> bool:
    """An instance (not a function, method or partial) whose class defines `__call__` in Python."""
    call = getattr(type(hook), "__call__", None)
    return not isinstance(hook, (types.FunctionType, types.MethodType, functools.partial, type)) and \
        isinstance(call, types.FunctionType)


def _module_dict_source(mod_value: NNModuleValue, name: str) -> Source:
    return AttrSource(mod_value.source, name)


def _guard_tables(tx, tables: list[tuple[Source, dict]]) -> None:
    """Key-list guards for hook dicts: one line for all the empty ones, one per non-empty dict."""
    empty = [source for source, table in tables if not table]
    if empty:
        exprs = [source.expr(tx.output.names) for source in empty]
        tx.output.add_guard("HOOK_KEYS", f"not ({' or '.join(exprs)})", empty[0], expected="no hooks",
                            actual=f"[{', '.join(exprs)}]")
    for source, table in tables:
        if table:
            _guard_keys(tx, source, table)


def _guard_keys(tx, source: Source, table: dict) -> None:
    e = source.expr(tx.output.names)
    keys = list(table)
    expr = f"not {e}" if not keys else f"___list({e}) == {keys!r}"
    tx.output.add_guard("HOOK_KEYS", expr, source, expected=repr(keys), actual=f"___list({e})")


TRACE_TIME = {hooks_of: trace_hooks_of}  # functions the translator answers itself instead of inlining

from .hook_handles import removable_handle_init  # noqa: E402  (NOTE [Hooks registered in the trace])
TRACE_TIME[_torch_hooks.RemovableHandle.__init__] = removable_handle_init
