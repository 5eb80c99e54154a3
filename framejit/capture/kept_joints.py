"""A training graph that ends at a graph break keeps the backend's joint where the code after it cannot tell.

NOTE [Joints kept across a plain break]: NOTE [Autograd state observed after a break] (tensor_hooks.py) runs a
graph as its own code when it ends at a break and passes on a tensor that requires grad: the joint's results
differ from eager's in what only autograd shows. Measured (/tmp/hfsdp/adv.py, onnxrt, the joint forced on):
`y.grad_fn` (its name, `next_functions`, node hooks, `print(y)`'s `grad_fn=<...>`, anomaly mode's message),
`y._version` after a write inside the graph, `y.register_hook` / `retain_grad` / `autograd.grad(.., y)` where
another result was computed from y inside the graph (they miss that part of y's gradient), the order of hooks
on two results, and a backward through the joint with `retain_graph=True` or `create_graph=True` (its donated
buffers raise). A hook on a result no other result was computed from, `is_leaf`, `requires_grad`, a backward,
the values and the gradients are the same. Every one of those reads needs the code after the break to reach
the result, so the graph keeps its joint where that code provably does not, and this is decided where it is
known, call by call:

- at the break (`speculable`): the graph mutates no input, draws no numbers from Python's `random` nor from a
  generator of its own (NOTE [Kept joints that draw random numbers]), replays no side effect, and
  passes its results on as plain locals or stack slots (no container, object or cell holds one), and the
  instruction at the break cannot reach them: a builtin `print` of constants, or a branch on a tensor's truth
  (`if y.sum() > 0:`), outside any try or with-block. Then its compiled callable is a `Speculated`: the joint,
  with the graph's own code kept beside it.
- at the resume function (`Settling`, called instead of its FrameHook): the entry that serves the call is looked
  up first (compiled now on a miss: a trace reads no autograd state of its arguments). Where that entry
  `passes_arguments_only_to_graphs` (set by convert._compile_entry: a frame that finishes without a break,
  replays no side effect and returns none of its tensor arguments that require grad as they are; every read
  of autograd state, `grad_fn`, `_version`, `is_leaf`, `retain_grad`, `backward`, `autograd.grad`, is a graph
  break, and a hook registered is a side effect), it runs with the joint's results: nothing after the break
  sees more than their values and the gradients they pass back, which are eager's. Otherwise (a break in the
  resume function whose graph keeps no joint, an eager entry, a state the hook would handle first) the graph
  runs again as its own code on the same inputs (it changed nothing, and neither did the print or the truth
  test) and the resume function gets those results instead, each in the slot of the joint's: the joint's
  results are then unreachable and its backward never runs. An entry that reruns eagerly after its graph
  failed (NOTE [Graph failures rerun eagerly]) gets them too before the rerun. The first such call counts the
  graph in `graphs_own_code`.
- After `_MAX_RECOMPUTES` such recomputations the graph stops speculating and runs as its own code (logged under
  `eager_fallback`), as before this NOTE.

A graph whose break instruction gets its results (FSDP2's forward hooks, a callee), or that writes an input still
runs as its own code. Such an entry is not persisted (the choice lives in this process).

NOTE [Joints kept across several breaks]: a forward split by several plain breaks keeps every graph's joint. The
resume function of the first break is itself a frame that breaks; its entry counts as passing its arguments only
to graphs (`break_entry_settles`) where its own graph before its break is a Speculated (so the code after that
break is settled in turn), it writes nothing, replays no side effect and puts none of its arguments that
require grad in a container, object or cell live at its break (a plain local or stack slot is swapped like a
result). Settling runs such an entry with the joint's results while it pushes what it kept (the graph, its
inputs and results) on a per-thread chain; a later Settling that must swap (the code after the last break may
observe autograd state) recomputes every graph of the chain as its own code first, outermost first, each on its
inputs with the earlier graphs' own results in place of their joint's, once per chain, and swaps the resume
function's arguments through all of them: `y1.grad_fn`, `y2.grad_fn.next_functions` down to y1's node, a
hook or `retain_grad` on y1 after the second break all see eager's nodes (test_kept_joints_chain.py). The
entry is clean only while its graph still speculates (fewer than `_MAX_RECOMPUTES`), so the graph's own code
never runs on a joint's results unnoticed.

NOTE [Kept joints that draw random numbers]: a graph with dropout (or another random op on the default
generators of CPU or CUDA) keeps its joint too. The joint draws eager's numbers in eager's order (NOTE [Dropout
drawn as eager draws it]; AOT autograd saves the mask for the backward, no draw is replayed there), so where
the joint's results are kept the values and the generators' states after the call are eager's. A Speculated
that draws saves the states of the generators it draws from before each joint call (`get_state`, a few KB on
CPU), and a recomputation as its own code puts them back first: the own code draws eager's numbers again and
leaves the generators as eager leaves them (the break's print or truth test draws nothing). In a chain (NOTE
[Joints kept across several breaks]) each graph is recomputed from its own saved states, outermost first. A
draw from a generator of its own or on another device, or from Python's `random` (NOTE [Draws from the random
module]), still makes the graph run as its own code.

NOTE [Draws between the joint and its recomputation]: code that runs between the joint call and the
recomputation may draw from the same generator (a print to a stream whose write draws, another thread): putting
the saved state back and leaving the generator where the own code's draws left it erased those draws, so the
next `torch.rand` after a step repeated numbers eager had already used (review revN N9: 0.8036 where eager gives
0.2197). The generators' states at the recomputation are saved first and put back after the own code ran: its
draws repeat the joint's, and the generators stay where the program's draws left them.

NOTE [Clean entries of a warm process]: whether an entry passes its arguments only to graphs is decided by its
trace; a persisted entry carries it (`Persisted.clean`) and a warm process's loaded entry gets it back
(hook._restore_into): without it every call recomputed the graph before the break and the graph ran as its own
code after 4 calls. An entry saved before the flag existed reads False (recompute, as before).
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import torch

from ..grad_mode import grad_mode
from .. import logs
from .break_sites import _CONDITIONAL, _OR_POP, live_tensors
from .values import BuiltinValue, ConstantValue, TensorValue

_MAX_RECOMPUTES = 4
_PENDING = threading.local()  # .value: (Speculated, graph inputs, joint results, grad mode, generator states)
_CHAIN = threading.local()  # .value: [[pending, own results by joint id or None], ...] of the resume functions
# running with kept joint results (NOTE [Joints kept across several breaks]), outermost first
_PLAIN_CONSTANTS = (str, int, float, bool, type(None))


def speculable(output, gen, outputs: list) -> bool:
    """Whether the graph traced up to `gen`'s break may keep its joint (NOTE [Joints kept across a plain break])."""
    from .python_draws import has_draws
    site = gen.site
    if site.tail or site.loop is not None or site.frame_reader or gen.exits or gen.cell_args:
        return False
    if output.mutated_entries or output.side_effects or has_draws(output):
        return False
    devices = _draw_devices(output)
    if devices is None:
        return False
    output.__dict__["speculated_rng"] = devices
    nested = {id(v.node) for v in live_tensors([v for v in gen.values() if not isinstance(v, TensorValue)])}
    if any(id(v.node) in nested for v in outputs):
        return False  # a container, an object or a closure holds a result: it cannot be swapped
    return _plain_instruction(site.inst, gen)


