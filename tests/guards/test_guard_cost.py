"""Per-call cost of guard functions (issue 17): the global-state lines every entry carries are checked
without Python-level helper calls or argument parsing where a cheaper read states the same fact, and
every state change those lines cover still recompiles. NOTE [Autocast off in one call] (convert.py),
NOTE [Entries guarded on DDP] (ddp_buckets.py), NOTE [Guarding the marks] (allowed_calls.py).

Costs are counted, never timed: the calls one guard check makes, as `sys.setprofile` reports them.
"""
from __future__ import annotations

import sys

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

import framejit
from tests.guards.test_soundness_facts import run_steps


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[layer for _ in range(4) for layer in (torch.nn.Linear(16, 16), torch.nn.ReLU())])


def _calls(check, *args):
    """The functions one call of `check` calls: Python functions by code name, builtins by name."""
    seen: list[tuple[str, str]] = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is not check.__code__:
            seen.append(("py", frame.f_code.co_name))
        elif event == "c_call":
            seen.append(("c", getattr(arg, "__name__", repr(arg))))

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        result = check(*args)
    finally:
        sys.setprofile(previous)
    assert result is True
    return [c for c in seen if c != ("c", "setprofile")]


@pytest.fixture
def no_marks(monkeypatch):
    """No function marked allow_in_graph while the test runs: earlier tests in the same process (importing
    transformers, torch's own modules on some versions) may have marked some, which makes every entry guard
    each user function's mark instead of the one inline line these tests measure."""
    rules = sys.modules.get("torch._dynamo.trace_rules")
    ids = getattr(rules, "_allowed_callable_ids", None)
    if ids is not None:
        monkeypatch.setattr(ids, "function_ids", set())


def test_global_state_lines_of_a_module_guard_make_no_python_calls(no_marks):
    model = _mlp()

    def fn(x):
        return model(x)

    compiled = framejit.compile(fn, backend="eager")
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        guard = compiled.entries[0].guard
        guard.check(x)  # the first check remembers the parameters (NOTE [Remembered tensor facts])
        calls = _calls(guard.check, x)
    source = guard.source
    # autocast: one call covering every device instead of one per device (with a device-name argument)
    assert calls.count(("c", "_is_any_autocast_enabled")) == 1, calls
    assert ("c", "is_autocast_enabled") not in calls
    assert "is_autocast_enabled(" not in source
    # outside DDP: an attribute read, not ddp_caps() and its two Python calls
    assert "_active_ddp_module is None" in source
    assert ("py", "ddp_caps") not in calls and ("py", "active_ddp") not in calls
    # allow_in_graph marks (none): read inline, no allowed_ids_are() call
    python_calls = [name for kind, name in calls if kind == "py"]
    assert python_calls == [], python_calls


def test_marks_line_reads_what_allowed_ids_are_reads(no_marks, monkeypatch):
    """NOTE [Guarding the marks]: the inline line answers as allowed_ids_are(frozenset()) does, for every
    state of torch._dynamo.trace_rules: not imported, blocked (None), without the set, set uninitialised,
    initialised empty, holding a mark."""
    from types import SimpleNamespace

    from framejit.capture import allowed_calls

    def helper(t):
        return t * 2

    def fn(x):
        return helper(x) + 1

    compiled = framejit.compile(fn, backend="eager")
    x = torch.randn(3)
    compiled(x)
    guard = compiled.entries[0].guard
    assert "allowed_ids_are" not in guard.source and "'torch._dynamo.trace_rules' not in" in guard.source
    sys_name = next(k for k, v in guard.namespace.items() if v is sys)
    rules = "torch._dynamo.trace_rules"
    states = [{}, {rules: None}, {rules: SimpleNamespace()},
              {rules: SimpleNamespace(_allowed_callable_ids=SimpleNamespace(function_ids=None))},
              {rules: SimpleNamespace(_allowed_callable_ids=SimpleNamespace(function_ids=set()))},
              {rules: SimpleNamespace(_allowed_callable_ids=SimpleNamespace(function_ids={id(helper)}))}]
    answers = []
    for modules in states:
        fake = SimpleNamespace(modules=modules)
        namespace = dict(guard.namespace, **{sys_name: fake})
        exec(compile(guard.source, "<guard>", "exec"), namespace)
        check = namespace[guard.check.__name__]
        monkeypatch.setattr(allowed_calls, "sys", fake)
        expected = allowed_calls.allowed_ids_are(frozenset())
        monkeypatch.undo()
        assert check(x) is expected, modules
        answers.append(expected)
    assert answers == [True, True, True, True, True, False]


