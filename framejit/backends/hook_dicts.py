"""The tensor-hook dicts of non-leaf tensors, found from their autograd node (NOTE [Hooks of activations a None
reaches]).

`install()` (from `framejit.compile`) makes `Tensor.register_hook` note each non-leaf tensor's hook dict under
its node; `hook_dicts(node)` gives the live dicts noted for `node`.
"""
from __future__ import annotations

import types
import weakref

import torch

# NOTE [Hooks of activations a None reaches]
# A joint's node that gets no gradient hands None to its inputs (NOTE [A joint no gradient reaches],
# joint_unreached.py), and the engine still runs every node above it, with undefined gradients, up to the leaves:
# it runs whatever is reachable from the loss, and a joint is one node with edges to all its inputs. Eager's
# backward never reaches those nodes. The tensor hooks of the eager activations there (`u = ct(x).relu() * 2;
# u.register_hook(lambda g: g.clamp(-1, 1)); m = cm(u + 1)`, no loss using m) are tensor pre-hooks of their
# nodes, so the engine called them with None, and a hook that assumes a tensor raised in the user's backward
# (AttributeError on None.clamp; review revJ H2). torch gives no way from a node to its tensor pre-hooks (a node's
# `gc.get_referents` shows them only while nothing else holds the node), and the tensor may be gone while its
# hooks stay (a hook registered inside a model's forward on a local activation). So `Tensor.register_hook` is
# wrapped, once per process (`install`, from `framejit.compile`, before any trace, as guards of traces that call
# it pin the class entry): for a non-leaf tensor it notes the tensor's hook dict (the one the node's pre-hook
# calls, weakly) under the node's sequence number and type. The walk of `skip_hooks_above` (joint_unreached.py)
# then wraps each hook of the dicts noted for the nodes it passes in the one-shot wrapper of NOTE [Hooks of
# inputs no backward reaches]: the None call is skipped, a real gradient (the activation also used by the loss)
# runs the hook as in eager; multi-grad hooks over such tensors go through their group (NOTE [Multi-grad hooks
# over inputs no backward reaches]). The wrapper is a descriptor: `torch.Tensor.register_hook` read from the
# class is still torch's function (handle_torch_function, a subclass's __torch_function__ and capture see it);
# under torch.compile's tracing it is torch's method. Only nodes of one output: a node of several (`a, b =
# t.split(n)`) runs in eager too where another of its outputs gets a gradient, and calls a's hooks with None
# then; a tensor hook cannot see the node's other gradients, so such hooks are left as they are (called with
# None also where eager does not run the node). Not covered, because the engine runs the nodes: hooks
# registered on the nodes themselves (`u.grad_fn.register_prehook`, and module full backward hooks of eager
# modules there, which torch registers on nodes) are called with None; saved tensors of those nodes are unpacked
# (a non-reentrant checkpoint of an eager block there recomputes its forward) and freed without retain_graph (a
# later backward reaching them raises "Trying to backward through the graph a second time"); hooks registered
# before `install` or through a reference to torch's function taken before it; tensor subclasses with their own
# register_hook. Sequence numbers count per thread: a node of another thread with the same number and type may
# have its hooks wrapped, which skips only a None they would get next. Cost: a dict entry per non-leaf tensor's
# first hook (dropped with its dict), and per walked node a dict lookup.
_ORIGINAL = torch.Tensor.register_hook
_BY_NODE: dict[int, list] = {}  # node's sequence number -> [(weak reference to a hook dict, node's type), ...]
_INSTALLED = [False]


class _Noting:
    """torch.Tensor.register_hook's class entry once installed."""

    def __get__(self, tensor, owner=None):
        if tensor is None or torch.compiler.is_compiling():
            return _ORIGINAL.__get__(tensor, owner)
        return types.MethodType(_register_hook, tensor)


def _register_hook(self, hook):
    handle = _ORIGINAL(self, hook)
    try:
        node, hooks = self.grad_fn, self._backward_hooks
        if node is not None and hooks is not None:
            _note(node, hooks)
    except Exception:  # never the user's failure: the hook is registered; only its None call is not skipped
        pass
    return handle


