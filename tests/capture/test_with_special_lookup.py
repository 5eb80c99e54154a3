"""`with o:` calls type(o).__enter__/__exit__, as CPython's special method lookup does: instance attributes
of those names (mock-style patching) are ignored, and the class's methods replaced between calls are seen
(NOTE [Managers' methods looked up on the class])."""
import torch

import framejit

LOG = []


class CM:
    bonus = 6

    def __enter__(self):
        LOG.append("cls enter")
        return self.bonus

    def __exit__(self, *a):
        LOG.append("cls exit")


def _patched():
    o = CM()
    o.__enter__ = lambda: LOG.append("inst enter") or 60
    o.__exit__ = lambda *a: LOG.append("inst exit")
    return o


def _with(x, o):
    with o as w:
        y = x + w
    return y


def _run(fn, x, o):
    LOG.clear()
    return fn(x, o), list(LOG)


def test_instance_enter_and_exit_are_ignored():
    compiled = framejit.compile(_with, backend="eager")
    for n, bonus in ((2, 6), (3, 7), (4, 8)):
        CM.bonus = bonus
        x = torch.randn(n)
        (got, got_log), (want, want_log) = _run(compiled, x, _patched()), _run(_with, x, _patched())
        assert torch.equal(got, want) and torch.equal(got, x + bonus)
        assert got_log == want_log == ["cls enter", "cls exit"]
    CM.bonus = 6


def test_class_exit_replaced_between_calls():
    compiled = framejit.compile(_with, backend="eager")
    x = torch.randn(2)
    assert _run(compiled, x, CM())[1] == ["cls enter", "cls exit"]
    original = CM.__exit__
    CM.__exit__ = lambda self, *a: LOG.append("new exit")
    try:
        (got, got_log), (want, want_log) = _run(compiled, x, _patched()), _run(_with, x, _patched())
        assert torch.equal(got, want) and got_log == want_log == ["cls enter", "new exit"]
    finally:
        CM.__exit__ = original
