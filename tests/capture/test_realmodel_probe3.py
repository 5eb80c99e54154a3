"""Defects found by the fifth new-user probe of real library code (issue 11, helper h11g), each reduced to a
small program. Differential: eager vs compiled on fresh inputs over several calls and shapes, with graph and
break counts where capturing whole is the point, and no frame run wholly eagerly (a delta of
framejit.stats()["eager_frames"]).
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import heapq
import inspect
import itertools
import operator

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same, eager_frames


def _explain_breaks(fn, *args) -> int:
    return framejit.explain(fn)(*args).graph_break_count


# ---- functools.wraps on a function made inside the compiled region ------------------------------------------

def _scaled(factor):
    """A decorator factory as libraries write them (torch.func.jacrev's wrapper_fn, transformers'
    can_return_tuple): the wrapper is made, and `functools.wraps` copies the wrapped function's attributes
    onto it, while the compiled code runs."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs) * factor
        return wrapper
    return deco


def _tagged(y: torch.Tensor) -> torch.Tensor:
    "Sine of y."
    return y.sin()


_tagged.tag = "sin"  # copied into the wrapper's __dict__ by update_wrapper


def _decorate_and_call(x, factor):
    g = _scaled(factor)(_tagged)
    sig = inspect.signature(g)  # follows __wrapped__
    bonus = 1.0 if g.__name__ == "_tagged" and g.tag == "sin" and g.__wrapped__ is _tagged else 0.0
    return g(x) + bonus + len(sig.parameters) + len(g.__doc__)


def test_functools_wraps_inside_the_compiled_region_is_one_graph():
    """`update_wrapper` runs `setattr(wrapper, '__module__', ...)` on the new function: this was a graph
    break ("assignment to the attribute '__module__' of Function(...)") at every such decorator."""
    backend = CountingBackend()
    compiled = framejit.compile(_decorate_and_call, backend=backend)
    before = eager_frames()
    for n, factor in ((3, 2.0), (5, 2.0), (4, 2.0), (4, 3.0)):
        x = torch.randn(n)
        assert_same(compiled(x, factor), _decorate_and_call(x, factor))
    assert eager_frames() == before
    assert _explain_breaks(_decorate_and_call, torch.randn(3), 2.0) == 0
    assert backend.graph_count == 3  # static, then a dynamic size, then a dynamic factor (NOTE [Dynamic floats])


def _make_wrapper(x):
    def inner(y: torch.Tensor, k: int = 2) -> torch.Tensor:
        """inner's doc"""
        return y * k
    inner.calls = x.shape[0]
    w = functools.wraps(inner)(lambda *a: inner(*a) + 1)
    w.extra = x + 1  # a tensor in the function's __dict__
    return w, [w], w(x)


def _function_facts(fn):
    return (fn.__name__, fn.__qualname__, fn.__module__, fn.__doc__, fn.__annotations__, sorted(fn.__dict__),
            fn.calls, fn.__wrapped__.__name__)


def test_a_wrapper_made_inside_the_compiled_region_escapes_with_its_attributes():
    """The wrapper is returned: it must be rebuilt with what update_wrapper stored (name, qualname, module,
    doc, annotations, the wrapped function's __dict__ entries, __wrapped__, a tensor stored on it), once:
    the same object wherever it is returned, as in eager."""
    backend = CountingBackend()
    compiled = framejit.compile(_make_wrapper, backend=backend)
    before = eager_frames()
    for n in (3, 5, 3):
        x = torch.randn(n)
        w_eager, ws_eager, out_eager = _make_wrapper(x)
        w, ws, out = compiled(x)
        assert_same(out, out_eager)
        assert ws[0] is w
        assert _function_facts(w) == _function_facts(w_eager)
        assert_same(w.extra, w_eager.extra)
        z = torch.randn(n)
        assert_same(w(z), w_eager(z))  # the rebuilt closure still calls the rebuilt inner
    assert eager_frames() == before
    assert _explain_breaks(_make_wrapper, torch.randn(3)) == 0
    assert backend.graph_count == 2


