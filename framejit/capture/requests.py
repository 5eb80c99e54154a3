"""What a compilation is asked for and what it yields: the types capture's modules share.

- `CompileRequest`: one `framejit.compile(...)` call's backend, options, fullgraph and dynamic mode, and
  the registry of FrameHooks its graph breaks create (`hooks`, a `hook.Hooks`, attached by the first
  FrameHook made for the request).
- `Entry`: one compiled entry of a frame (guard function, transformed function, graphs, the break it
  stopped at), and its `RerunState` (NOTE [Graph failures rerun eagerly]).
- `STATS`: the process-wide counters behind `framejit.stats()`.

The hook (hook.py), the conversion of a frame (convert.py) and the frame cache (frame_cache.py) all use
these types; keeping them here (and `module_call` in module_frame.py) lets those three modules import in
one direction: hook -> convert -> frame_cache.
"""
from __future__ import annotations

import dataclasses
import re
import threading
import types
from typing import Any, Callable

import torch

from ..guards import GuardFunction
from .breaks import GraphBreak
from .codegen import graph_call_span
from .entry_checks import ENTRY_CHECK, SIZE_TRUTH_CHECK, is_entry_check

# NOTE [Threads] (hook.py): entries are published under this lock; here so that requests.py, which drops a failed
# entry (restore_after), does not import hook.py (capture imports go one way: hook -> convert -> frame_cache)
COMPILE_LOCK = threading.RLock()

# NOTE [Stats rows handed out, not copied]: `framejit.stats()["frames"]` lists one row per compiled or loaded
# frame entry since the process started. stats() copied every row on every call, so a process that compiles
# many frames and reads stats() often (the `framejit warm` progress display, a test suite: 13,604 rows and
# 2,773 calls, 115 s in one CI shard) paid a cost quadratic in its length. Rows are read-only dicts (a copy,
# pickle or deepcopy of one is a plain dict) and stats() hands out a new list of the same rows.
class FrameRow(dict):
    """One row of `framejit.stats()["frames"]` (NOTE [Stats rows handed out, not copied]): read-only."""

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("rows of framejit.stats()['frames'] are read-only; dict(row) is a copy to change")

    __setitem__ = __delitem__ = update = pop = popitem = clear = setdefault = __ior__ = _read_only

    def __reduce_ex__(self, protocol: int) -> tuple:
        return dict, (dict(self),)


FRAMES: list[FrameRow] = []  # one row per compiled or loaded frame entry, for framejit.stats()
STATS: dict[str, float] = {"frames_traced": 0, "frames_compiled": 0, "graphs": 0, "backend_compiles": 0,
                           "eager_entries": 0, "frames_loaded": 0, "compile_time_s": 0.0,
                           # graphs run as their own code, not the backend's, because autograd state of their
                           # results is observed (NOTE [Autograd state observed after a break])
                           "graphs_own_code": 0}


@dataclasses.dataclass
class Entry:
    guard: GuardFunction
    fn: Callable
    graphs: list[torch.fx.GraphModule]
    graph_break: GraphBreak | None = None
    user_error: BaseException | None = None
    backend_outputs: list[str] = dataclasses.field(default_factory=list)  # what the backend made, as text
    persisted: Any = None  # frame_cache.Persisted when the entry can be saved for other processes
    rerun: "RerunState | None" = None  # set when a failing graph call may rerun the frame eagerly
    on_graph_error: Callable | None = None  # NOTE [Effects before a failing graph] (graph_errors.py)
    served: bool = False  # chosen for a call by FrameHook._find_or_compile (what explain() reports)
    routes_callees: bool = False  # an eager frame whose callees go through hooks (NOTE [Callees of frames run eagerly])

    @property
    def check(self) -> Callable:
        return self.guard.check


