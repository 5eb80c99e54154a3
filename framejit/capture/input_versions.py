"""Version counters of graph inputs written in place, kept as eager keeps them.

NOTE [Version counts of written inputs]: every in-place write bumps a tensor's version counter (`x._version`,
shared by its views), which autograd compares to detect a saved tensor modified since, and which user code may
read (caches keyed on `(id(t), t._version)`). While tracing, each op that changed an input's fake counter counts
one write of that input, as one eager op bumps once (NOTE [Input mutation] in graph.py; a fake op may bump
more). A backend that runs the graph as its Python code (the eager backend: `gm.forward`) makes the same
writes; one that functionalizes it (onnxrt, triton) writes each input back once, so two writes to an input
left `_version` 1 where eager gives 2 (red team 6). The graph's callable is then wrapped: after each call,
every written input's counter is advanced to what eager's writes would have made it
(`torch.autograd.graph.increment_version`), counting what the backend bumped itself. The frame cache
persists the counts with the entry and wraps the restored callable again.
Counters are only raised, never set back: batch_norm in training mode writes its running statistics without
a bump (in eager and in the fake trace), while the backends' write-back bumps them once per call. Setting
them back to eager's count (cb15b2d) hid that write from onnxrt's frozen-weight check (NOTE [Frozen weights]
in backends/onnxrt/runtime.py notices changes by `_version`), which then served stale statistics; so such
inputs keep the backend's extra bump (test_version_counters.py).
"""
from __future__ import annotations

from typing import Any, Callable

from torch.autograd.graph import increment_version


class KeptVersions:
    """`compiled`, after whose calls the written inputs' version counters advanced as in eager."""

    __slots__ = ("compiled", "writes")

    def __init__(self, compiled: Callable, writes: tuple[tuple[int, int], ...]) -> None:
        self.compiled = compiled
        self.writes = writes  # (graph input position, eager's number of bumps)

    def __call__(self, *args: Any) -> Any:
        before = [args[i]._version for i, _ in self.writes]
        out = self.compiled(*args)
        for (i, count), version in zip(self.writes, before):
            for _ in range(count - (args[i]._version - version)):
                increment_version(args[i])
        return out


def input_writes(output) -> tuple[tuple[int, int], ...]:
    """(position, number of version bumps) of each graph input the traced graph wrote."""
    return tuple((i, inp.writes) for i, inp in enumerate(output.inputs) if inp.writes)


def keep_versions(compiled: Callable, gm, writes: tuple[tuple[int, int], ...]) -> Callable:
    """`compiled` wrapped when it may bump fewer times than eager: not when it runs the graph's own code."""
    if not writes or getattr(compiled, "__self__", None) is gm:
        return compiled
    return KeptVersions(compiled, writes)


def unwrapped(compiled: Callable) -> Callable:
    """What the backend returned (the artifact it saves is of that object)."""
    return compiled.compiled if isinstance(compiled, KeptVersions) else compiled