def _rename(x, name):
    def f(y):
        return y + 1
    f.__name__ = name  # CPython: TypeError unless a str
    return f(x), f.__name__


def test_stores_cpython_rejects_raise_the_same_error():
    backend = CountingBackend()
    compiled = framejit.compile(_rename, backend=backend)
    x = torch.randn(2)
    assert compiled(x, "g")[1] == "g"
    with pytest.raises(TypeError, match="__name__ must be set to a string object"):
        _rename(x, 3)
    with pytest.raises(TypeError, match="__name__ must be set to a string object"):
        compiled(x, 3)
    assert_same(compiled(torch.ones(4), "h"), _rename(torch.ones(4), "h"))


def _wrapper_across_a_break(x):
    g = _scaled(2.0)(_tagged)
    g.seen = x.sum()
    print("between")  # a graph break: g crosses it with its attributes
    return g(x) + g.seen, g.__name__, g.tag


def test_a_wrapper_with_stored_attributes_crosses_a_graph_break(capsys):
    backend = CountingBackend()
    compiled = framejit.compile(_wrapper_across_a_break, backend=backend)
    before = eager_frames()
    for n in (3, 4):
        x = torch.randn(n)
        expected = _wrapper_across_a_break(x)
        assert_same(compiled(x), expected)
    assert eager_frames() == before
    assert capsys.readouterr().out == "between\n" * 4
    assert backend.graph_count == 4  # before and after the print, static then with a dynamic size
    assert _explain_breaks(_wrapper_across_a_break, torch.randn(3)) == 1  # the print only


# ---- a comprehension whose loop runs as Python keeps what it built -----------------------------------------

def _list_comp(x, items):
    it = iter(items)
    head = [(i, e) for i, e in zip(range(2), it)]  # `it` is read again below: the zip runs as Python
    return x + len(head), head, next(it)


def _dict_comp(x, items):
    it = iter(items)
    head = {i: e for i, e in zip(range(2), it)}
    return x + len(head), head, next(it)


def _set_comp(x, items):
    it = iter(items)
    head = {e for _, e in zip(range(2), it)}
    return x + len(head), sorted(head), next(it)


@pytest.mark.parametrize("fn", [_list_comp, _dict_comp, _set_comp], ids=["list", "dict", "set"])
def test_a_comprehension_stepped_as_python_keeps_its_items(fn):
    """On 3.11 the comprehension is a function whose loop, over a zip made by Python at an earlier break,
    is stepped in Python: its body became a resume function taking the half-built list as an argument, and
    LIST_APPEND/MAP_ADD/SET_ADD wrote only into the trace's copy of it: the list came back empty, silently
    (heapq.nlargest(n, ...) and Counter.most_common(n) returned [])."""
    compiled = framejit.compile(fn, backend=CountingBackend())
    before = eager_frames()
    for items in (["a", "b", "c"], ["d", "e", "f", "g"]):
        x = torch.randn(2)
        assert_same(compiled(x, items), fn(x, items))
    assert eager_frames() == before


# ---- collections.Counter, operator getters, max/min with key= -----------------------------------------------

def _count(x, tokens):
    c = collections.Counter(tokens)
    c.update(tokens[:1])
    c.update({"b": 2})
    c["q"] += 1  # absent: Counter.__missing__ answers 0
    ranked = c.most_common()
    best = max(c.items(), key=operator.itemgetter(1))
    least = min(c, key=lambda k: (c[k], k))
    return x * c["a"] + c["zz"] + c.total(), dict(c), ranked, best, least, c