# NOTE [Graph failures rerun eagerly]: a graph can raise at run time where fake tensors could not tell
# (an index out of range, a singular matrix, out of memory). The graph call is the first thing a
# transformed function does, and a graph that mutates no input and draws no random numbers has no
# effect but the global state it switches (grad mode, autocast), which is put back to the state the
# guards pinned at entry. So the hook reruns the original function eagerly: the exception is raised by
# the user's own code, where the user's try/except (and with-blocks) see it exactly as in eager.
@dataclasses.dataclass
class RerunState:
    grad_enabled: bool  # at entry (guarded)
    autocast: tuple  # ((device_type, enabled, dtype), ...) at entry (guarded)
    restores: tuple = ()  # further (function, args) calls that put state back (state_blocks.restores_for)
    entry_checks_only: bool = False  # only a failed entry check reruns (NOTE [Entry checks])

    def raised_in_graph(self, exc: BaseException, code: types.CodeType) -> bool:
        """`exc` was raised by the graph call of `code` (the transformed function)."""
        if self.entry_checks_only and not (type(exc) is RuntimeError and str(exc).startswith(ENTRY_CHECK)):
            return False
        if getattr(exc, "framejit_unrestored", False) and not str(exc).startswith(ENTRY_CHECK):
            return False  # NOTE [Bounded snapshots] (handler_reruns.py): the writes were not put back
        if type(exc) is _stop_recomputation() or getattr(exc, "framejit_replayed_once", False):
            return False  # NOTE [Recomputation stopped inside a graph], NOTE [Warnings of graph ops]
        start, end = graph_call_span(code)  # NOTE [Graph call span]
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code is not code:
            tb = tb.tb_next
        return tb is not None and start <= tb.tb_lasti < end

    def restore(self) -> None:
        torch._C._set_grad_enabled(self.grad_enabled)
        for device_type, enabled, dtype in self.autocast:
            torch.set_autocast_enabled(device_type, enabled)
            torch.set_autocast_dtype(device_type, dtype)
        for fn, args in self.restores:
            fn(*args)

    def restore_after(self, exc: BaseException, hook: Any, entry: Entry) -> None:
        """`restore()` before the rerun; a failed truth over symbolic sizes also drops `entry` from its frame's
        hook, whose later traces keep such truths as breaks (NOTE [A failed truth of sizes recompiles])."""
        self.restore()
        if type(exc) is RuntimeError and str(exc).startswith(SIZE_TRUTH_CHECK):
            with COMPILE_LOCK:  # NOTE [Threads]: entries are published copy-on-write
                hook.size_truths_kept = True
                hook.entries = [e for e in hook.entries if e is not entry]


# NOTE [Recomputation stopped inside a graph]: during backward, torch's non-reentrant checkpoint reruns
# its function and stops it early by raising `_StopRecomputationError` from its saved-tensors pack hook once
# the last tensor it needs is saved. When the function is a compiled frame (NOTE [Reentrant checkpoint at a
# break] in hook.py), the exception leaves the frame's graph: it is torch's control flow, not a failure of
# the graph, so it propagates as in eager (the effects that precede the graph's ops are made, NOTE [Effects
# before a failing graph]); rerunning the frame eagerly called the pack hook again after the stop, and
# torch raised "AssertionError: Unexpected state: target_frame.early_stop is set" in the backward.
def _stop_recomputation() -> type:
    from torch.utils.checkpoint import _StopRecomputationError
    return _StopRecomputationError


# NOTE [Random ops by name]: a call draws random numbers when a "_"/"."-separated word of its name starts with
# "rand" (rand, randn, randint, randperm, random_, *_like, philox_rand), it contains "dropout" (every dropout
# variant), or one of its words is below (normal_, uniform_, _standard_gamma, _sample_dirichlet, rrelu, ...).
# Whole words, not substrings: "perm" and "normal" as substrings made permute and F.normalize random (no
# speculated check after them: Autoformer's likelihood head broke 4 times where stock torch.compile has no
# break), and "shuffle" made pixel_shuffle random.
_RANDOM_WORDS = frozenset(("bernoulli", "multinomial", "normal", "poisson", "uniform", "exponential", "geometric",
                           "cauchy", "gamma", "dirichlet", "binomial", "rrelu", "gumbel", "fractional"))
# NOTE [Random ops by name], continued: F.gumbel_softmax and F.fractional_max_pool2d/3d draw too (review revK
# J2: a kept joint recomputed as its own code drew a second time); so do aten overloads tagged
# nondeterministic_seeded, and torch.nn.init's orthogonal_/sparse_ (they draw through normal_ inside).
_RANDOM_BY_IDENTITY: set = set()