def _note(node, hooks) -> None:
    key, kind = node._sequence_nr(), type(node)
    entries = _BY_NODE.setdefault(key, [])
    if any(ref() is hooks for ref, _ in entries):
        return
    entries.append((weakref.ref(hooks, lambda ref, key=key: _forget(key, ref)), kind))


def _forget(key: int, ref) -> None:
    entries = _BY_NODE.get(key)
    if entries is None:
        return
    entries[:] = [e for e in entries if e[0] is not ref]
    if not entries:
        _BY_NODE.pop(key, None)


def hook_dicts(node) -> list:
    """The live hook dicts noted for `node` (NOTE [Hooks of activations a None reaches])."""
    entries = _BY_NODE.get(node._sequence_nr())
    if not entries or len(node._input_metadata) != 1:  # several outputs: eager may run it (NOTE above)
        return []
    kind = type(node)
    return [hooks for ref, k in entries if k is kind and (hooks := ref()) is not None]


# NOTE [Module backward hooks a None reaches]
# A module called eagerly between compiled blocks (`h = ct(x); u = body2(h); outs = ch(u, h)`) with full backward
# hooks or pre-hooks: torch's BackwardHook puts identity Functions around its inputs and outputs and registers
# its hooks on their nodes (`grad_fn.register_hook`, torch/utils/hooks.py). Where no gradient reaches the
# module in eager, those nodes never run; here the engine runs them with undefined gradients (NOTE [Hooks of
# activations a None reaches]), and the user's hooks were called with None grad_output (and a zero
# grad_input). So BackwardHook._apply_on_tensors is wrapped at `install` to register those hooks through a
# wrapper that skips a call whose incoming gradients are all None on a node the walk of `skip_hooks_above`
# marked in the current graph task (`mark_module_node`), and hands None on (not the zeros the identity Function
# materialised, which the skipped hook replaced by None); a call with some gradient runs as in eager. Not
# covered: a module whose hooks were set up before `install`; a call where the same node also gets a custom
# Function's None in that backward (eager calls the hooks then) is skipped.
_MODULE_NODE = "BackwardHookFunctionBackward"
_MARK = "_framejit_none_task"  # joint_unreached._NONE_TASK


def mark_module_node(node) -> None:
    """NOTE [Module backward hooks a None reaches]: `node`, walked after framejit handed a None."""
    if type(node).__name__ == _MODULE_NODE:
        node.__dict__[_MARK] = torch._C._current_graph_task_id()


class _Registering:
    """A BackwardHook node seen by torch's hook setup: its `register_hook` wraps the hook."""

    def __init__(self, node):
        self._node = node

    def register_hook(self, hook):
        node_ref = weakref.ref(self._node)

        def hook_unless_unreached(grad_inputs, grad_outputs):
            node = node_ref()
            if node is not None and node.__dict__.get(_MARK) == torch._C._current_graph_task_id() and \
                    all(g is None for g in grad_outputs):
                return (None,) * len(grad_inputs)  # not the zeros BackwardHookFunction materialised
            return hook(grad_inputs, grad_outputs)
        return self._node.register_hook(hook_unless_unreached)

    def __getattr__(self, name):
        return getattr(self._node, name)


def _module_hooks_wrapper(original):
    def _apply_on_tensors(self, fn, args):
        return original(self, lambda node: fn(_Registering(node)), args)
    _apply_on_tensors.__wrapped__ = original
    return _apply_on_tensors


def install() -> None:
    """NOTE [Hooks of activations a None reaches]: from now on; a no-op once done."""
    if not _INSTALLED[0]:
        _INSTALLED[0] = True
        if torch.Tensor.__dict__.get("register_hook") is _ORIGINAL:
            torch.Tensor.register_hook = _Noting()
        from torch.utils.hooks import BackwardHook  # NOTE [Module backward hooks a None reaches]
        original = BackwardHook.__dict__.get("_apply_on_tensors")
        if original is not None and not hasattr(original, "__wrapped__"):
            BackwardHook._apply_on_tensors = _module_hooks_wrapper(original)