def test_counter_made_inside_the_compiled_region_is_one_graph():
    """collections.Counter(...) broke at `_collections._count_elements` (a C function), `c[absent]` raised
    KeyError in the trace (Counter.__missing__ not called: the frame ran wholly eagerly), dict(c) crashed the
    tracer (eager frame), operator.itemgetter and max(key=) were breaks."""
    backend = CountingBackend()
    compiled = framejit.compile(_count, backend=backend)
    before = eager_frames()
    for tokens in (["a", "b", "a", "c"], ["a", "c", "c", "d", "a"]):
        for n in (3, 4):
            x = torch.randn(n)
            got, expected = compiled(x, list(tokens)), _count(x, list(tokens))
            assert_same(got[0], expected[0])
            assert got[1:5] == expected[1:5]
            assert type(got[5]) is collections.Counter and got[5] == expected[5]
    assert eager_frames() == before
    assert _explain_breaks(_count, torch.randn(3), ["a", "b"]) == 0
    assert backend.graph_count == 3  # static, a dynamic size, then the other token list (guarded by value)


def _read_counts(x, counts):
    return x * counts["a"] + counts["missing"]


def test_counter_from_outside_answers_absent_keys_through_missing():
    """`counts["missing"]` on a Counter passed in was a graph break ("__missing__ of a Counter"); the
    absence is guarded with the contents, so adding the key later recompiles."""
    backend = CountingBackend()
    compiled = framejit.compile(_read_counts, backend=backend)
    before = eager_frames()
    counts = collections.Counter("aab")
    x = torch.randn(3)
    assert_same(compiled(x, counts), _read_counts(x, counts))
    counts["missing"] = 5
    assert_same(compiled(x, counts), _read_counts(x, counts))
    del counts["missing"]
    assert_same(compiled(x, counts), _read_counts(x, counts))
    assert eager_frames() == before
    assert _explain_breaks(_read_counts, x, collections.Counter("ab")) == 0


_SECOND = operator.itemgetter(1)  # a module-level getter, as collections and heapq keep them


def _extremes(x, pairs, names):
    by_second = max(pairs, key=_SECOND)  # ties: the first maximal item, as CPython keeps it
    smallest = min(pairs, key=operator.itemgetter(1, 0))
    longest = max(*names, key=len)
    fallback = max([], key=len, default=None)
    ordered = sorted(pairs, key=_SECOND, reverse=True)
    return x * by_second[1] + smallest[1], by_second, smallest, longest, fallback, ordered


def test_max_min_and_sorted_with_a_key_are_captured():
    backend = CountingBackend()
    compiled = framejit.compile(_extremes, backend=backend)
    before = eager_frames()
    for pairs, names in (([("a", 2), ("b", 3), ("c", 3)], ["xy", "z", "uv"]), ([("d", 1), ("e", 0)], ["p", "qr"])):
        x = torch.randn(2)
        assert_same(compiled(x, pairs, names), _extremes(x, pairs, names))
    assert eager_frames() == before
    assert _explain_breaks(_extremes, torch.randn(2), [("a", 2)], ["xy", "z"]) == 0
    with pytest.raises(ValueError):
        compiled(torch.randn(2), [], ["a", "b"])  # max() of an empty sequence, with key=
    with pytest.raises(TypeError):
        framejit.compile(lambda x: max(1, 2, default=0) + x)(torch.randn(2))


def _top(x, tokens, n):
    counts = collections.Counter(tokens)
    return (x * len(counts), counts.most_common(n), heapq.nsmallest(n, tokens), heapq.nlargest(n, iter(tokens)),
            heapq.nlargest(n, tokens, key=len))


def test_most_common_and_heapq_n_largest_are_captured():
    """Counter.most_common(n) and heapq.nlargest/nsmallest for n < len broke at `_heapq.heapify` and at a zip
    whose iterator a later loop reads (before bde9043 that path even returned [] silently). Ties keep their
    first-seen order, as heapq's heap does."""
    backend = CountingBackend()
    compiled = framejit.compile(_top, backend=backend)
    before = eager_frames()
    for tokens, n in ((["a", "bb", "a", "c", "dd", "c", "e"], 2), (["x", "y", "yy", "x", "z"], 3),
                      (["a", "b"], 0), (["q", "r", "q"], 5)):
        x = torch.randn(2)
        assert_same(compiled(x, list(tokens), n), _top(x, list(tokens), n))
    assert eager_frames() == before
    assert _explain_breaks(_top, torch.randn(2), ["a", "b", "a", "c"], 2) == 0


