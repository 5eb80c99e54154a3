"""Run-time checks of a graph (`torch._assert_async`), kept by the backends that lower the graph.

NOTE [Run-time checks as outputs]: a captured graph may check a tensor's value at run time,
`torch._assert_async(c)` (or `(c, msg)`): the frontend speculates on a branch that would raise, or the user's
code calls it (NOTE [Speculated checks] in capture/speculated_checks.py), and a failing check makes the graph
call raise, so the hook reruns the call
eagerly (NOTE [Graph failures rerun eagerly] in capture/requests.py). The node has no users, and lowering
keeps only what feeds an output (ORT translation, triton's scheduler): a dropped check passed silently and
the call took the branch eager does not (red team 7); running such graphs as their Python code instead
(451191e) cost them their lowering (every torch.distributions graph with validation on).
So onnxrt and triton compile the graph of `checks_as_outputs`: each check's condition is an extra trailing
output, computed by the lowered program, and `CheckedGraph` runs `torch._assert_async` (with the check's
message) on those outputs after the call, before returning the graph's own outputs. A failing check raises
from the graph call with the eager backend's error, and the call reruns eagerly as there. The checks run
after the whole graph, not at their place in it: equal, because a graph holding checks neither writes its
inputs nor draws random numbers (the frontend keeps a check only then, and breaks at such ops after it), so
a rerun repeats nothing; the rest of a graph whose check fails may compute garbage or fail itself (the
rerun raises the user's own error either way).
Only the captured graph's `torch._assert_async` calls count (moved out before any joint is built): the
`aten._assert_async.msg` nodes that decompositions add to the halves of a training graph are torch's
internal asserts, which the lowering drops as before.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

_CHECK = torch._assert_async


def checks_as_outputs(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, list[tuple], bool]:
    """`gm` with each check's condition as an extra trailing output in place of the check, each check's further
    arguments (its message), and whether `gm` returns one value rather than a tuple (it is then the first
    output); `gm` itself and no checks when it has none (NOTE [Run-time checks as outputs])."""
    checks = [node for node in gm.graph.nodes if node.op == "call_function" and node.target is _CHECK]
    if not checks:
        return gm, [], False
    graph = torch.fx.Graph()
    copies: dict = {}
    result = graph.graph_copy(gm.graph, copies)
    conditions = []
    for check in checks:
        conditions.append(copies[check].args[0])
        graph.erase_node(copies[check])
    messages = [check.args[1:] for check in checks]  # `torch._assert_async(c, msg)` raises `msg`
    single = not isinstance(result, tuple)
    graph.output((result, *conditions) if single else (*result, *conditions))
    return torch.fx.GraphModule(gm, graph), messages, single


class CheckedGraph:
    """What a backend compiled from `checks_as_outputs(gm)`, called as `gm` is: the checks run on the trailing
    outputs, and the graph's own outputs are returned. Other attributes are the compiled callable's (its
    counts and summaries, for explain and tests)."""

    def __init__(self, compiled: Callable, messages: list[tuple], single: bool) -> None:
        self.compiled, self.messages, self.single = compiled, messages, single

    def __call__(self, *args: Any) -> Any:
        out = self.compiled(*args)
        kept = len(out) - len(self.messages)
        for condition, message in zip(out[kept:], self.messages):
            _CHECK(condition, *message)
        return out[0] if self.single else out[:kept]

    def __getattr__(self, name: str) -> Any:
        if name == "compiled":  # an instance not initialised (copy.copy looks for __setstate__ first)
            raise AttributeError(name)
        return getattr(self.compiled, name)


def compile_checked(gm: torch.fx.GraphModule, compile_fn: Callable[[torch.fx.GraphModule], Callable]) -> Callable:
    """`compile_fn(gm)`, where `gm` has no checks; else `compile_fn` of the graph with its checks as outputs,
    wrapped to run them (NOTE [Run-time checks as outputs])."""
    lowered, messages, single = checks_as_outputs(gm)
    return CheckedGraph(compile_fn(lowered), messages, single) if messages else compile_fn(gm)


def unchecked(compiled: Callable) -> Callable:
    """The backend's own callable inside a `CheckedGraph` (what it persists)."""
    return compiled.compiled if isinstance(compiled, CheckedGraph) else compiled
