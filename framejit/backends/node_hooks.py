"""Hooks the user registers on autograd nodes that a None framejit hands out reaches (NOTE [Node hooks a None
reaches]).

`install()` (from hook_dicts.install) notes the hook dicts torch makes for nodes' `register_hook` and
`register_prehook`; `walked(node)` notes a node the walk of joint_unreached.skip_hooks_above passes, and wraps
the hooks of the noted dicts for the graph task.
"""
from __future__ import annotations

import weakref

import torch

# NOTE [Node hooks a None reaches]
# The engine runs the nodes above a joint's input that framejit hands None (NOTE [A joint no gradient
# reaches]), where eager's backward never reaches them, and calls the hooks registered on them
# (`u.grad_fn.register_prehook(fn)`, `u.grad_fn.register_hook(fn)`, the same on a Python Function's node) with
# None gradients: a hook that assumes tensors raised in the user's backward (review revN MED-1, revR p_x15).
# torch keeps such hooks in a dict per node that only the C++ node holds, made by
# `torch.autograd.Function._register_hook` (the static method the node's register_hook and register_prehook
# call on the node's first hook of each kind). `install` wraps it to note each dict it makes (weakly). Each walk
# of `skip_hooks_above` notes the nodes it passes under the graph task (dropped by an engine callback at its
# end) and wraps the hooks of the live noted dicts in a one-shot wrapper (put back at its next call; a wrapper
# left by an earlier task whose backward did not run the node is replaced, review revAA HIGH-1): a call
# in that graph task whose node (`torch._C._current_autograd_node()`) the walk passed, whose incoming
# gradients (a pre-hook's argument, a post-hook's second) are all None and that no None of the user's reaches
# (NOTE [Nones the user's backward sends]) is skipped; any other call runs the hook as torch would. framejit's
# own hooks and torch.utils.hooks' (module full backward hooks: NOTE [Module backward hooks a None reaches])
# are left as they are. Not covered: hooks registered before `install`. Cost: a weak reference per node's
# first hook; per walk, one pass over the live noted dicts.
_DICTS: dict[int, weakref.ref] = {}
_WALKED: dict[int, set] = {}  # graph task id -> keys (user_none.key_of) of the nodes the walks passed
_WRAPPED = "_framejit_node_once"


def _registering(original):
    def _register_hook(backward_hooks, hook):
        result = original(backward_hooks, hook)
        if backward_hooks is None:
            try:
                hooks = result[0]
                key = id(hooks)
                _DICTS[key] = weakref.ref(hooks, lambda ref, key=key: _forget(key, ref))
            except Exception:  # never the user's failure: only a None call not skipped
                pass
        return result
    _register_hook.__wrapped__ = original
    _register_hook.__doc__ = original.__doc__
    return _register_hook


def _forget(key: int, ref) -> None:
    if _DICTS.get(key) is ref:
        del _DICTS[key]


def walked(node) -> None:
    """`node` (not a leaf's, not a joint's), passed by a walk after framejit handed a None."""
    from .user_none import key_of
    task = torch._C._current_graph_task_id()
    keys = _WALKED.get(task)
    if keys is None:
        keys = _WALKED[task] = set()
        try:
            torch.autograd.Variable._execution_engine.queue_callback(lambda: _WALKED.pop(task, None))
        except Exception:
            pass
        _wrap_all(task)
    keys.add(key_of(node))


def _wrap_all(task: int) -> None:
    for ref in list(_DICTS.values()):
        hooks = ref()
        if not hooks:
            continue
        for k, fn in list(hooks.items()):
            fn = getattr(fn, _WRAPPED, None) or fn  # wrapped for an earlier task whose backward did not run it
            module = getattr(fn, "__module__", None) or ""
            if module.startswith("framejit") or module == "torch.utils.hooks":
                continue
            hooks[k] = _once(hooks, k, fn, task)


def _once(hooks, k, fn, task: int):
    def once(*args):
        if hooks.get(k) is once:
            hooks[k] = fn
        if task == torch._C._current_graph_task_id() and args and _skipped(task, args[-1]):
            return None
        return fn(*args)
    setattr(once, _WRAPPED, fn)
    return once


def _skipped(task: int, grads) -> bool:
    from .user_none import key_of, reached
    if not isinstance(grads, (tuple, list)) or any(g is not None for g in grads):
        return False
    node = torch._C._current_autograd_node()
    return node is not None and key_of(node) in _WALKED.get(task, ()) and not reached(node)


def install() -> None:
    from torch.autograd.function import Function
    original = getattr(Function, "_register_hook", None)
    if original is not None and not hasattr(original, "__wrapped__"):
        Function._register_hook = staticmethod(_registering(original))
