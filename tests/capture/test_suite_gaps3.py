"""Differential tests for idioms of PyTorch's Dynamo set tests (test_sets.py) and test_functions.py that
framejit traces: instances of plain set and frozenset subclasses made in the frame (NOTE [Plain set
subclasses]), with their types, operator results and guards."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, run_differential


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


class Tags(set):
    pass


class FrozenTags(frozenset):
    pass


class MoreTags(Tags):
    """A plain subclass of a plain subclass."""


def _describe(*values):
    return tuple((type(v).__name__, sorted(v) if isinstance(v, (set, frozenset)) else v) for v in values)


def test_plain_set_subclass_made_in_the_frame_behaves_as_the_base():
    def fn(x, word, extra):
        p, q = Tags(word), MoreTags("bef")
        p.add(extra)
        set.add(p, "z")
        union, diff, copy = p | q, Tags.__sub__(p, q), p.copy()
        q.discard("b")
        q.update(word)
        return (x * len(p) + len(q), _describe(p, q, union, diff, copy), p == set(p), "a" in p, p < union,
                Tags.issubset(diff, p), q)

    backend = run_differential(fn, lambda seed: (torch.randn(3), ["abc", "cd"][seed], ["q", "a"][seed]))
    assert backend.graph_count == 2  # fullgraph; one trace per (word, extra): they are constants


def test_plain_frozenset_subclass_made_in_the_frame_behaves_as_the_base():
    def fn(x, word):
        f = FrozenTags(word)
        g = f | {"z"}
        h = f.copy()
        return (x + len(f), _describe(f, g, h), "b" in f, FrozenTags.__contains__(f, "c"), f == frozenset(word),
                hash(f) == hash(frozenset(word)), f)

    backend = run_differential(fn, lambda seed: (torch.randn(3), ["abc", "bcd"][seed]))
    assert backend.graph_count == 2  # fullgraph


def test_returned_subclass_instance_is_new_each_call():
    def fn(x):
        return x + 1, Tags("ab"), FrozenTags("cd")

    compiled = framejit.compile(fn, backend="eager", fullgraph=True)
    first, second = compiled(torch.ones(1)), compiled(torch.ones(1))
    assert type(first[1]) is Tags and type(first[2]) is FrozenTags
    assert first[1] == {"a", "b"} and first[2] == frozenset("cd")
    assert first[1] is not second[1] and first[2] is not second[2]
    first[1].add("mutated")
    assert "mutated" not in compiled(torch.ones(1))[1]


def test_method_added_to_the_subclass_later_recompiles():
    class Local(set):
        pass

    def fn(x):
        s = Local("ab")
        return x + len(s.union("c"))

    x = torch.zeros(2)
    assert framejit.explain(fn)(x).graph_break_count == 0
    framejit.reset()
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    torch.testing.assert_close(compiled(x), fn(x))
    Local.union = lambda self, other: {1}
    torch.testing.assert_close(compiled(x), fn(x))  # 1, not 3
    assert fn(x).tolist() == [1.0, 1.0]


def test_subclass_with_its_own_methods_is_traced_with_them():
    class Shifted(set):
        def add(self, item):
            return super().add(item + 1)

        def contains(self, item):
            return True

    def fn(x, k):
        s = Shifted([1, 2])
        s.add(k)
        set.add(s, 10)  # the base's add, not the override
        return x + len(s), s == {1, 2, k + 1, 10}, s.contains(-5), sorted(s), s

    backend = run_differential(fn, lambda seed: (torch.randn(2), [3, 7][seed]))
    assert backend.graph_count == 2  # fullgraph, one trace per k


def test_method_of_a_set_subclass_changed_later_recompiles():
    class Shifted(set):
        def add(self, item):
            return super().add(item + 1)

    def fn(x):
        s = Shifted([1])
        s.add(5)
        return x + sum(s)

    compiled = framejit.compile(fn, backend="eager", fullgraph=True)
    x = torch.zeros(1)
    torch.testing.assert_close(compiled(x), fn(x))  # 1 + 6
    Shifted.add = lambda self, item: set.add(self, item * 10)
    torch.testing.assert_close(compiled(x), fn(x))  # 1 + 50
    assert fn(x).item() == 51.0


def test_subclass_defining_a_slot_is_not_taken_as_plain():
    class Shifted(set):
        def __contains__(self, item):
            return True

        def add(self, item):
            return super().add(item + 1)

    def fn(x):
        plain = Tags([5])
        s = Shifted([1, 2])
        s.add(3)
        return x + sum(s) + len(plain), sorted(s)

    run_differential(fn, lambda seed: (torch.randn(2),), fullgraph=False)
    framejit.reset()
    breaks = framejit.explain(fn)(torch.randn(2)).break_reasons
    assert "instance of" in breaks[0].explanation and "Shifted" in breaks[0].explanation
    assert not any("of Tags" in b.explanation for b in breaks)  # the plain Tags is traced, Shifted is not


def test_set_slots_read_as_bound_methods():
    def fn(x, word):
        s, f = set(word), frozenset("abc")
        return (x - len(s), s.__contains__("a"), f.__contains__("z"), frozenset.__contains__(f, "b"),
                s.__eq__(set(word)), f.__ne__(s), s.__len__(), sorted(s.__or__(f)), sorted(f.__and__(s)),
                s.__eq__([1]), s.__le__(set(word) | {"q"}))

    backend = run_differential(fn, lambda seed: (torch.randn(2), ["abc", "xa"][seed]))
    assert backend.graph_count == 2  # fullgraph


@pytest.mark.parametrize("call", ["symmetric_difference_update()", "add()", "remove('a', 'b')", "pop(1)",
                                  "clear(2)", "discard()"])
def test_set_mutator_with_wrong_arguments_raises_as_eager(call):
    namespace = {}
    exec(f"def fn(x):\n    s = set('abc')\n    try:\n        s.{call}\n    except TypeError as e:\n"
         f"        return x + 1, str(e), sorted(s)\n    return x, '', sorted(s)\n", namespace)
    run_differential(namespace["fn"], lambda seed: (torch.randn(2),))


def test_set_subclass_mutator_with_wrong_arguments_names_the_subclass():
    def fn(x):
        s = Tags("abc")
        try:
            s.symmetric_difference_update()
        except TypeError as e:
            return x + 1, str(e)
        return x, ""

    run_differential(fn, lambda seed: (torch.randn(2),))


def _double(x):
    return x * 2


def test_set_of_functions_from_outside_is_queried_and_guarded():
    def fn(x, s):
        if torch.amp._exit_autocast in s and "tag" in s:
            return x.sin(), _double in s
        return x.cos(), len(s)

    s = {torch._C._set_grad_enabled, "tag", torch.amp._exit_autocast}
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    for change in (None, lambda: s.add(_double), lambda: s.discard(torch.amp._exit_autocast), None):
        if change:
            change()
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x, s), fn(x, s))
    assert backend.graph_count == 3  # each change of the set is seen; the last call hits the third entry
    run_differential(fn, lambda seed: (torch.randn(2), [{_double, "tag"}, {torch.amp._exit_autocast, "tag"}][seed]))


def test_set_with_complex_and_nan_elements_from_outside():
    import math

    def fn(x, s):
        return x + 1 if "name" in s else x - 1, 1j in s, len(s)

    s = {"name", 3.5, 1j, math.nan}
    compiled = framejit.compile(fn, backend="eager", fullgraph=True)
    x = torch.randn(2)
    for change in (None, lambda: s.remove("name"), lambda: s.remove(1j)):
        if change:
            change()
        torch.testing.assert_close(compiled(x, s), fn(x, s))


def test_set_of_functions_is_not_iterated_by_the_trace():
    def fn(x, s):
        if _double in s:
            x = x + 1
        for f in s:
            if callable(f):
                x = f(x)
        return x

    run_differential(fn, lambda seed: (torch.randn(2), {_double}), fullgraph=False)
    framejit.reset()
    explained = framejit.explain(fn)(torch.randn(2), {_double, torch.sin})
    assert any("iteration over a set of functions" in b.explanation for b in explained.break_reasons)


def test_returned_set_of_strings_iterates_as_eager():
    # NOTE [Set templates as code constants]: under any hash seed some of these words give a table that
    # a frozenset constant rebuilt by the code constructor (string interning) would lay out differently
    import random
    import string

    rng = random.Random(7)
    words = ["".join(rng.sample(string.ascii_letters, rng.randint(2, 7))) for _ in range(12)]
    words += ["".join(rng.sample(string.ascii_letters, rng.randint(8, 12))) for _ in range(12)]
    mismatched = []
    for word in words:
        def fn(x, word=word):
            return x + 1, set(word), Tags(word)

        framejit.reset()
        compiled = framejit.compile(fn, backend="eager", fullgraph=True)
        expected, actual = fn(torch.ones(1)), compiled(torch.ones(1))
        if [list(s) for s in expected[1:]] != [list(s) for s in actual[1:]]:
            mismatched.append((word, list(expected[1]), list(actual[1])))
    assert not mismatched