def _draw_devices(output) -> tuple | None:
    """The devices whose default generators the graph draws from (NOTE [Kept joints that draw random numbers]),
    () for none, or None where a draw cannot be replayed (a generator of its own, another device)."""
    from .handler_reruns import _RESTORABLE_DEVICES, _devices
    from .requests import draws_random
    devices: set = set()
    for node in output.graph.nodes:
        if node.op in ("call_function", "call_method") and draws_random(node.target, node.args, node.kwargs):
            if node.kwargs.get("generator") is not None:
                return None
            found = _devices((node.meta.get("val"), [n.meta.get("val") for n in node.all_input_nodes]))
            if not found or any(d.type not in _RESTORABLE_DEVICES for d in found):
                return None
            devices.update(str(torch.device(d.type, d.index or 0)) for d in found)
    return tuple(sorted(devices))


def _plain_instruction(inst, gen) -> bool:
    """The instruction at the break reaches no result of the graph's autograd: a truth test of a tensor, or
    the builtin print of constants."""
    if inst.name in _CONDITIONAL or inst.name in _OR_POP:
        return len(gen.top) == 1 and isinstance(gen.top[0], TensorValue)
    if inst.name != "CALL" or len(gen.top) < 2:
        return False
    from .emit import callee_and_self
    from .values import NULL
    callee, leading = callee_and_self(gen.top[0], gen.top[1], NULL)
    args = gen.top[2:]
    return (isinstance(callee, BuiltinValue) and callee.obj is print and not leading and
            all(isinstance(a, ConstantValue) and type(a.value) in _PLAIN_CONSTANTS for a in args) and
            all(name in ("sep", "end") for name in (gen.tx.kw_names or ())))


