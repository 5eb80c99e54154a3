"""`model.train(mode)` / `model.eval()` inside a compiled function (NOTE [Flag stores during module walks]
in capture/side_effects.py): Module.train walks `self.children()` lazily and sets `training` on each child
as it goes; those flag stores no longer stop the walk, so the call is captured with the forward after it,
with every module's `training` left as eager leaves it. Stores that change what a walk yields still break."""
from __future__ import annotations

import torch
import torch.nn as nn

import framejit
from tests.helpers import CountingBackend, logged_breaks


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.norm = nn.BatchNorm1d(4)
        self.inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())

    def forward(self, x):
        y = self.norm(self.lin(x))
        return self.inner(y) if self.training else self.inner(y).detach() * 0.5


def _modes(m):
    return [(name, mod.training) for name, mod in m.named_modules()]


def _run(mode_call):
    torch.manual_seed(0)
    eager_model = Block()
    compiled_model = Block()
    compiled_model.load_state_dict(eager_model.state_dict())

    def step(model, x, train):
        mode_call(model, train)
        return model(x)

    be = CountingBackend()
    compiled_step = framejit.compile(step, backend=be)
    with logged_breaks() as breaks:
        for train in (True, False, True, False):
            x = torch.randn(3, 4)
            want = step(eager_model, x, train)
            got = compiled_step(compiled_model, x, train)
            torch.testing.assert_close(got, want)
            assert _modes(compiled_model) == _modes(eager_model)
            torch.testing.assert_close(compiled_model.norm.running_mean, eager_model.norm.running_mean)
    return be, breaks


def test_train_with_a_mode_argument_is_captured_with_the_forward():
    be, breaks = _run(lambda m, train: m.train(train))
    assert breaks == []
    assert be.graph_count == 2  # one per mode


def test_eval_and_train_calls_are_captured():
    be, breaks = _run(lambda m, train: m.train() if train else m.eval())
    assert breaks == []
    assert be.graph_count == 2


def test_flags_set_while_drawing_children_are_read_back_in_the_same_graph():
    m = Block()

    def f(x):
        seen = []
        for child in m.children():
            child.training = not child.training
            seen.append(child.training)
        return x * sum(seen), seen

    be = CountingBackend()
    cf = framejit.compile(f, backend=be)
    with logged_breaks() as breaks:
        for _ in range(2):
            x = torch.randn(2)
            before = _modes(m)
            want = f(x)
            after_eager = _modes(m)
            # put the flags back and run compiled from the same state
            for (name, mode), (_, mod) in zip(before, m.named_modules()):
                mod.training = mode
            got = cf(x)
            torch.testing.assert_close(got[0], want[0])
            assert got[1] == want[1] and _modes(m) == after_eager
    assert breaks == []


def test_a_store_that_changes_the_walk_still_breaks():
    m = Block()

    def f(x):
        names = []
        for name, child in m.named_children():
            names.append(name)
            if name == "lin":
                m.inner = None  # removes a child the walk has not reached yet
        return x + len(names), names

    cf = framejit.compile(f, backend="eager")
    x = torch.randn(2)
    want = f(x)
    m.inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    got = cf(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1] == ["lin", "norm"]


class Annealed(nn.Module):
    def __init__(self):
        super().__init__()
        self.temperature = 1.0

    def forward(self, x):
        self.temperature = self.temperature * 0.5  # a computed float stored on the module every call
        return x / self.temperature


def test_a_float_attribute_updated_every_call_does_not_recompile_every_call():
    # e565e49's flag-store check read the stored value with as_constant(), which specialised the computed
    # float: every call recompiled (8 calls, 8 graphs; before e565e49 and stock torch.compile: 2)
    eager_model, compiled_model = Annealed(), Annealed()
    be = CountingBackend()
    cm = framejit.compile(compiled_model, backend=be)
    for _ in range(8):
        x = torch.randn(3)
        torch.testing.assert_close(cm(x), eager_model(x))
        assert compiled_model.temperature == eager_model.temperature
    assert be.graph_count == 2  # constant first, then the float as a graph input