# ---- binary operators written in Python ----------------------------------------------------------------------

class _Vec:
    def __init__(self, t):
        self.t = t

    def __add__(self, other):
        if isinstance(other, _Vec):
            return _Vec(self.t + other.t)
        if isinstance(other, (int, float)):
            return _Vec(self.t + other)
        return NotImplemented

    def __radd__(self, other):
        return _Vec(other - self.t)

    def __mul__(self, k):
        return _Vec(self.t * k)

    __rmul__ = __mul__

    def __iadd__(self, other):
        self.t = self.t + 10 * (other.t if isinstance(other, _Vec) else other)
        return self


class _Shifted(_Vec):
    def __radd__(self, other):  # a subclass's own reflected method runs before the left operand's __add__
        return _Shifted(self.t - 100)


class _Plain:
    pass


def _vector_math(x, k):
    a, b = _Vec(x), _Vec(x * 2)
    acc = _Vec(x)
    acc += a
    acc += k
    mixed = a + _Shifted(x)
    return (a + b).t, (k + a).t, (a * k).t, (k * a).t, acc.t, type(mixed).__name__, mixed.t


def _counter_sums(x, left, right):
    both = collections.Counter(left) + collections.Counter(right)
    only = collections.Counter(left) - collections.Counter(right)
    return x * len(both), both, only, collections.Counter(left) | collections.Counter(right)


def test_binary_operators_of_python_classes_are_inlined():
    """`a + b` where a class defines __add__/__radd__/__iadd__ in Python was a graph break ("add on
    New(V) and New(V)"): CPython's order is kept (a subclass's reflected method first, NotImplemented passes
    on, `+=` tries __iadd__), and operands no method accepts raise eager's TypeError."""
    backend = CountingBackend()
    compiled = framejit.compile(_vector_math, backend=backend)
    before = eager_frames()
    for n, k in ((3, 2), (4, 2), (4, 3)):
        x = torch.randn(n)
        assert_same(compiled(x, k), _vector_math(x, k))
    counted = framejit.compile(_counter_sums, backend=backend)
    for left, right in (("aab", "bc"), ("xyzx", "x")):
        x = torch.randn(2)
        got, expected = counted(x, left, right), _counter_sums(x, left, right)
        assert_same(got[0], expected[0])
        assert got[1:] == expected[1:] and all(type(c) is collections.Counter for c in got[1:])
    assert eager_frames() == before
    assert _explain_breaks(_vector_math, torch.randn(3), 2) == 0
    assert _explain_breaks(_counter_sums, torch.randn(3), "ab", "b") == 0
    plain = framejit.compile(lambda x: (_Plain() + _Plain(), x))
    with pytest.raises(TypeError, match="unsupported operand"):
        plain(torch.randn(2))


class _Key:
    def __init__(self, k):
        self.k = k

    def __lt__(self, other):
        return self.k < other.k if isinstance(other, _Key) else NotImplemented

    def __eq__(self, other):
        return isinstance(other, _Key) and self.k == other.k

    __hash__ = None

    def __neg__(self):
        return _Key(-self.k)


class _Later(_Key):
    def __gt__(self, other):  # the subclass's reflected method runs first for `_Key(..) < _Later(..)`
        return "later"


@dataclasses.dataclass(order=True)
class _Point:
    a: int
    b: int


def _comparisons(x, i, j):
    p, q = _Point(i, j), _Point(i, j + 1)
    facts = (_Key(i) < _Key(j), _Key(i) == _Key(j), _Key(i) != _Key(j), _Key(i) > _Key(j), p < q, p == q, p >= q,
             _Key(i) == None, _Key(i) < _Later(j), (-_Key(i)).k, _Point(i, j) != p)  # noqa: E711
    return x * sum(1 for f in facts if f is True), facts


