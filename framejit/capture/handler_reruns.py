"""Graphs that fail at run time inside the traced code's own handlers: their eager rerun made exact.

NOTE [Failing graphs inside handlers]: the trace models the frame's try/except, try/finally and with-blocks for
the exceptions it sees while tracing; an exception the graph raises at run time (an index out of range, a
singular matrix) reaches the user's handler only through NOTE [Graph failures rerun eagerly], which reruns the
frame as plain Python. That rerun was refused for a graph that draws random numbers (dropout), writes an input
(an in-place update, batch_norm's running statistics) or enters inference mode (requests.rerun_state): its
exception left the transformed code past the handler (`try: buf.add_(1); return x[idx] except IndexError:`,
eager "caught", framejit IndexError), a suppressing with-block did not suppress, and a finally block or a
with-block's `__exit__` did not run (review revH H6).

When some op of the graph was recorded inside a handler's block in any frame of the trace (a try of either
kind, or a with-block other than torch's own state blocks, whose state a failing graph puts back anyway:
`under_handler`), such a graph's rerun is made exact instead (`restore_plan`, `RestoredOnError`): before each
call the wrapper saves the default random generators' states of the devices the graph draws on and clones the
inputs it writes (their values, sizes, strides, storage offsets and version counters); when the call raises, it puts all of them back before
the exception leaves, and the hook reruns the frame eagerly as for any other graph. Nothing is saved for a
graph with no op under a handler (its exception propagates to a caller outside the trace, as in eager), so
training graphs outside try blocks pay nothing, and no graph is split.

What cannot be put back is a graph break where it would meet an op under a handler (whichever of the two is
recorded second breaks before it; `_check`): entering inference mode (an aborted inference-mode block cannot
be exited from outside the graph), an in-place write to a view that autograd tracks (its base's history
changes too: NOTE [Rewound histories]), an in-place change of an input's storage (`resize_`, `set_`, `detach_`:
graph_errors.METADATA_WRITES; an in-place view op, `unsqueeze_`, `t_`, has its sizes put back with the values:
review revS HIGH-1, the rerun applied it twice), a random op given its own generator or on a device other than CPU and CUDA. The break runs the
instruction as plain Python (NOTE [Breaks inside try blocks]), where a real handler catches the real
exception. A previous attempt (e970f2d, reverted) split the graph at every such pair, which made fullgraph
captures of torch.func transforms (their own try/finally blocks) Unsupported.

NOTE [Rewound histories]: an input that autograd tracks as a non-leaf (a StaticCache's keys after the first
step, `h = w * 2`), or one the graph's write makes tracked (a zero cache written with projected keys), gets the
graph's write in its autograd history, which putting its values back does not undo: the rerun then wrote on
top of it (hhuntHF6 MED-1: that write broke every decode step of a StaticCache loop under grad mode, 11 graphs
where stock torch.compile has 3). A failed in-place op changes neither the history nor the version counter
(autograd rebases the history after the kernel returns), so a call whose history is as before the call needs
only its values back; when the history did change (a later op failed), `_rewind` detaches the tensor and copies
its saved values back through a clone taken before the call with autograd on, so gradients reach exactly the
history before the call (the failed write's node is cut off: nothing reached only through it gets a
gradient) and the rerun writes on that, as eager writes once. What stays different is the chain's shape:
`grad_fn.next_functions` shows a CopyBackwards and a CloneBackward before the earlier history. A view (its
base changes too) or a tensor that retains its grad cannot be rewound: their writes break as before, and the
entry whose graph may rewind a written input guards it to be no view and not to retain its grad
(`rewind_guards`; revAO: an offset-0 `buf[0]` passed the other guards, `retain_grad()` may come between calls,
and values-only restore kept a failed `add_` in the history, counted twice by the gradient; a tracked view
reran the whole frame eagerly on each call), so such a call retraces. The entry check on tracked views and
the values-only restore in `_rewindable` stay as a last resort (logged on `eager_fallback`).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch._C._autograd import _unsafe_set_version_counter

from .. import logs
from ..grad_mode import grad_mode
from .breaks import BreakKind, Unsupported

_RESTORABLE_DEVICES = ("cpu", "cuda")


def _under_handler(tx) -> bool:
    """The instruction `tx` is at lies in a try block, or in a with-block whose exit is not a torch state
    block (context.ExitValue: grad mode, autocast, inference mode)."""
    from .context import ExitValue
    from .normalize import is_user_handler
    inst = tx.current
    if inst is None:
        return False
    insts = tx.program.insts
    handler, depth = inst.handler, inst.handler_depth
    for _ in range(256):  # outward through the handlers around each block's own handler
        if handler is None:
            return False
        if is_user_handler(insts, handler):
            if insts[handler + 1].name != "WITH_EXCEPT_START":
                return True
            exit_fn = tx.stack[depth - 1] if depth is not None and 0 < depth <= len(tx.stack) else None
            if not isinstance(exit_fn, ExitValue):
                return True
        handler, depth = insts[handler].handler, insts[handler].handler_depth
    return True


def under_handler(out) -> bool:
    """Some frame of the trace is at an instruction inside one of its own handlers' blocks."""
    return any(_under_handler(tx) for tx in out.tx_stack)