def _autocast_set(device: str, enabled: bool):
    return lambda: torch._C.set_autocast_enabled(device, enabled)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_autocast_entered_after_compiling_recompiles(device):
    model = _mlp()

    def fn(x):
        return model(x).sum(1)

    def args():
        return (torch.randn(3, 16),)

    steps = [None, _autocast_set(device, True), None, _autocast_set(device, False), None]
    try:
        counting = run_steps(fn, args, steps)
    finally:
        torch._C.set_autocast_enabled(device, False)
    assert counting.graph_count == 2  # off, on; the first entry serves the last call again


def test_autocast_on_another_device_retraces_once():
    """autocast on a device the trace does not read fails the one-call guard once; the new entry guards
    "cpu" and "cuda" one by one, so later calls with that autocast on are not traced again."""
    def fn(x):
        return x * 2 + 1

    def args():
        return (torch.randn(5),)

    steps = [None, _autocast_set("xpu", True), None, None, _autocast_set("xpu", False), None]
    try:
        counting = run_steps(fn, args, steps)
    finally:
        torch._C.set_autocast_enabled("xpu", False)
    assert counting.graph_count == 2


def test_entry_made_outside_ddp_fails_inside_a_ddp_forward():
    """The outside-DDP guard line reads DistributedDataParallel._active_ddp_module, which DDP's forward
    sets (NOTE [Entries guarded on DDP]); checked on the guard function itself, as no process group exists."""
    model = _mlp()

    def fn(x):
        return model(x)

    compiled = framejit.compile(fn, backend="eager")
    x = torch.randn(2, 16)
    compiled(x)
    guard = compiled.entries[0].guard
    assert guard(x) is True
    old = DistributedDataParallel._active_ddp_module
    DistributedDataParallel._active_ddp_module = object()
    try:
        assert guard(x) is False
        failure = guard.first_failure(x)
        assert failure is not None and failure.guard.kind == "GLOBAL_STATE" and "_active_ddp_module" in failure.guard.expr
    finally:
        DistributedDataParallel._active_ddp_module = old
    assert guard(x) is True


def test_module_state_changes_still_recompile():
    """The module facts the guard keeps: an attribute, a replaced submodule, a hook, training mode, a
    replaced parameter; each change gives the eager result (a new entry where the trace differs)."""
    model = _mlp()
    model.train()
    handles = []

    def fn(x):
        return torch.nn.functional.dropout(model(x), 0.0, model.training) + 1

    def args():
        return (torch.randn(3, 16),)

    def add_hook():
        handles.append(model[2].register_forward_hook(lambda m, a, out: out * 3))

    steps = [None, None,
             lambda: setattr(model[1], "inplace", True),  # an attribute: new entry
             lambda: model.__setitem__(3, torch.nn.Tanh()),  # a submodule replaced: new entry
             add_hook,  # a forward hook: new entry
             lambda: handles.pop().remove(),  # removed: the entry made before it holds again
             model.eval,  # training mode: new entry
             lambda: setattr(model[0], "weight", torch.nn.Parameter(torch.randn(16, 16)))]  # same metadata
    with torch.no_grad():
        counting = run_steps(fn, args, steps)
    assert counting.graph_count == 5


def _checks(guard, *args) -> bool:
    try:
        return guard.check(*args)
    except KeyError:  # another entry's key reads (the failure framejit's guard call handles)
        return False


def test_keys_guard_compares_by_sign_only_the_keys_holding_a_zero():
    """NOTE [Exact keys decided when the guard is built] (guards/same_values.py): the keys guard of a dict of
    string keys calls no zero check (it did for every key on every check); a dict holding a float zero still
    tells -0.0 from 0.0 and only its zero key is compared by sign."""
    def fn(x, d, z):
        for k in d:
            x = x + len(k)
        return x, [str(k) for k in z]

    compiled = framejit.compile(fn, backend="eager")
    x = torch.ones(2)
    steps = [({"a": 1, "bb": 2}, {0.5: 1, 0.0: 2}), ({"a": 1, "bb": 2}, {0.5: 1, -0.0: 2}),
             ({"a": 1, "ccc": 2}, {0.5: 1, 0.0: 2}), ({"a": 1, "bb": 2}, {0.5: 1, 0.0: 2})]
    for d, z in steps:
        assert str(compiled(x, d, z)) == str(fn(x, d, z))
    entry = next(e for e in compiled.entries if _checks(e.guard, x, *steps[0]))
    python_calls = [name for kind, name in _calls(entry.guard.check, x, *steps[0]) if kind == "py"]
    assert python_calls.count("same_constant") == 1, python_calls  # the zero key only
    assert python_calls.count("has_zero") == 1, python_calls  # inside that one same_constant
