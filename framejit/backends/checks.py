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
Entry checks (NOTE [Entry checks] in capture/entry_checks.py: a message starting with ENTRY_CHECK, the
condition one op on the graph's inputs, or a few ops on their sizes, placed before every other op) must fail before the graph writes
anything, also in the lowered program: `entry_checks` is a small graph of those conditions alone, run as
torch ops on the call's inputs before the compiled callable (a few microseconds per call), and the checks
are not outputs of the lowered graph.
Only the captured graph's `torch._assert_async` calls count (moved out before any joint is built): the
`aten._assert_async.msg` nodes that decompositions add to the halves of a training graph are torch's
internal asserts, which the lowering drops as before.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.fx

from ..signal_handlers import reraise_if_from_signal_handler

_CHECK = torch._assert_async
ENTRY_CHECK = "framejit entry check: "  # the same text as capture/entry_checks.py's ENTRY_CHECK
SIZE_TRUTH_CHECK = ENTRY_CHECK + "a truth of sizes changed"  # capture/constant_tensors.py's check message


def _is_entry_check(node: torch.fx.Node) -> bool:
    return len(node.args) > 1 and isinstance(node.args[1], str) and node.args[1].startswith(ENTRY_CHECK)


def entry_checks(gm: torch.fx.GraphModule) -> Callable | None:
    """A function called as `gm` is that runs `gm`'s entry checks (each condition is one op on its inputs) and
    returns nothing; None when `gm` has none (NOTE [Run-time checks as outputs]). Plain calls, not an FX
    module: a failing check raises without FX's report on stderr."""
    checks = [node for node in gm.graph.nodes if node.op == "call_function" and node.target is _CHECK
              and _is_entry_check(node)]
    if not checks:
        return None
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    steps = [(_condition_steps(gm.graph, check.args[0]), check.args[0], check.args[1:]) for check in checks]

    def run(*args: Any) -> None:
        env = dict(zip(placeholders, args))
        for nodes, condition, message in steps:
            try:
                for node in nodes:
                    values, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), env.__getitem__)
                    env[node] = getattr(values[0], node.target)(*values[1:], **kwargs) if node.op == "call_method" \
                        else node.target(*values, **kwargs)
            except Exception as e:  # NOTE [A failing entry condition fails the check]
                reraise_if_from_signal_handler(e)  # NOTE [Signal handlers while a compiled frame runs]
                raise RuntimeError(message[0]) from e
            _CHECK(env[condition], *message)
    return run


# NOTE [A failing entry condition fails the check]: the ops computing an entry check's condition run before any
# of the graph's effects, and fake tracing cannot tell whether they raise (`torch.eye(n)[torch.tensor([3])]`
# raises IndexError for n <= 3). Raised from there, the user's exception came before the graph's input writes
# that eager makes first, and (not being a failed entry check) was not rerun (review revP HIGH-1). Any
# exception while computing a condition is raised as the check's own failure: the call reruns eagerly, exactly
# (nothing has run yet), and raises the user's error where eager does. The eager backend runs these conditions
# the same way before the graph (backends/eager.py) where the graph holds a truth over symbolic sizes; the
# graph's own copies then compute the same values and do not raise. An exception of the user's signal handler
# (a SIGALRM timeout arriving while a condition is computed) is no failure of the condition: it reaches the
# caller as in eager (NOTE [Signal handlers while a compiled frame runs]), where taken as a failed check it
# reran the call eagerly (the call returned normally, having spent the time twice) and a failed truth of
# sizes even dropped the entry (a recompile).
def has_size_truth(gm: torch.fx.GraphModule) -> bool:
    """The graph holds an entry check of a truth over symbolic sizes (NOTE [Truths over symbolic sizes])."""
    return any(node.op == "call_function" and node.target is _CHECK and _is_entry_check(node) and
               node.args[1].startswith(SIZE_TRUTH_CHECK) for node in gm.graph.nodes)


def _condition_steps(graph: torch.fx.Graph, condition: torch.fx.Node) -> list:
    """The nodes computing an entry check's condition from the inputs, in graph order: one op, or the few a
    truth over symbolic sizes copies to the graph's start (NOTE [Truths over symbolic sizes])."""
    needed, stack = set(), [condition]
    while stack:
        node = stack.pop()
        if node not in needed and node.op != "placeholder":
            needed.add(node)
            stack.extend(node.all_input_nodes)
    return [node for node in graph.nodes if node in needed]


def checks_as_outputs(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, list[tuple], bool]:
    """`gm` with each check's condition as an extra trailing output in place of the check, each check's further
    arguments (its message), and whether `gm` returns one value rather than a tuple (it is then the first
    output); `gm` itself and no checks when it has none (NOTE [Run-time checks as outputs]). Entry checks
    are dropped (`entry_checks` runs them)."""
    checks = [node for node in gm.graph.nodes if node.op == "call_function" and node.target is _CHECK]
    if not checks:
        return gm, [], False
    graph = torch.fx.Graph()
    copies: dict = {}
    result = graph.graph_copy(gm.graph, copies)
    conditions = []
    for check in checks:
        if not _is_entry_check(check):
            conditions.append(copies[check].args[0])
        graph.erase_node(copies[check])
    checks = [check for check in checks if not _is_entry_check(check)]
    messages = [check.args[1:] for check in checks]  # `torch._assert_async(c, msg)` raises `msg`
    single = not isinstance(result, tuple)
    if not conditions:  # entry checks alone: the outputs are gm's
        graph.output(result)
    else:
        graph.output((result, *conditions) if single else (*result, *conditions))
    return torch.fx.GraphModule(gm, graph), messages, single


class CheckedGraph:
    """What a backend compiled from `checks_as_outputs(gm)`, called as `gm` is: the checks run on the trailing
    outputs, and the graph's own outputs are returned; `at_entry` (`entry_checks(gm)`) runs before the compiled
    callable. Other attributes are the compiled callable's (its
    counts and summaries, for explain and tests)."""

    def __init__(self, compiled: Callable, messages: list[tuple], single: bool,
                 at_entry: Callable | None = None) -> None:
        self.compiled, self.messages, self.single, self.at_entry = compiled, messages, single, at_entry

    def __call__(self, *args: Any) -> Any:
        if self.at_entry is not None:
            self.at_entry(*args)
        out = self.compiled(*args)
        if not self.messages:
            return out
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
    at_entry = entry_checks(gm)
    if not messages and at_entry is None:
        return compile_fn(gm)
    return CheckedGraph(compile_fn(lowered), messages, single, at_entry)


def unchecked(compiled: Callable) -> Callable:
    """The backend's own callable inside a `CheckedGraph` (what it persists)."""
    return compiled.compiled if isinstance(compiled, CheckedGraph) else compiled