def _check(out, under: bool, unrestorable: str | None) -> None:
    """One op recorded: `under` a handler, and/or making the graph's rerun impossible to restore (why)."""
    flags = out.__dict__
    if unrestorable is not None and (under or flags.get("op_in_handler")) or \
            under and flags.get("unrestorable"):
        what = unrestorable or flags["unrestorable"]
        raise Unsupported(BreakKind.SIDE_EFFECT, f"{what} in a graph with an op inside a try or with-block: the "
                          "graph could not rerun exactly for the handler (NOTE [Failing graphs inside handlers])")
    if under:
        out.op_in_handler = True
    if unrestorable is not None:
        out.unrestorable = unrestorable


def _devices(values: Any) -> set:
    from torch.utils._pytree import tree_leaves
    from .values import TensorValue
    found = set()
    for leaf in tree_leaves(values, is_leaf=lambda v: isinstance(v, TensorValue)):
        fake = leaf.fake if isinstance(leaf, TensorValue) else leaf
        if isinstance(fake, torch.Tensor):
            found.add(fake.device)
    return found


def _draws(target: Any, args: tuple, kwargs: dict) -> bool:
    """requests.draws_random, reading as constants only a dropout's `training` argument (reading the others,
    sizes among them, would specialise symbolic ones)."""
    from .requests import draws_random
    from .speculated_checks import _plain
    if not draws_random(target):
        return False
    # only a dropout reads its third positional argument (`training`); `torch.randint(0, 10, (n,))` and
    # `torch.normal(0.0, 1.0, (n,))` hold their size there, and reading it as a constant pinned a symbolic size
    if "dropout" not in (target if isinstance(target, str) else getattr(target, "__name__", "")).lower():
        return True
    training = {k: _plain(v) for k, v in kwargs.items() if k in ("training", "train")}
    return draws_random(target, tuple(_plain(a) if i == 2 else None for i, a in enumerate(args[:3])), training)


def note_op(out, target: Any, args: tuple, kwargs: dict, result: Any) -> None:
    """Before `target`'s node is recorded (OutputGraph._record_node)."""
    unrestorable = None
    if _draws(target, args, kwargs):
        generator = kwargs.get("generator")
        out.random_draws = out.__dict__.get("random_draws", 0) + 1  # NOTE [Random draws of run-ahead generators]
        if generator is not None and not (getattr(generator, "is_constant", lambda: False)() and
                                          generator.as_constant() is None):
            unrestorable = f"{getattr(target, '__name__', target)} draws from a generator of its own"
        devices = _devices((args, kwargs, result))
        if any(d.type not in _RESTORABLE_DEVICES for d in devices):
            unrestorable = unrestorable or f"{getattr(target, '__name__', target)} draws on {sorted(map(str, devices))}"
        out.__dict__.setdefault("rng_devices", set()).update(str(torch.device(d.type, d.index or 0)) for d in devices)
    _check(out, under_handler(out), unrestorable)


def note_input_write(out, entry: Any, target: Any) -> None:
    """An op wrote the graph input `entry` (OutputGraph._check_input_mutation)."""
    fake = entry.value.fake
    retains = isinstance(entry.tensor, torch.Tensor) and entry.tensor.retains_grad  # guarded: `rewind_guards`
    if fake.requires_grad and not fake.is_leaf and (fake._is_view() or retains) or fake.layout is not torch.strided:
        _check(out, under_handler(out), f"in-place {getattr(target, '__name__', target)} writes "  # NOTE [Rewound
               f"{entry.source.describe()}, a view or a sparse tensor that autograd tracks, or one retaining its grad")
    from .graph_errors import METADATA_WRITES
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if name in METADATA_WRITES:  # a snapshot cannot put a storage back: the rerun would apply it twice
        _check(out, under_handler(out), f"in-place {name} changes the storage of {entry.source.describe()}")
    elif _strided_view(out):  # NOTE: the write may land outside the input's region (review revA2 HIGH-3)
        _check(out, under_handler(out), f"in-place {name} writes {entry.source.describe()} in a graph with "
               "as_strided views, which may reach outside the region its snapshot covers")


