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
  (`L['m']._forward_hooks[7]`, guarded like any function, bound method, partial or callable object) and
  the key lists of every hook dict read are guarded, so adding, removing or reordering a hook, or a global
  hook registered later (also in a new process over a warm frame cache), recompiles;
- backward hooks (per-module or global), or a lazy module whose parameters are not initialised yet:
  Unsupported(MODULE_HOOKS). At the graph break the module is called as it is (`module(*args)`), so
  torch runs the hooks and the lazy initialisation; the next call sees the initialised module (its class
  changes, or its initialising pre-hook is gone: both are guarded) and captures it.

At a graph break a module with forward hooks is called as `hook(call_with_hooks)(module, *args)`
(NOTE [Module calls at breaks]): run as Python, `call_with_hooks` behaves as `module(*args)` (it reads the
hook dicts live), and traced, it captures the hooks and `forward` as a frame of its own.

`always_call` hooks differ from the others only when forward raises; a traced call that raises runs the
frame eagerly, and `call_with_hooks` run as Python takes torch's exception path (`_call_catching`).
"""
from __future__ import annotations

import warnings

import torch
from torch.nn.modules import lazy as _lazy
from torch.nn.modules import module as _torch_module

from .breaks import BreakKind, Unsupported
from .sources import AttrSource, GlobalSource, ItemSource, Ref, Source
from .values import ConstantValue, NNModuleValue, TupleValue, Value
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
    pre_hooks, forward_hooks, always = hooks_of(module)
    if always:
        return _call_catching(module, pre_hooks, forward_hooks, args, kwargs)
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
    for _, hook, with_kwargs, _ in forward_hooks:
        new = hook(module, args, kwargs, result) if with_kwargs else hook(module, args, result)
        if new is not None:
            result = new
    return result


def _bad_pre_hook_result(result):
    raise RuntimeError(f"forward pre-hook must return None or a tuple of (new_args, new_kwargs), but got {result}.")


def _call_catching(module, pre_hooks, forward_hooks, args, kwargs):
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
        for hook_id, hook, with_kwargs, always_called in forward_hooks:
            if always_called:
                called.append(hook_id)
            new = hook(module, args, kwargs, result) if with_kwargs else hook(module, args, result)
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
    backward hooks and uninitialised lazy modules (NOTE [Module hooks])."""
    m = mod_value.obj
    if isinstance(m, _lazy.LazyModuleMixin) and m.has_uninitialized_params():
        _guard_keys(tx, _module_dict_source(mod_value, "_forward_pre_hooks"), m._forward_pre_hooks)
        raise Unsupported(BreakKind.MODULE_HOOKS, f"the first call of the lazy module {type(m).__name__} "
                          "initialises its parameters (it runs as it is; later calls are captured)")
    backward = [d for d in _BACKWARD if getattr(m, d, None)] + [d for d in _GLOBAL_BACKWARD if _GLOBALS[d]]
    if backward:
        raise Unsupported(BreakKind.MODULE_HOOKS, f"{type(m).__name__} has backward hooks ({', '.join(backward)}); "
                          "the module is called as it is")
    module_hooks = any(getattr(m, d, None) for d in _MODULE_DICTS)
    global_hooks = any(_GLOBALS[d] for d in _GLOBAL_DICTS)
    if module_hooks or global_hooks:
        if mod_value.source is None:
            raise Unsupported(BreakKind.MODULE_HOOKS, f"{type(m).__name__} has hooks and no source to guard them by")
        return True
    _guard_no_global_hooks(tx)
    if mod_value.source is not None:
        e = mod_value.source.expr(tx.output.names)
        hooks = " or ".join(f"{e}.{d}" for d in _MODULE_DICTS)
        tx.output.add_guard("NO_HOOKS", f"not ({hooks})", mod_value.source, expected="no hooks",
                            actual=f"[{hooks.replace(' or ', ', ')}]")
    return False


def _guard_no_global_hooks(tx) -> None:
    g = tx.output.name_of(_GLOBALS, "G")
    hooks = " or ".join(f"{g}[{d!r}]" for d in _GLOBAL_DICTS)
    tx.output.add_guard("NO_GLOBAL_HOOKS", f"not ({hooks})", None, expected="no global module hooks",
                        actual=f"[{hooks.replace(' or ', ', ')}]")


def trace_hooks_of(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`hooks_of(module)` while tracing: the hooks as values read through their sources, every hook dict
    that decides the answer guarded by its key list."""
    mod_value = args[0]
    if kwargs or len(args) != 1 or not isinstance(mod_value, NNModuleValue) or mod_value.source is None:
        raise Unsupported(BreakKind.MODULE_HOOKS, "hooks of a module without a source")
    m = mod_value.obj
    for name in _MODULE_KEYED:
        _guard_keys(tx, _module_dict_source(mod_value, name), getattr(m, name))
    for name in _GLOBAL_KEYED:
        _guard_keys(tx, GlobalSource(Ref(_GLOBALS, "G"), name), _GLOBALS[name])
    pre, post, always = hooks_of(m)
    g_pre, g_post = _torch_module._global_forward_pre_hooks, _torch_module._global_forward_hooks
    pre_values = [_entry(tx, entry, "_global_forward_pre_hooks" if entry[0] in g_pre else None,
                         mod_value, "_forward_pre_hooks") for entry in pre]
    post_values = [_entry(tx, entry, "_global_forward_hooks" if entry[0] in g_post else None,
                          mod_value, "_forward_hooks") for entry in post]
    return TupleValue([TupleValue(pre_values), TupleValue(post_values), ConstantValue(always)])


def _entry(tx, entry: tuple, global_dict: str | None, mod_value: NNModuleValue, module_dict: str) -> Value:
    hook_id, hook, with_kwargs, always_called = entry
    table = GlobalSource(Ref(_GLOBALS, "G"), global_dict) if global_dict else _module_dict_source(mod_value, module_dict)
    hook_value = wrap(tx.output, hook, ItemSource(table, hook_id))
    return TupleValue([ConstantValue(hook_id), hook_value, ConstantValue(with_kwargs), ConstantValue(always_called)])


def _module_dict_source(mod_value: NNModuleValue, name: str) -> Source:
    return AttrSource(mod_value.source, name)


def _guard_keys(tx, source: Source, table: dict) -> None:
    e = source.expr(tx.output.names)
    keys = list(table)
    expr = f"not {e}" if not keys else f"___list({e}) == {keys!r}"
    tx.output.add_guard("HOOK_KEYS", expr, source, expected=repr(keys), actual=f"___list({e})")


TRACE_TIME = {hooks_of: trace_hooks_of}  # functions the translator answers itself instead of inlining
