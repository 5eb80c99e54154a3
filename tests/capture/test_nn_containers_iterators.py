"""nn.ParameterDict in a forward, and dict/set iterators that cross a graph break (issue 11, new-user probe).

NOTE [Other modules' container methods] (capture/module_protocol.py): `for k in pdict`, `pdict[k]`,
`k in pdict`, `pdict.items()/values()/get()` were graph breaks, and the dict_keyiterator the break made
could not be passed to the resume function, so the rest of the forward ran wholly eagerly.
NOTE [Iterators stepped as Python] (capture/carried_loops.py): an iterator of a dict or set made before a
break (`it = iter(d)`; print(); `for k in it`) is stepped in Python by the resume function.
Each test compares with eager on fresh inputs over several calls and asserts no frame ran eagerly
(counts read as deltas: framejit.stats() is process-wide).
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, eager_frames


class Heads(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scales = torch.nn.ParameterDict({"s": torch.nn.Parameter(torch.ones(1) * 2),
                                              "t": torch.nn.Parameter(torch.arange(4.0))})

    def forward(self, x):
        for name in self.scales:
            x = x + self.scales[name]
        total = sum(v.sum() for v in self.scales.values())
        pairs = [k + str(v.shape[0]) for k, v in self.scales.items()]
        bias = self.scales.get("t") if "t" in self.scales else None
        missing = self.scales.get("zz", None) is None
        return x * len(self.scales) + total + (bias if bias is not None else 0) + missing, pairs


def test_parameter_dict_protocol_is_captured_and_tracks_new_keys():
    framejit.reset()
    model, backend, eager = Heads(), CountingBackend(), eager_frames()
    compiled = framejit.compile(model, backend=backend)
    for step in range(4):
        if step == 2:  # a key added after the first calls: the guards on its keys recompile
            model.scales["u"] = torch.nn.Parameter(torch.full((4,), 3.0))
        if step == 3:  # a parameter replaced by another of the same shape: read again, no stale value
            model.scales["s"] = torch.nn.Parameter(torch.full((1,), -1.0))
        x = torch.randn(4)
        out, pairs = compiled(x)
        want, want_pairs = model(x)
        torch.testing.assert_close(out, want)
        assert pairs == want_pairs
    assert eager_frames() == eager
    assert backend.graph_count == 2  # one per key set, no break


def test_parameter_dict_subscript_with_a_missing_key_raises_as_eager():
    framejit.reset()
    model = Heads()

    def read(x, key):
        return x + model.scales[key]

    compiled = framejit.compile(read, backend=CountingBackend())
    torch.testing.assert_close(compiled(torch.ones(4), "t"), torch.ones(4) + model.scales["t"])
    errors = []
    for call in (read, compiled):  # eager raises AttributeError (ParameterDict reads getattr(self, key))
        try:
            call(torch.ones(4), "nope")
        except Exception as e:  # noqa: BLE001 - compared below
            errors.append((type(e), str(e)))
    assert len(errors) == 2 and errors[0] == errors[1], errors


TABLE = {"a": 1.0, "bb": 2.0, "ccc": 4.0}
NAMES = {"x", "yy"}


def keys_then_print(x):
    it = iter(TABLE)
    print("step")
    for k in it:
        x = x + TABLE[k] * len(k)
    return x


def values_reversed_then_print(x):
    it = reversed(TABLE.values())
    print("step")
    return x + sum(v for v in it)


def items_partly_drawn(x):
    it = iter(TABLE.items())
    first = next(it)
    print("step")
    for k, v in it:
        x = x * v + len(k)
    return x + first[1]


def set_iterator_sorted(x):
    it = iter(NAMES)
    print("step")
    return x + len("".join(sorted(it)))


def test_dict_and_set_iterators_cross_a_break(capsys):
    for fn in (keys_then_print, values_reversed_then_print, items_partly_drawn, set_iterator_sorted):
        framejit.reset()
        backend, eager = CountingBackend(), eager_frames()
        compiled = framejit.compile(fn, backend=backend)
        for _ in range(2):
            x = torch.randn(3)
            torch.testing.assert_close(compiled(x), fn(x))
        assert eager_frames() == eager, fn.__name__
        assert backend.graph_count >= 1, fn.__name__
    assert capsys.readouterr().out == "step\n" * 16


class Gauss:
    pass


class Laplace:
    pass


SCALE_OF = {Gauss: 1.0, Laplace: 2.0}
PAIR_RULE = {(Gauss, Gauss): 3.0, (Gauss, Laplace): 5.0}


def by_class(x, dist):
    return x * SCALE_OF[type(dist)] + PAIR_RULE.get((Gauss, type(dist)), -1.0) + (type(dist) in SCALE_OF)


def test_dicts_keyed_by_classes_are_read_in_the_graph():
    """NOTE [Classes as dict keys]: a registry keyed by classes (torch.distributions.kl's _KL_MEMOIZE) was
    'non-constant keys'; the resume function after that break ran wholly eagerly."""
    framejit.reset()
    backend, eager = CountingBackend(), eager_frames()
    compiled = framejit.compile(by_class, backend=backend)
    try:
        for step, dist in enumerate([Gauss(), Gauss(), Laplace(), Gauss(), Laplace()]):
            if step == 3:  # the registry changes: read again, not a stale constant
                PAIR_RULE[(Gauss, Laplace)] = 7.0
                SCALE_OF[Gauss] = 0.5
            x = torch.randn(3)
            torch.testing.assert_close(compiled(x, dist), by_class(x, dist))
    finally:
        PAIR_RULE[(Gauss, Laplace)], SCALE_OF[Gauss] = 5.0, 1.0
    assert eager_frames() == eager
    assert 1 <= backend.graph_count <= 4


class cached_once:  # a non-data descriptor written in Python, like torch.distributions.utils.lazy_property
    def __init__(self, fn):
        self.fn = fn

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        value = self.fn(instance)
        setattr(instance, self.fn.__name__, value)
        return value


class Holder:
    def __init__(self, t):
        self.t = t

    @cached_once
    def doubled(self):
        return self.t * 2


def entropy_and_probs(logits):
    c = torch.distributions.Categorical(logits=logits, validate_args=False)
    return c.entropy(), c.probs * 2


def read_twice(h, x):
    return h.doubled + h.doubled + x


def test_non_data_descriptors_written_in_python_are_inlined():
    """NOTE [Non-data descriptors written in Python]: lazy_property's `probs` (Categorical.entropy) was a
    graph break; a user's caching descriptor reads, stores on the instance, and is read back from it."""
    framejit.reset()
    backend, eager = CountingBackend(), eager_frames()
    compiled = framejit.compile(entropy_and_probs, backend=backend)
    for _ in range(2):
        x = torch.randn(3, 4)
        torch.testing.assert_close(compiled(x), entropy_and_probs(x))
    assert backend.graph_count == 1
    compiled = framejit.compile(read_twice, backend=CountingBackend())
    kept = Holder(torch.ones(2))
    for h in (Holder(torch.randn(2)), kept, kept, Holder(torch.randn(2))):
        had = "doubled" in vars(h)
        x = torch.randn(2)
        got = compiled(h, x)
        assert "doubled" in vars(h)  # stored on the instance, as eager does
        want = read_twice(Holder(h.t), x) if not had else h.doubled * 2 + x
        torch.testing.assert_close(got, want)
    kept.doubled = torch.zeros(2)  # the instance's value is read, not the first call's
    torch.testing.assert_close(compiled(kept, torch.ones(2)), torch.ones(2))
    assert eager_frames() == eager
