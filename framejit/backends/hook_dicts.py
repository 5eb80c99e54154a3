"""The tensor-hook dicts of non-leaf tensors, found from their autograd node (NOTE [Hooks of activations a None
reaches]).

`install()` (from `framejit.compile`) makes `Tensor.register_hook` note each non-leaf tensor's hook dict under
its node; `hook_dicts(node)` gives the live dicts noted for `node`.
"""
from __future__ import annotations

import functools
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
# None also where eager does not run the node). Hooks registered on the nodes themselves
# (`u.grad_fn.register_prehook`): NOTE [Node hooks a None reaches] (node_hooks.py); hooks registered through the
# class (`torch.Tensor.register_hook(u, fn)`, a functools.partial of it, `super().register_hook` of a subclass,
# a reference to torch's function taken before `install`; the class entry must stay torch's function):
# NOTE [Hook dicts made through the class] below (review revN MED-1). Not covered, because the engine runs the
# nodes: saved tensors of C++ nodes are unpacked (a non-reentrant checkpoint of an eager block there
# recomputes its forward) and freed without retain_graph (a later backward reaching them raises "Trying to
# backward through the graph a second time"); hooks registered before `install` (the first framejit.compile;
# `import framejit` does not import torch), which still get None. The wrapper reads
# the tensor's node and hook dict with torch functions disabled (a subclass's __torch_function__ or a mode sees
# only the register_hook call, as before) and keeps torch's name and docstring; a RuntimeError from torch's
# register_hook shows one more frame (hook_dicts.py). Sequence numbers count per thread: a node of another
# thread with the same number and type may have its hooks wrapped, which skips only a None they would get next
# in that graph task. Cost: a dict entry per non-leaf tensor's
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


@functools.wraps(_ORIGINAL)
def _register_hook(self, hook):
    handle = _ORIGINAL(self, hook)
    try:
        with torch._C.DisableTorchFunction():  # not seen by a subclass's __torch_function__ or a mode
            node, hooks = self.grad_fn, self._backward_hooks
        if node is not None and hooks is not None:
            _note(node, hooks)
    except Exception:  # never the user's failure: the hook is registered; only its None call is not skipped
        pass
    return handle


# NOTE [Hook dicts made through the class]
# `torch.Tensor.register_hook(u, fn)` (the class spelling, a functools.partial of it, a subclass's
# `super().register_hook`, a reference taken before `install`) runs torch's function, not the wrapper of NOTE
# [Hooks of activations a None reaches]: the hook dict was never noted and the hook was called with None (review
# revN MED-1). The class entry must stay torch's function, so `install` also puts a property `_backward_hooks` on
# torch.Tensor over TensorBase's slot: torch's register_hook stores a fresh dict there before it registers it
# with the node (`self._backward_hooks = OrderedDict()`), and the setter notes it under the tensor's node. Later
# hooks go into that dict, so every way of registering is seen. The getter and deleter are the slot's own (C)
# methods: a read costs a property call, no Python frame (torch reads it per register_hook, deepcopy and pickling
# of tensors); a set, a Python frame.
_SLOT = torch._C.TensorBase.__dict__.get("_backward_hooks")


def _set_hooks(self, hooks):
    _SLOT.__set__(self, hooks)
    if hooks is not None:
        try:
            with torch._C.DisableTorchFunction():
                node = self.grad_fn
            if node is not None:
                _note(node, hooks)
        except Exception:  # never the user's failure: only its None call is not skipped
            pass


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