def test_comparisons_and_unary_operators_of_python_classes_are_inlined():
    """`a < b` / `a == b` with __lt__/__eq__ written in Python (dataclass(order=True), key classes) and `-a`
    with __neg__ were graph breaks ("comparison lt of New(V) and New(V)", "neg of New(V)")."""
    backend = CountingBackend()
    compiled = framejit.compile(_comparisons, backend=backend)
    before = eager_frames()
    for i, j in ((1, 2), (2, 2), (3, 1)):
        x = torch.randn(3)
        assert_same(compiled(x, i, j), _comparisons(x, i, j))
    assert eager_frames() == before
    assert _explain_breaks(_comparisons, torch.randn(3), 1, 2) == 0
    ordered = framejit.compile(lambda x: (x, _Key(1) <= _Key(2)))  # no __le__, object's answers NotImplemented
    with pytest.raises(TypeError, match="not supported between instances"):
        ordered(torch.randn(2))
    negated = framejit.compile(lambda x: (x, -_Point(1, 2)))
    with pytest.raises(TypeError, match="bad operand type for unary -"):
        negated(torch.randn(2))


def _elements(x, tokens, weights):
    counts = collections.Counter(tokens)
    flat = sorted(counts.elements())  # chain.from_iterable(starmap(repeat, items))
    scaled = list(itertools.starmap(lambda w, k: w * k, zip(weights, range(1, 4))))
    padded = list(itertools.repeat("pad", len(tokens) - 2))
    return x * len(flat) + sum(scaled), flat, scaled, padded


def test_counter_elements_starmap_and_repeat_are_captured():
    """itertools.starmap and itertools.repeat (Counter.elements) were breaks ("creating an instance of
    starmap", "iteration over a chain")."""
    backend = CountingBackend()
    compiled = framejit.compile(_elements, backend=backend)
    before = eager_frames()
    for tokens, weights in ((["a", "b", "a"], [1.0, 2.0, 3.0]), (["c", "c", "d", "e"], [0.5, 1.5, 2.5])):
        x = torch.randn(2)
        assert_same(compiled(x, list(tokens), list(weights)), _elements(x, list(tokens), list(weights)))
    assert eager_frames() == before
    assert _explain_breaks(_elements, torch.randn(2), ["a", "b", "a"], [1.0, 2.0, 3.0]) == 0


class _Logged:
    def __init__(self, k, log):
        self.k, self.log = k, log

    def __lt__(self, other):
        self.log.append((self.k, other.k))  # the order of comparisons is observable
        return self.k < other.k


def _ordering(x, ks):
    log = []
    items = [_Logged(k, log) for k in ks]
    by_self = [i.k for i in sorted(items)]
    by_key = [p.a for p in sorted([_Point(k % 3, k) for k in ks], key=lambda p: p, reverse=True)]
    top, low = max(_Point(k % 2, k) for k in ks), min(items, key=lambda i: i)
    return x * top.b + low.k, by_self, by_key, log


def test_sorted_max_and_min_of_objects_compare_as_eager():
    """sorted()/max()/min() of objects whose class orders them in Python were breaks ("sorted() of
    non-constant items"; max() said "compares tensor data"). CPython's own sort runs over stand-ins whose
    `<` is the traced comparison, so the comparisons happen in eager's order (the log) and give its result."""
    backend = CountingBackend()
    compiled = framejit.compile(_ordering, backend=backend)
    before = eager_frames()
    for ks in ([3, 1, 2, 5, 4], [2, 2, 7, 0]):
        x = torch.randn(2)
        assert_same(compiled(x, list(ks)), _ordering(x, list(ks)))
    assert eager_frames() == before
    assert _explain_breaks(_ordering, torch.randn(2), [3, 1, 2]) == 0
    mixed = framejit.compile(lambda x: (x, sorted([_Key(1), 2])))
    with pytest.raises(TypeError):
        mixed(torch.randn(2))