def rewind_guards(output) -> None:
    """NOTE [Rewound histories]: a written input that `_rewind` may cut a failed write off (one autograd tracks
    after the trace, traced as no view) is guarded to be no view and not to retain its grad, as traced: a call
    with a view (`buf[0]` passes the other guards) or after `retain_grad()` retraces, and the write breaks."""
    plan = restore_plan(output)
    for i in plan[0] if plan is not None else ():
        entry = output.inputs[i]
        fake = getattr(entry.value, "fake", None)
        if not isinstance(fake, torch.Tensor) or not fake.requires_grad or fake._is_view() or entry.source is None:
            continue
        e = entry.source.expr(output.names)
        output.add_guard("TENSOR_HISTORY", f"not {e}._is_view() and not {e}.retains_grad", entry.source,
                         expected="no view, not retaining its grad", actual=f"({e}._is_view(), {e}.retains_grad)")


def _strided_view(out) -> bool:
    """The graph made a view with `as_strided`: a write through it may land anywhere in its base's storage,
    outside the region that RestoredOnError clones, so a rerun from that snapshot would make it twice."""
    return any(node.op in ("call_function", "call_method") and
               (node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")) == "as_strided"
               for node in out.graph.nodes)


def note_effect(out, target: Any) -> None:
    """A node kept for its effect (OutputGraph.record_effect): entering inference mode cannot be put back."""
    if target is torch.autograd.grad_mode._enter_inference_mode:
        _check(out, under_handler(out), "entering inference mode")


def restore_plan(output) -> tuple | None:
    """((written graph input positions), (devices drawn on)) when the graph has an op under a handler, or
    effects that a failing call would not make as eager does (NOTE [Effects between failing ops] in
    graph_errors.py), and its rerun needs them put back; None otherwise."""
    if not output.__dict__.get("op_in_handler"):
        from .graph_errors import effects_need_rerun, metadata_kept
        if output.__dict__.get("unrestorable") or not effects_need_rerun(output) or not metadata_kept(output):
            return None
    from .input_versions import input_writes
    written = {i for i, _ in input_writes(output)}
    positions = {id(entry): i for i, entry in enumerate(output.inputs)}
    written.update(positions[id(entry)] for entry in output.mutated_entries if id(entry) in positions)
    devices = set(output.__dict__.get("rng_devices", ()))
    from .requests import draws_random
    for node in output.graph.nodes:  # also random nodes recorded other than by _record_node, as rerun_state sees
        if node.op in ("call_function", "call_method") and draws_random(node.target, node.args, node.kwargs):
            found = _devices((node.meta.get("val"), [n.meta.get("val") for n in node.all_input_nodes]))
            if not found or any(d.type not in _RESTORABLE_DEVICES for d in found):
                return None  # no generator known to put back: no exact rerun (as before)
            devices.update(str(torch.device(d.type, d.index or 0)) for d in found)
    if not written and not devices:
        return None
    # NOTE [Bounded snapshots]: only a handler's rerun snapshots whatever the size
    limit = None if output.__dict__.get("op_in_handler") else SNAPSHOT_LIMIT
    return tuple(sorted(written)), tuple(sorted(devices)), limit


def snapshot_bounded(output) -> bool:
    """The graph's failing calls rerun from a snapshot that a call skips above SNAPSHOT_LIMIT bytes (NOTE [Bounded
    snapshots]): such a call raises as it is and makes the effects before the graph's ops (graph_errors.py)."""
    plan = restore_plan(output)
    return plan is not None and plan[2] is not None


def _generator(device: str) -> torch.Generator:
    d = torch.device(device)
    return torch.default_generator if d.type == "cpu" else torch.cuda.default_generators[d.index or 0]


# NOTE [Bounded snapshots]: a snapshot taken for NOTE [Effects between failing ops] (graph_errors.py) copies the
# written inputs on every call, to serve the rare call that fails: a KV cache or an optimizer's moments cost a
# full copy per call (review revS HIGH-2: 0.03 -> 7.9 ms per call for a 17 MB cache). So such a snapshot is
# bounded: a call whose written inputs hold more than SNAPSHOT_LIMIT bytes runs without one, and when it raises,
# the exception is marked `framejit_unrestored`: the hook does not rerun it (RerunState.raised_in_graph; the
# writes stay as eager made them up to the failing op), and makes the effects before the graph's first op
# (NOTE [Effects before a failing graph]), as before NOTE [Effects between failing ops]: the effects between
# failing ops are the known gap there, logged on `eager_fallback` once per graph. A snapshot for a handler's
# rerun (NOTE [Failing graphs inside handlers]) has no bound: without it the handler would not run at all.
SNAPSHOT_LIMIT = 4 << 20


class RestoredOnError:
    """`compiled`, after whose failing call the written inputs and the random generators are as before it; with a
    `limit`, only for calls whose written inputs hold at most `limit` bytes (NOTE [Bounded snapshots])."""

    __slots__ = ("compiled", "written", "devices", "limit", "logged")

    def __init__(self, compiled: Callable, written: tuple, devices: tuple, limit: int | None = None) -> None:
        self.compiled = compiled
        self.written = written
        self.devices = devices
        self.limit = limit
        self.logged = False

    def __call__(self, *args: Any) -> Any:
        if self.limit is not None and sum(args[i].nbytes for i in self.written) > self.limit:
            return self._unrestored(args)
        written = [args[i] for i in self.written]
        if any(t.requires_grad and t._is_view() for t in written):  # NOTE [Rewound histories]
            from .entry_checks import ENTRY_CHECK
            raise RuntimeError(ENTRY_CHECK + "a written input that autograd tracks is a view")
        states = [(g, g.get_state()) for g in map(_generator, self.devices)]
        saved = list(map(_saved, written))
        try:
            return self.compiled(*args)
        except Exception:
            _restore(states, saved)
            raise

    def _unrestored(self, args: tuple) -> Any:
        """The call without a snapshot (NOTE [Bounded snapshots])."""
        if not self.logged:
            self.logged = True
            logs.log("eager_fallback", "the inputs a graph writes hold more than %d bytes: a call that raises in it "
                     "is not rerun, and makes only the effects before the graph's first op", self.limit)
        try:
            return self.compiled(*args)
        except Exception as e:
            _mark_unrestored(e)
            raise


def _mark_unrestored(e: Exception) -> None:
    """The hook does not rerun the call that raised `e` (RerunState.raised_in_graph)."""
    try:
        e.framejit_unrestored = True
    except AttributeError:  # an exception without attributes reruns as before (a known gap)
        pass


def _saved(tensor: torch.Tensor) -> tuple:
    """(tensor, its values, version, layout, requires_grad, grad_fn) before a call; the values of a tensor with a
    history are cloned with autograd on, so that `_rewind` can link the tensor back to it."""
    if tensor.is_inference():
        with grad_mode(False):
            return tensor, tensor.clone(), None, _layout(tensor), False, None
    history = tensor.grad_fn
    with grad_mode(history is not None):
        copy = tensor.clone()
    return tensor, copy, tensor._version, _layout(tensor), tensor.requires_grad, history


def _history_changed(entry: tuple) -> bool:
    tensor, _, version, _, requires_grad, history = entry
    return version is not None and (tensor.requires_grad != requires_grad or tensor.grad_fn is not history)


def _rewindable(entry: tuple) -> bool:
    """NOTE [Rewound histories]: `_rewind` can put the history back: not a view, not retaining its grad, and
    before the call either a non-leaf or a leaf without grad."""
    tensor, requires_grad, history = entry[0], entry[4], entry[5]
    if not tensor._is_view() and not tensor.retains_grad and (history is not None or not requires_grad):
        return True
    logs.log("eager_fallback", "a graph that raised wrote into the autograd history of a view or of a tensor that "
             "retains its grad: its values are put back for the rerun, the failed write stays in its history")
    return False


def _rewind(tensor: torch.Tensor, copy: torch.Tensor, layout: tuple, history: Any) -> None:
    """NOTE [Rewound histories]: cut the failed call's writes off the tensor's history, values and layout back."""
    tensor.detach_()
    with grad_mode(False):
        if _layout(tensor) != layout:
            tensor.as_strided_(*layout)
    with grad_mode(history is not None):  # `copy` carries the history before the call (a CloneBackward)
        tensor.copy_(copy)


def _layout(tensor: torch.Tensor) -> tuple:
    return tuple(tensor.size()), tensor.stride(), tensor.storage_offset()


def _put_back(tensor: torch.Tensor, copy: torch.Tensor, layout: tuple) -> None:
    """Sizes, strides and offset first (an in-place view op of the graph: `unsqueeze_`, `t_`), then the values."""
    if _layout(tensor) != layout:
        tensor.as_strided_(*layout)
    tensor.copy_(copy)


def _restore(states: list, saved: list) -> None:
    for generator, state in states:
        generator.set_state(state)
    for entry in saved:
        tensor, copy, version, layout, _, history = entry
        if tensor.is_inference():
            with torch.inference_mode():
                _put_back(tensor, copy, layout)
            continue
        if _history_changed(entry) and _rewindable(entry):
            _rewind(tensor, copy, layout, history)
        else:
            with grad_mode(False):
                _put_back(tensor, copy, layout)
        _unsafe_set_version_counter((tensor,), [version])


def restoring(compiled: Callable, plan: tuple | None) -> Callable:
    """`compiled`, wrapped to put back what its failing call changed when `plan` (restore_plan) says what."""
    return compiled if not plan else RestoredOnError(compiled, *plan)