class Speculated:
    """The backend's joint of a graph before a plain break, with the graph's own code beside it."""

    __slots__ = ("joint", "own", "where", "recomputes", "generators", "__weakref__")

    def __init__(self, joint: Callable, own: Callable, where: str, devices: tuple = ()) -> None:
        self.joint, self.own, self.where, self.recomputes = joint, own, where, 0
        from .handler_reruns import _generator
        self.generators = tuple(map(_generator, devices))  # NOTE [Kept joints that draw random numbers]

    def __call__(self, *args: Any) -> Any:
        if self.recomputes >= _MAX_RECOMPUTES:
            _PENDING.value = None
            return self.own(*args)
        states = [(g, g.get_state()) for g in self.generators]
        results = self.joint(*args)
        _PENDING.value = (self, args, results, torch._C.is_grad_enabled(), states)
        return results

    def recompute(self, args: tuple, results: Any, grad_enabled: bool, states: list) -> dict[int, Any]:
        """The graph's own results for the joint's, by the joint result's id."""
        self.recomputes += 1
        if self.recomputes == 1:  # counted once per graph, as a graph compiled to run as its own code
            from .requests import STATS
            STATS["graphs_own_code"] += 1
        logs.log("eager_fallback", "%s: the graph before the break ran again as its own code (%d of %d): the code "
                 "after it may observe its results' autograd (NOTE [Joints kept across a plain break])%s", self.where,
                 self.recomputes, _MAX_RECOMPUTES, "; from now on it runs as its own code only"
                 if self.recomputes == _MAX_RECOMPUTES else "")
        now = [(generator, generator.get_state()) for generator, _ in states]
        for generator, state in states:  # the draws of the joint, drawn again as eager drew them
            generator.set_state(state)
        with grad_mode(grad_enabled):
            own = self.own(*args)
        for generator, state in now:  # NOTE [Draws between the joint and its recomputation]
            generator.set_state(state)
        pairs = zip(results, own) if isinstance(results, (tuple, list)) else [(results, own)]
        return {id(joint): mine for joint, mine in pairs if isinstance(joint, torch.Tensor)}


def speculated(output, compiled: Callable, own: Callable, where: str) -> Callable:
    """`compiled` as a Speculated where the break allows it (set by tensor_hooks.mark_results_across_break) and
    the backend made something else than the graph's own code (the eager backend's autograd is eager's: its entry
    persists as before, NOTE [Autograd state observed after a break])."""
    made = compiled
    while getattr(made, "compiled", None) is not None:  # saved_hooks.HookAware
        made = made.compiled
    if not output.__dict__.get("speculated") or made is own or getattr(made, "__self__", None) is own.__self__:
        return compiled
    output.__dict__["process_local"] = "the graph keeps its joint only while the code after its break cannot " \
        "observe its results' autograd"
    return Speculated(compiled, own, where, output.__dict__.get("speculated_rng", ()))


def is_speculated(compiled: Any) -> bool:
    """Whether `compiled` (as wrapped by keep_versions and restoring) is a Speculated."""
    while compiled is not None and not isinstance(compiled, Speculated):
        compiled = getattr(compiled, "compiled", None)
    return compiled is not None


def settling(hook: Any, compiled: Any) -> "Settling":
    while not isinstance(compiled, Speculated):
        compiled = compiled.compiled
    return Settling(hook, compiled)


class Settling:
    """Calls the resume function after a Speculated graph's break (see the NOTE)."""

    __slots__ = ("hook", "speculation")

    def __init__(self, hook: Any, speculation: Speculated) -> None:
        self.hook, self.speculation = hook, speculation

    def __call__(self, *args: Any) -> Any:
        pending = getattr(_PENDING, "value", None)
        _PENDING.value = None
        hook = self.hook
        if pending is None or pending[0] is not self.speculation:
            return hook(*_chain_swapped(args)) if _chain() else hook(*args)
        entry = _serving_entry(hook, args)
        if entry is None or not _clean(entry):
            return hook(*_swapped(pending, args))
        chain = _chain()
        chain.append([pending, None])  # NOTE [Joints kept across several breaks]
        try:
            return entry.fn(*args)
        except Exception as e:
            if (shown := hook._reruns(entry, e, args, {})) is None:
                raise
        finally:
            chain.pop()
        from .op_warnings import rerun_without  # NOTE [Warnings of a graph that raised]
        return rerun_without(shown, hook.eager, _swapped(pending, args), {})  # NOTE [Graph failures rerun eagerly]


def _clean(entry: Any) -> bool:
    """Whether `entry` hands its arguments only to graphs (for a break entry: to a graph that still keeps its
    joint, whose own resume function is settled in turn)."""
    kept = getattr(entry, "kept_speculation", None)
    return getattr(entry, "passes_arguments_only_to_graphs", False) and (
        kept is None or kept.recomputes < _MAX_RECOMPUTES)