def _random_by_identity(target: Any) -> bool:
    if not _RANDOM_BY_IDENTITY:
        _RANDOM_BY_IDENTITY.update((torch.nn.init.orthogonal_, torch.nn.init.sparse_))
    try:
        return target in _RANDOM_BY_IDENTITY
    except TypeError:  # an unhashable target
        return False


def draws_random(target: Any, args: tuple = (), kwargs: dict | None = None) -> bool:
    """A call that may draw random numbers, judged by name (NOTE [Random ops by name]); a dropout given
    `training=False` (a module in eval mode: it returns its input) draws none. `args`/`kwargs` hold plain
    values (FX node arguments)."""
    name = (target if isinstance(target, str) else getattr(target, "__name__", "")).lower()
    if "dropout" in name:
        kwargs = kwargs or {}
        training = kwargs.get("training", kwargs.get("train", args[2] if len(args) > 2 else True))
        return training is not False
    if isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags:
        return True
    if _random_by_identity(target):
        return True
    words = re.split(r"[_.]", name)  # also OpOverload names: "bernoulli.p", "normal.tensor_float"
    return any(w.startswith("rand") for w in words) or not _RANDOM_WORDS.isdisjoint(words)


def rerun_state(gm: torch.fx.GraphModule | None, mutates_inputs: bool, restored: bool = False) -> RerunState | None:
    """The state to restore before rerunning a frame whose graph failed, or None when a rerun would not
    be exact (NOTE [Graph failures rerun eagerly]); `restored`: the graph's callable puts back the inputs it
    writes and the random generators it draws from when it fails (NOTE [Failing graphs inside handlers])."""
    if gm is None:
        return None
    exact = not mutates_inputs or restored
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method") and draws_random(node.target, node.args, node.kwargs) \
                and not restored:
            exact = False  # a rerun would draw other random numbers than eager draws
        if node.target is torch.autograd.grad_mode._enter_inference_mode:
            exact = False  # an aborted inference-mode block cannot be exited from outside
    entry_checks_only = not exact
    if entry_checks_only and not any(is_entry_check(node) for node in gm.graph.nodes):
        return None  # NOTE [Entry checks]: a failed one raises before any op
    autocast = ()
    if any(node.target is torch.amp.autocast_mode._enter_autocast for node in gm.graph.nodes):
        autocast = tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda"))
    from .state_blocks import restores_for
    return RerunState(torch._C.is_grad_enabled(), autocast, restores=restores_for(gm), entry_checks_only=entry_checks_only)


def mutates_in_place(gm: torch.fx.GraphModule) -> bool:
    """Some node of `gm` may write into a tensor, judged by name (for graphs whose inputs' mutations
    were not recorded: those loaded from the frame cache)."""
    return any(writes_in_place(node) for node in gm.graph.nodes)


def writes_in_place(node: torch.fx.Node) -> bool:
    """`node` may write into a tensor, judged by its target's name."""
    if node.op not in ("call_function", "call_method"):
        return False  # a placeholder's target is its name (`L_x_`), which ends like an in-place op's
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or name in ("setitem", "__setitem__") or \
        (name.startswith("__i") and name.endswith("__")) or "out" in node.kwargs


@dataclasses.dataclass
class CompileRequest:
    backend: Callable
    options: dict | None
    fullgraph: bool
    hooks: Any = dataclasses.field(default=None, repr=False)  # hook.Hooks, set by the first FrameHook
    version_key: str = ""  # the backend's cache version key
    artifacts: tuple | None = None  # the backend's (save, load) for the frame cache; None: not persistable
    dynamic: bool | None = None  # compile(dynamic=...) (NOTE [Symbolic shapes] in shapes.py)
    compile_args: dict | None = dataclasses.field(default=None, repr=False)  # compile()'s own arguments


__all__ = ["CompileRequest", "Entry", "FRAMES", "FrameRow", "RerunState", "STATS", "mutates_in_place", "rerun_state"]