def _getter_across_a_break(x, pairs):
    second = operator.itemgetter(1)
    print("between")  # the getter crosses the break: a new one reaches the resume function on every call
    return x * max(pairs, key=second)[1], second


def test_a_getter_crossing_a_break_does_not_recompile_per_call(capsys):
    """The getter the transformed code makes anew on each call reached the resume function guarded by
    identity: every call recompiled, until the recompile limit ran the resume function eagerly."""
    backend = CountingBackend()
    compiled = framejit.compile(_getter_across_a_break, backend=backend)
    before = eager_frames()
    for _ in range(10):
        x = torch.randn(3)
        got, expected = compiled(x, [("a", 1), ("b", 2)]), _getter_across_a_break(x, [("a", 1), ("b", 2)])
        assert_same(got[0], expected[0])
        assert type(got[1]) is operator.itemgetter and got[1](("p", "q")) == "q"
    assert eager_frames() == before
    assert backend.graph_count == 1  # the code after the print, once (nothing before it is a tensor op)
    capsys.readouterr()


def _sort_in_place(x, ks, outside):
    log = []
    items = [_Logged(k, log) for k in ks]
    items.sort()
    by_key = [_Logged(k, log) for k in ks]
    by_key.sort(key=lambda i: i, reverse=True)
    outside.sort(key=lambda p: p)  # a list from outside, sorted in place: replayed after the graph
    return x + len(log), [i.k for i in items], [i.k for i in by_key], log


def test_list_sort_of_objects_compares_as_eager():
    """`lst.sort()` / `lst.sort(key=...)` of objects ordered in Python were breaks ("sort() over non-constant
    items", "list.sort() with keys that are not constants")."""
    backend = CountingBackend()
    compiled = framejit.compile(_sort_in_place, backend=backend)
    before = eager_frames()
    for ks in ([3, 1, 2], [5, 4, 4, 1]):
        x = torch.randn(2)
        mine, theirs = [_Point(k % 2, k) for k in ks], [_Point(k % 2, k) for k in ks]
        assert_same(compiled(x, list(ks), mine), _sort_in_place(x, list(ks), theirs))
        assert mine == theirs
    assert eager_frames() == before
    assert _explain_breaks(_sort_in_place, torch.randn(2), [3, 1, 2], [_Point(1, 1), _Point(0, 2)]) == 0


class _Signed:
    def __init__(self, v):
        self.v = v

    def __abs__(self):
        return _Signed(abs(self.v))


def test_abs_of_a_python_class_is_inlined():
    """abs(obj) with a Python __abs__ was a graph break ("abs of New(...)"); without one, eager's TypeError."""
    fn = lambda x, k: x * abs(_Signed(k)).v  # noqa: E731
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    before = eager_frames()
    for k in (-2, 3):
        x = torch.randn(2)
        assert_same(compiled(x, k), fn(x, k))
    assert eager_frames() == before
    assert _explain_breaks(fn, torch.randn(2), -2) == 0
    with pytest.raises(TypeError, match=r"bad operand type for abs\(\)"):
        framejit.compile(lambda x: (x, abs(_Plain())))(torch.randn(2))


def _counter_relations(x, a, b):
    ca, cb = collections.Counter(a), collections.Counter(b)
    return x + len(ca), ca == cb, ca != cb, ca <= collections.Counter(a + b), ca < cb


def test_counter_comparisons_are_inlined():
    """Counter's ==, !=, <, <= are Python methods of a dict subclass: they were graph breaks."""
    compiled = framejit.compile(_counter_relations, backend=CountingBackend())
    before = eager_frames()
    for a, b in (("aab", "aba"), ("ab", "b"), ("a", "aa")):
        x = torch.randn(2)
        assert_same(compiled(x, a, b), _counter_relations(x, a, b))
    assert eager_frames() == before
    assert _explain_breaks(_counter_relations, torch.randn(2), "aab", "aba") == 0
