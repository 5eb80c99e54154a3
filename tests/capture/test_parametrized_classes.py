"""Modules parametrized by torch.nn.utils.parametrize share compiled entries (NOTE [Parametrized classes
alike], capture/parametrized_classes.py), and every change of what the trace relied on still recompiles.

`weight_norm` gives every conv a class of its own; a frame called with many of them needed one entry per conv
and ran eagerly from the 9th on (the recompile limit, as stock torch.compile does). Each test calls compiled
and eager on fresh inputs and compares; the changes are made between calls: another parametrization, another
state of it, a property replaced, a class attribute added, a closure cell changed, parametrize's cache on.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.nn.utils import parametrize

import framejit
from tests.helpers import CountingBackend


def _conv(seed: int, norm: bool = True) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        conv = nn.Conv1d(3, 4, 3)
    return nn.utils.parametrizations.weight_norm(conv) if norm else conv


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w * self.factor


def _scaled(seed: int, factor: float) -> nn.Module:
    conv = _conv(seed, norm=False)
    parametrize.register_parametrization(conv, "weight", Scale(factor))
    return conv


def _apply(conv, x):
    return torch.relu(conv(x)) + 1


def _check(fn, convs, lengths=(9, 9, 12)) -> None:
    """`fn(conv, x)` compiled and eager agree for each conv, at changing lengths."""
    compiled = framejit.compile(fn, backend=CountingBackend())
    gen = torch.Generator().manual_seed(0)
    for length in lengths:
        for conv in convs:
            x = torch.randn(2, 3, length, generator=gen)
            want, got = fn(conv, x), compiled(conv, x)
            torch.testing.assert_close(got, want)


def test_weight_normed_convs_share_entries():
    """12 weight-normed convs through one frame, at two lengths: eager's values, no frame run eagerly, the
    graphs of 12 plain convs (before: one entry per conv, the 9th on ran eagerly)."""
    counts = []
    for norm in (False, True):
        backend = CountingBackend()
        compiled = framejit.compile(_apply, backend=backend)
        convs = [_conv(seed, norm) for seed in range(12)]
        before = framejit.stats()["eager_frames"]
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for length in (9, 11):
                for conv in convs:
                    x = torch.randn(2, 3, length, generator=gen)
                    torch.testing.assert_close(compiled(conv, x), _apply(conv, x))
        assert framejit.stats()["eager_frames"] == before
        counts.append(backend.graph_count)
    assert counts[1] <= counts[0]


def test_another_parametrization_recompiles():
    """The same layout of class (a property `weight`, parametrize's `__getstate__`), another parametrization
    module, then the same one with another factor."""
    _check(_apply, [_conv(0), _scaled(1, 2.0), _conv(2), _scaled(3, -3.0), _scaled(4, 2.0)])


def test_property_replaced_on_one_class():
    convs = [_conv(seed) for seed in range(3)]
    compiled = framejit.compile(_apply, backend=CountingBackend())
    x = torch.randn(2, 3, 9)
    for conv in convs:
        torch.testing.assert_close(compiled(conv, x), _apply(conv, x))
    type(convs[1]).weight = property(lambda self: self.parametrizations.weight.original1 * 0 + 0.5)
    for conv in convs:
        x = torch.randn(2, 3, 10)
        torch.testing.assert_close(compiled(conv, x), _apply(conv, x))


def test_class_attribute_added_on_one_class():
    convs = [_conv(seed) for seed in range(3)]
    compiled = framejit.compile(_apply, backend=CountingBackend())
    for conv in convs:
        x = torch.randn(2, 3, 9)
        torch.testing.assert_close(compiled(conv, x), _apply(conv, x))
    type(convs[2]).forward = lambda self, x: x[:, :2] * 5
    for conv in convs:
        x = torch.randn(2, 3, 9)
        torch.testing.assert_close(compiled(conv, x), _apply(conv, x))


def test_closure_cell_changed_on_one_class():
    """The property's `tensor_name` cell of one class names another parametrized tensor."""
    convs = []
    for seed in range(3):
        conv = _scaled(seed, 2.0)
        parametrize.register_parametrization(conv, "bias", Scale(-1.0))
        convs.append(conv)
    fn = lambda conv, x: conv.weight.sum() + x  # noqa: E731
    _check(fn, convs[:2], lengths=(4,))
    getter = type(convs[2]).__dict__["weight"].fget
    getter.__closure__[getter.__code__.co_freevars.index("tensor_name")].cell_contents = "bias"
    _check(fn, convs, lengths=(4, 5))


def test_class_taken_as_a_value_keeps_its_identity():
    """`type(conv)` and a class method are values: each call returns the conv's own."""
    seen: dict = {}

    def fn(conv, x):
        cls = type(conv)
        seen[cls] = seen.get(cls, 0) + 1
        return conv(x) * 2, cls, conv.__getstate__.__func__, len(seen)

    convs = [_conv(seed) for seed in range(3)]
    compiled = framejit.compile(fn, backend=CountingBackend())
    for conv in convs * 2:
        x = torch.randn(2, 3, 9)
        got = compiled(conv, x)
        assert got[1] is type(conv) and got[2] is type(conv).__dict__["__getstate__"]
        torch.testing.assert_close(got[0], conv(x) * 2)
    assert sorted(seen.values()) == [2, 2, 2] and set(seen) == {type(c) for c in convs}


def _same_kind_by_class_attr(a, b, x):
    return a(x) * 2 if isinstance(a, b.__class__) else a(x)


def _same_kind_by_type(a, b, x):
    return a(x) * 2 if isinstance(a, type(b)) else a(x)


HELD: dict = {}


def _same_kind_by_global(a, b, x):
    return a(x) * 2 if isinstance(a, HELD["kind"]) else a(x)


@pytest.mark.parametrize("fn", [_same_kind_by_class_attr, _same_kind_by_type, _same_kind_by_global])
def test_isinstance_of_another_conv_class(fn):
    """`isinstance(a, <b's class>)` is folded from the pinned types: once a class is a value, `a` called with
    an object of that very class must not match an entry traced for an alike class."""
    c0, c1 = _conv(0), _conv(1)
    HELD["kind"] = type(c1)
    compiled = framejit.compile(fn, backend=CountingBackend())
    for a, b in ((c0, c1), (c1, c1), (c0, c0), (c1, c0)):
        x = torch.randn(2, 3, 9)
        torch.testing.assert_close(compiled(a, b, x), fn(a, b, x))


def test_abc_registration_of_one_class():
    """`Marker.register(type(c1))` makes isinstance answer for that class alone."""
    import abc

    class Marker(abc.ABC):
        pass

    def fn(conv, x):
        return conv(x) * 2 if isinstance(conv, Marker) else conv(x)

    c0, c1 = _conv(0), _conv(1)
    Marker.register(type(c1))
    _check(fn, [c0, c1], lengths=(9,))


def test_cached_parametrizations():
    """parametrize.cached(): the property reads the cache, keyed by each module."""
    convs = [_conv(seed) for seed in range(3)]
    compiled = framejit.compile(_apply, backend=CountingBackend())
    with torch.no_grad():
        for conv in convs:
            x = torch.randn(2, 3, 9)
            torch.testing.assert_close(compiled(conv, x), _apply(conv, x))
        with parametrize.cached():
            for conv in convs * 2:
                x = torch.randn(2, 3, 9)
                torch.testing.assert_close(compiled(conv, x), _apply(conv, x))


def test_training_steps_after_deepcopy():
    """copy.deepcopy caches `__slotnames__` (a list) on each class it copies; gradients of the shared entries
    are each conv's own, and no frame runs eagerly (before: the lists' identities told the classes apart)."""
    import copy
    convs = [_conv(seed) for seed in range(5)]
    ref = copy.deepcopy(convs)
    compiled = framejit.compile(_apply, backend=CountingBackend())
    before = framejit.stats()["eager_frames"]
    gen = torch.Generator().manual_seed(0)
    for length in (9, 10):
        for conv, twin in zip(convs, ref):
            x = torch.randn(2, 3, length, generator=gen)
            compiled(conv, x).sum().backward()
            _apply(twin, x).sum().backward()
    for conv, twin in zip(convs, ref):
        for p, q in zip(conv.parameters(), twin.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    assert framejit.stats()["eager_frames"] == before


class Summable(nn.Linear):
    """`a + b` tries `__radd__` only when the two classes differ."""

    def __add__(self, other):
        return NotImplemented

    def __radd__(self, other):
        return self.weight.sum() * 10


def _summable(seed: int) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.utils.parametrizations.weight_norm(Summable(3, 2))


def test_operator_dispatch_between_parametrized_modules():
    """Traced with two classes (`__radd__` answers), then called with `a` and its deep copy (one class:
    no `__radd__` is tried, a TypeError): the entry must not take the copy's class as alike."""
    import copy

    def fn(a, b, x):
        return a + b + x

    a, other = _summable(0), _summable(1)
    twin = copy.deepcopy(a)
    copy.deepcopy(other)  # both classes get `__slotnames__`: alike but for the operator dispatch
    compiled = framejit.compile(fn, backend=CountingBackend())
    for left, right in ((a, other), (a, twin), (other, a)):
        x = torch.randn(2)
        try:
            want = fn(left, right, x)
        except TypeError:
            with pytest.raises(TypeError):
                compiled(left, right, x)
            continue
        torch.testing.assert_close(compiled(left, right, x), want)