# NOTE [Python Function nodes a None reaches]
# A node of a Python autograd.Function between compiled blocks (a user Function with the default
# materialize_grads, a torch.library custom op's autograd, a reentrant checkpoint, torch's BackwardHookFunction
# around a module with full backward hooks) that the engine runs with undefined gradients (NOTE [Hooks of
# activations a None reaches]) materialised them as zeros and ran the user's backward on them: the eager layers
# above got zero `.grad` where eager's backward never reaches them (None), and AdamW's weight decay moved them
# (review revN HIGH-1); a reentrant checkpoint recomputed its forward and accumulated zeros in its inner backward.
# So the walk of `skip_hooks_above` gives each such node it passes (marked with the graph task, `arm_node`) a
# one-shot pre-hook: where all its incoming gradients are None in that graph task, the node's `apply` (which
# PyNode looks up on the node itself) is shadowed, for that one call, by one returning None for every input:
# the user's backward does not run, and the nodes above get undefined gradients, as eager's never run.
# NOTE [Module backward hooks a None reaches]: torch's BackwardHook registers the module's hooks as post-hooks
# of its BackwardHookFunctionBackward nodes, which the engine calls after `apply`: with None grad_output, and
# torch's "Full backward hook is firing" warning where no input requires grad. `install` wraps
# BackwardHook._apply_on_tensors only to note the BackwardHook on the nodes it sets up (at forward time; under
# torch.compile's tracing torch's own runs), and for such a skipped call the pre-hook empties the BackwardHook's
# hook lists and state, which a post-hook registered after torch's puts back: torch's hook, registered as it
# is, runs unwrapped (warnings and tracebacks of every module hook are torch's; review revN MED-2) and does
# nothing visible. A node that also gets a None of the user's in that backward (eager runs it, on zeros) is not
# skipped (NOTE [Nones the user's backward sends], user_none.py). Not covered: BackwardHooks set up before
# `install`.
_MARK = "_framejit_none_task"  # joint_unreached._NONE_TASK
_ARMED = "_framejit_armed"
_BW_HOOK = "_framejit_bw_hook"
_QUIET = ("user_hooks", "user_pre_hooks", "input_tensors_index", "grad_outputs")


def arm_node(node) -> None:
    """NOTE [Python Function nodes a None reaches]: `node`, walked after framejit handed a None."""
    if not hasattr(node, "_forward_cls"):  # a C++ node
        return
    node.__dict__[_MARK] = torch._C._current_graph_task_id()
    if node.__dict__.get(_ARMED):
        return
    node.__dict__[_ARMED] = True
    node_ref = weakref.ref(node)
    from .user_none import reached

    def pre(grad_outputs):
        handle.remove()
        node = node_ref()
        if node is None:
            return None
        node.__dict__.pop(_ARMED, None)
        if node.__dict__.get(_MARK) == torch._C._current_graph_task_id() and all(g is None for g in grad_outputs) \
                and not reached(node):  # NOTE [Nones the user's backward sends] (user_none.py): eager runs it
            _skip_once(node)
        return None
    handle = node.register_prehook(pre)


def _skip_once(node) -> None:
    n, task = len(node.needs_input_grad), torch._C._current_graph_task_id()

    def apply(*grads):
        node.__dict__.pop("apply", None)
        if task != torch._C._current_graph_task_id():  # left by a backward that raised before the node ran
            return type(node).apply(node, *grads)
        return (None,) * n
    node.__dict__["apply"] = apply
    bw = node.__dict__.get(_BW_HOOK)
    if bw is None:
        return
    saved = [getattr(bw, name) for name in _QUIET]
    bw.user_hooks, bw.user_pre_hooks, bw.grad_outputs = [], [], None
    if bw.input_tensors_index is None:  # not torch's warning for a call eager does not make
        bw.input_tensors_index = ()

    def restore(grad_inputs, grad_outputs):
        handle.remove()
        for name, value in zip(_QUIET, saved):
            setattr(bw, name, value)
        return None
    handle = node.register_hook(restore)


def _module_hooks_wrapper(original):
    def _apply_on_tensors(self, fn, args):
        if torch.compiler.is_compiling():
            return original(self, fn, args)

        def noting(node):
            node.__dict__[_BW_HOOK] = self
            return fn(node)
        return original(self, noting, args)
    _apply_on_tensors.__wrapped__ = original
    return _apply_on_tensors


def install() -> None:
    """NOTE [Hooks of activations a None reaches]: from now on; a no-op once done."""
    if not _INSTALLED[0]:
        _INSTALLED[0] = True
        if torch.Tensor.__dict__.get("register_hook") is _ORIGINAL:
            torch.Tensor.register_hook = _Noting()
        from .user_none import install as noting_nones
        noting_nones()  # NOTE [Nones the user's backward sends]
        from .node_hooks import install as noting_node_hooks
        noting_node_hooks()  # NOTE [Node hooks a None reaches]
        if _SLOT is not None and "_backward_hooks" not in torch.Tensor.__dict__:  # NOTE [Hook dicts made ...]
            torch.Tensor._backward_hooks = property(_SLOT.__get__, _set_hooks, _SLOT.__delete__, doc=_SLOT.__doc__)
        from torch.utils.hooks import BackwardHook  # NOTE [Module backward hooks a None reaches]
        original = BackwardHook.__dict__.get("_apply_on_tensors")
        if original is not None and not hasattr(original, "__wrapped__"):
            BackwardHook._apply_on_tensors = _module_hooks_wrapper(original)
