"""Remembered tensor facts under changes made while a guard runs (NOTE [Facts remembered with what was read
before them] in guards/codegen.py, NOTE [Bumped before and after] in tensor_watch.py; issue 17).

Another thread can change a parameter while a guard checks it. The interleavings are made deterministic
here: the change runs inside the guard's own call, at the point where another thread could have run it
(after the facts were checked, before the memo is written; in the middle of a `.data` assignment). The
guard must then never keep trusting the old facts: the next call recompiles and returns what eager
returns. A version mismatch (a training loop) must cost no more C calls than checking every fact.
"""
from __future__ import annotations

import pytest
import torch

import framejit
from framejit import tensor_watch
from tests.guards.test_guard_cost import _calls, _mlp, no_marks  # noqa: F401  (fixture)
from tests.guards.test_guard_cost2 import _Net


def _compiled_net():
    net = _Net()

    def fn(x):
        return net(x)

    return net, framejit.compile(fn, backend="eager"), fn


def _same(compiled, fn, x):
    actual, expected = compiled(x), fn(x)
    torch.testing.assert_close(actual[0], expected[0])
    assert actual[1] == expected[1]


def test_a_change_after_the_facts_were_checked_is_not_remembered_as_checked():
    """The weight is transposed in place after the guard checked its facts and before it remembered it: the
    memo must hold the version read before the facts, so the next call checks again (before: the version
    read after the change made every later call trust the old strides)."""
    net, compiled, fn = _compiled_net()
    x = torch.randn(3, 1)
    _same(compiled, fn, x)
    _same(compiled, fn, x)  # the first check remembers
    guard = compiled.entries[0].guard
    namespace = guard.namespace
    memo = next(namespace[k] for k in sorted(namespace) if k.startswith("___memo") and namespace[k][3] is not None
                and namespace[k][0] is net.w)
    memo[:] = (None, -1, -1, None, None, None)  # forgotten: the next check remembers afresh
    original = namespace["___remember_tensor"]

    def remember_after_a_change(memo_, tensor, *args):
        if tensor is net.w:  # what another thread could do between the facts and the memo
            namespace["___remember_tensor"] = original
            with torch.no_grad():
                net.w.t_()
        return original(memo_, tensor, *args)

    namespace["___remember_tensor"] = remember_after_a_change
    assert guard.check(x)  # the facts were checked before the change
    assert namespace["___remember_tensor"] is original  # the change was made
    assert not guard.check(x)  # the strides changed: not trusted
    for _ in range(2):
        _same(compiled, fn, torch.randn(3, 1))


class _DataSetMidway:
    """`Tensor.data`'s original descriptor, whose assignment first runs `during` (a guard of another thread)."""

    def __init__(self, original, during):
        self.original, self.during = original, during

    def __get__(self, obj, cls):
        return self.original.__get__(obj, cls)

    def __set__(self, obj, value):
        self.during()
        self.original.__set__(obj, value)


def test_a_guard_run_inside_a_data_assignment_does_not_trust_its_facts(monkeypatch):
    """A guard that runs after `.data =` bumped the epoch but before the assignment took effect remembers the
    old facts with the epoch of that moment: the epoch must move again once the assignment is made."""
    net, compiled, fn = _compiled_net()
    x = torch.randn(3, 1)
    _same(compiled, fn, x)
    _same(compiled, fn, x)
    with torch.no_grad():
        net.w.add_(1)  # a new version: the next check reads every fact and remembers them
    guard = compiled.entries[0].guard
    ran = []
    monkeypatch.setattr(tensor_watch, "_ORIGINAL", _DataSetMidway(tensor_watch._ORIGINAL,
                                                                   lambda: ran.append(guard.check(x))))
    net.w.data = torch.zeros(4, 4, dtype=torch.float64)
    monkeypatch.undo()
    assert ran == [True]  # the guard passed, on the old facts, while the assignment was under way
    assert not guard.check(x)  # now a float64 weight: not trusted
    for _ in range(2):
        _same(compiled, fn, torch.randn(3, 1))


def test_a_version_mismatch_calls_no_more_than_the_full_check(no_marks, monkeypatch):
    """Every parameter's version moved since the last check (a training loop): the check makes no more C
    calls, and no Python call, than one that remembers nothing."""
    from framejit.guards import codegen

    def check_of(model):
        def fn(x):
            return model(x)

        compiled = framejit.compile(fn, backend="eager")
        with torch.no_grad():
            compiled(x)
        return compiled.entries[0].guard.check

    x = torch.randn(4, 16)
    model = _mlp()
    remembering = check_of(model)
    with monkeypatch.context() as patch:  # not monkeypatch.undo(): that would also undo no_marks' patch
        patch.setattr(codegen, "_remembered_tensor_checks", lambda ordered: {})
        full = check_of(_mlp())
    with torch.no_grad():
        _calls(remembering, x)
        for p in model.parameters():
            p.add_(0.0)
        bumped = _calls(remembering, x)
        assert [name for kind, name in bumped if kind == "py"] == []
        assert sum(kind == "c" for kind, _ in bumped) <= sum(kind == "c" for kind, _ in _calls(full, x))
        assert [name for kind, name in _calls(remembering, x) if name == "stride"] == ["stride"]  # remembered


if __name__ == "__main__":
    pytest.main([__file__, "-q"])