def _serving_entry(hook: Any, args: tuple) -> Any:
    """The entry FrameHook.__call__ would run for `args`, compiled now on a miss (a trace reads no autograd
    state of its arguments), or None where the frame runs eagerly or the hook's state changed."""
    from .. import config
    from .breaks import DISABLED
    fn = hook.fn
    if config.disable or fn.__code__ is not hook.code or fn.__defaults__ is not hook.defaults[0] or \
            fn.__kwdefaults__ is not hook.defaults[1]:
        return None
    for entry in hook.entries:
        try:
            hit = entry.guard.check(*args)
        except Exception:
            hit = False
        if hit:
            return entry
    if fn.__code__ in DISABLED:
        return None
    return hook._find_or_compile(args, {})


def _chain() -> list:
    chain = getattr(_CHAIN, "value", None)
    if chain is None:
        chain = _CHAIN.value = []
    return chain


def _chain_mapping() -> dict[int, Any]:
    """The own results of every graph of the settled chain (outermost first) for their joint's, by id: each graph
    recomputed once per chain, on its inputs with the earlier graphs' own results in place of their joint's."""
    mapping: dict[int, Any] = {}
    for level in _chain():
        if level[1] is None:
            speculation, inputs, results, grad_enabled, states = level[0]
            inputs = tuple(mapping.get(id(a), a) for a in inputs)
            level[1] = {**mapping, **speculation.recompute(inputs, results, grad_enabled, states)}
        mapping = level[1]
    return mapping


def _chain_swapped(args: tuple) -> tuple:
    mapping = _chain_mapping()
    return tuple(mapping.get(id(a), a) if isinstance(a, torch.Tensor) else a for a in args)


def _swapped(pending: tuple, args: tuple) -> tuple:
    speculation, inputs, results, grad_enabled, states = pending
    mapping = _chain_mapping()
    inputs = tuple(mapping.get(id(a), a) for a in inputs)
    mapping = {**mapping, **speculation.recompute(inputs, results, grad_enabled, states)}
    return tuple(mapping.get(id(a), a) if isinstance(a, torch.Tensor) else a for a in args)


def break_entry_settles(output, gen, compiled: Any) -> tuple[bool, Any]:
    """(clean, its Speculated) for the entry of a frame that breaks at `gen`'s site: clean where its graph keeps
    its joint across the break (a Speculated) and it writes nothing, replays no side effect and puts none of
    its arguments that require grad in a container, object or cell live at the break (NOTE [Joints kept across
    several breaks])."""
    while compiled is not None and not isinstance(compiled, Speculated):
        compiled = getattr(compiled, "compiled", None)
    if compiled is None or output.side_effects or output.mutated_entries or gen.cell_args:
        return False, None
    from torch.multiprocessing.reductions import StorageWeakRef
    from .sources import LocalSource
    from .unread_inputs import maybe_requires_grad  # NOTE [Tensors passed through unread]
    try:
        arguments = {StorageWeakRef(inp.value.fake.untyped_storage()) for inp in output.inputs
                     if isinstance(inp.value, TensorValue) and isinstance(inp.source, LocalSource)
                     and maybe_requires_grad(output, inp.value)}
        held = [StorageWeakRef(v.fake.untyped_storage()) for v in live_tensors(
            [v for v in gen.values() if not isinstance(v, TensorValue)], inputs=True) if isinstance(v, TensorValue)]
    except Exception:  # a tensor without storage (sparse, nested): not known to be unobserved
        return False, None
    if any(storage in arguments for storage in held):
        return False, None
    return True, compiled


def passes_arguments_only_to_graphs(output, ret) -> bool:
    """The finished trace hands none of its tensor arguments that require grad to code outside its graphs: no
    side effect replayed, none returned as it is or as a view of it (reads of autograd state are graph breaks)."""
    if output.side_effects:
        return False
    from torch.multiprocessing.reductions import StorageWeakRef
    from .sources import LocalSource
    from .unread_inputs import maybe_requires_grad  # NOTE [Tensors passed through unread]
    try:
        arguments = {StorageWeakRef(inp.value.fake.untyped_storage()) for inp in output.inputs
                     if isinstance(inp.value, TensorValue) and isinstance(inp.source, LocalSource)
                     and maybe_requires_grad(output, inp.value)}
        returned = [StorageWeakRef(v.fake.untyped_storage()) for v in live_tensors([ret], inputs=True)
                    if isinstance(v, TensorValue)]
    except Exception:  # a tensor without storage (sparse, nested): not known to be unobserved
        return False
    return not any(storage in arguments for storage in returned)
