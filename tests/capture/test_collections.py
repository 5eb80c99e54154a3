"""collections mappings, dict views and functools.partial objects made inside the compiled region.

Differential: each program runs eagerly and compiled on fresh inputs (several seeds); results, printed
output and the state of the inputs must match, and the graph count is asserted.
"""
from __future__ import annotations

import collections
import functools

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, run_differential


def _one(seed):
    return (torch.randn(3),)


def _two(seed):
    return (torch.randn(3), torch.randn(3))


class PlainOrdered(collections.OrderedDict):
    pass


class PlainDict(dict):
    pass


class Overriding(dict):
    def __getitem__(self, key):
        return 0


# ---- OrderedDict / defaultdict / fromkeys --------------------------------------------------------------
def test_ordered_dict_construction_and_update():
    def fn(x, y):
        pairs = [("a", x), ("b", x + 1)]
        od = collections.OrderedDict(pairs, c=y)
        od["a"] = x * 3
        od.update({"b": y - 1}, d=y * 2)
        od.update(zip("ce", [x + 3, y + 4]))
        copy = od.copy()
        copy["a"] = y
        return od, copy, list(od), isinstance(od, collections.OrderedDict), isinstance(copy, dict)
    assert run_differential(fn, _two).graph_count == 1


def test_ordered_dict_move_to_end_and_popitem():
    def fn(x):
        od = collections.OrderedDict(a=x, b=x + 1, c=x + 2)
        od.move_to_end("a")
        od.move_to_end("c", last=False)
        k1, v1 = od.popitem()
        k2, v2 = od.popitem(last=False)
        d = {"p": x, "q": x * 2}
        k3, v3 = d.popitem()
        return od, (k1, k2, k3), v1 + v2 + v3, list(od.keys())
    assert run_differential(fn, _one).graph_count == 1


def test_popitem_and_move_to_end_errors_match_eager():
    def empty(x):
        return collections.OrderedDict().popitem(), x

    def missing(x):
        od = collections.OrderedDict(a=x)
        od.move_to_end("zz")
        return od

    run_differential(empty, _one, fullgraph=False)
    run_differential(missing, _one, fullgraph=False)


def test_defaultdict_factories():
    def fn(x):
        lists = collections.defaultdict(list)
        lists["a"].append(x)
        lists["a"].append(x + 1)
        lists["b"].append(x * 2)
        counts = collections.defaultdict(int)
        for key in ("u", "v", "u"):
            counts[key] += 1
        made = collections.defaultdict(lambda: x.sin())
        first = made["k"]
        return lists, counts, first, made, lists.default_factory is list, "zz" in lists
    assert run_differential(fn, _one).graph_count == 1


def test_defaultdict_without_factory_raises_key_error():
    def fn(x):
        d = collections.defaultdict(None, a=x)
        return d["missing"]
    run_differential(fn, _one, fullgraph=False)


def test_fromkeys_of_each_mapping():
    def fn(x, y):
        names = ["a", "b"]
        d = dict.fromkeys(names)
        d1 = dict.fromkeys(d, x + 1)
        d2 = collections.defaultdict.fromkeys(iter(d1), x - 2)
        d3 = collections.OrderedDict.fromkeys(tuple(names), value=y)
        d2.setdefault("c", 10)
        return d1["a"] * d2["b"] + d2["a"] + d3["a"] + d3["b"], d, d2, d3, d1["a"] is d1["b"]
    assert run_differential(fn, _two).graph_count == 1


def test_plain_dict_subclasses_are_dicts():
    def fn(x):
        a = PlainOrdered(sample=x + 1)
        b = PlainDict([("k", x)], z=2)
        b["w"] = x * 3
        return a, b, type(a).__name__, list(b.items())[0][0]
    assert run_differential(fn, _one).graph_count == 1


def test_overriding_dict_subclass_is_not_modelled_as_a_dict():
    def fn(x):
        d = Overriding(a=1)
        return x + d["a"]
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), fn(x))  # 0 added, as eager


# ---- dict views are live ---------------------------------------------------------------------------
def test_views_see_later_mutation():
    def fn(x):
        d = {3: x}
        keys, values, items = d.keys(), d.values(), d.items()
        d[4] = x + 1
        d[3] = x * 2
        other = {3: 2, 4: "aa"}
        return (3 in keys, 4 in keys, 5 in keys, other.keys() == keys, len(values), list(values),
                [k for k, _ in items], bool(keys))
    assert run_differential(fn, _one).graph_count == 1


def test_view_is_not_subscriptable():
    def fn(x):
        return {"a": x}.keys()[0]
    run_differential(fn, _one, fullgraph=False)


def test_view_stays_live_across_a_graph_break():
    def fn(x, n):
        d = {"a": x}
        keys = d.keys()
        print("break")
        d["b"] = x + n
        return len(keys), sorted(keys), d
    backend = run_differential(fn, lambda seed: (torch.randn(3), 2), fullgraph=False)
    assert backend.graph_count == 1


def test_defaultdict_across_a_graph_break():
    def fn(x):
        d = collections.defaultdict(list)
        d["a"].append(x.sin())
        print("break")
        d["b"].append(x.cos())
        return d, d.default_factory
    backend = run_differential(fn, _one, fullgraph=False)
    assert backend.graph_count == 2


# ---- functools.partial made inside ---------------------------------------------------------------------
def _mul(x, y):
    return x * y


def _add(x, y):
    return x + y


def test_partial_rebuilt_after_a_break():
    def fn(f, g, x):
        p0 = functools.partial(f, y=x)
        p1 = functools.partial(g, x)
        print("break")
        return torch.mul(p0(x), p1(x))
    backend = run_differential(fn, lambda seed: (_mul, _add, torch.randn(2, 2)), fullgraph=False)
    assert backend.graph_count == 1


def test_partial_of_graph_tensor_rebuilt_after_a_break():
    def fn(x):
        p = functools.partial(_mul, x.sin())
        print("break")
        return p(x), p.args[0].shape, sorted(p.keywords)
    backend = run_differential(fn, _one, fullgraph=False)
    assert backend.graph_count == 2


@pytest.mark.parametrize("attr", ["func", "args", "keywords", "__call__", "__class__", "__module__", "__doc__",
                                  "__eq__", "__new__", "__code__", "__name__", "__defaults__", "__globals__"])
def test_partial_hasattr(attr):
    def fn(t):
        p = functools.partial(lambda x, y: torch.sin(x) + torch.cos(y), y=t)
        if hasattr(p, attr):
            return p(t)
        return torch.zeros_like(t)
    assert run_differential(fn, _one).graph_count == 1


def test_partial_attributes():
    def fn(x):
        p = functools.partial(_mul, x, y=2)
        return p.func is _mul, p.args[0] + 1, p.keywords["y"], p.__class__ is functools.partial, p.__module__
    assert run_differential(fn, _one).graph_count == 1


# ---- sets of tensors (NOTE [Sets of tensors]) ----------------------------------------------------------
def test_sets_of_tensors_follow_identity():
    def fn(x):
        y = x.add_(1)
        s = {x}
        s.add(y)
        frozen = frozenset(s)
        made = x * 2
        return len(s), len(frozenset(frozen)), x in frozen, made in s, 1 in s, (x + 1) in {x, made}
    assert run_differential(fn, _one).graph_count == 1


def test_membership_of_two_inputs_is_guarded_on_aliasing():
    def fn(a, b):
        a.add_(1)
        return a in {b}, len({a, b})
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    assert compiled(torch.zeros(5), torch.zeros(5, 2)) == (False, 2)
    shared = torch.zeros(5)
    assert compiled(shared, shared) == (True, 1)  # the same tensor twice: the guard fails, recompiled
    assert backend.graph_count == 2


def test_iterating_a_set_of_several_tensors_breaks():
    def fn(x):
        total = 0
        for t in {x, x * 2}:
            total = total + t
        return total
    run_differential(fn, _one, fullgraph=False)


def test_set_of_a_tensor_made_in_the_graph_across_a_break():
    def fn(x):
        s = {x.sin()}
        print("break")
        return [t + 1 for t in s], len(s)
    # the set is rebuilt with the graph's tensor; the resume function, which receives a real set of
    # tensors, still runs eagerly (known gap: sets of tensors are not read back through a source)
    assert run_differential(fn, _one, fullgraph=False).graph_count == 1


# ---- collections.deque ---------------------------------------------------------------------------------
def test_deque_methods():
    def fn(x, y):
        d = collections.deque([x, y])
        d.append(x + 1)
        d.extend([x, y])
        d.insert(0, "foo")
        last = d.pop()
        other = collections.deque([last])
        d.extendleft(other)
        other.clear()
        d.extend(other)
        d[2] = "setitem"
        d = d.copy()
        d.append(d.popleft())
        d.rotate(2)
        d.appendleft(3)
        return list(d), len(d), type(d).__name__, d.maxlen, d[0]
    assert run_differential(fn, _two).graph_count == 1


def test_deque_errors_and_maxlen():
    def empty(x):
        return collections.deque().popleft(), x

    def bounded(x):
        d = collections.deque([x, x + 1, x + 2], maxlen=2)
        return list(d)

    run_differential(empty, _one, fullgraph=False)
    run_differential(bounded, _one, fullgraph=False)


# ---- dicts keyed by tensors (parameters as keys, as optimizers keep their state) ------------------------
_PARAM = torch.nn.Parameter(torch.ones(3))


def test_dict_keyed_by_tensors():
    def fn(x):
        state = {"a": x, _PARAM: 3}
        by_input = {}
        for p in (x, _PARAM):
            by_input[p] = p * 2
        dd = collections.defaultdict(dict)
        dd[_PARAM]["step"] = 1
        comp = {t: i for i, t in enumerate((x, _PARAM))}
        return (state["a"] + state[_PARAM], by_input[x], by_input.get(_PARAM), _PARAM in by_input,
                (x + 1) in by_input, len(by_input), list(by_input.values()), dd[_PARAM], comp[_PARAM],
                by_input.pop(x), len(by_input))
    assert run_differential(fn, _one).graph_count == 1


def test_dict_keyed_by_tensors_returned_and_live_at_a_break():
    def fn(x):
        state = {x: x.sin()}
        print("break")
        return list(state.items()), len(state), x in state
    run_differential(fn, _one, fullgraph=False)  # the resume function runs eagerly (tensor keys from outside)


def test_mapping_returns_with_a_persisting_backend():
    """backend="eager" persists frames in the cache: returns it cannot describe are simply not persisted."""
    def fn(x):
        dd = collections.defaultdict(list)
        dd["a"].append(x + 1)
        keyed = {_PARAM: x * 2}
        plain = {"k": x}
        return dd, list(keyed.items()), plain.keys(), plain
    compiled = framejit.compile(fn, backend="eager")
    for _ in range(2):
        x = torch.randn(3)
        dd, keyed, keys, plain = compiled(x)
        assert type(dd) is collections.defaultdict and dd.default_factory is list
        torch.testing.assert_close(dd["a"][0], x + 1)
        assert keyed[0][0] is _PARAM
        torch.testing.assert_close(keyed[0][1], x * 2)
        plain["new"] = 1
        assert list(keys) == ["k", "new"]  # the view is live on the returned dict


def test_partial_instance_dict():
    def fn(t):
        p = functools.partial(_add, t)
        d = p.__dict__
        return (p(t) if hasattr(p, "__dict__") else t), len(d), d is p.__dict__
    assert run_differential(fn, _one).graph_count == 1


def test_partial_with_a_changed_instance_dict_is_not_rebuilt_wrongly():
    def fn(t):
        p = functools.partial(_add, t)
        p.__dict__["k"] = 1
        return p(t), p.__dict__["k"], sorted(p.__dict__)
    run_differential(fn, _one, fullgraph=False)


# ---- dict union (PEP 584): NOTE [Dict union] ---------------------------------------------------------------
class OwnOr(dict):
    def __or__(self, other):
        return ("own-or", len(self), len(other))

    def __ror__(self, other):
        return ("own-ror", len(other), len(self))


def _kw(seed):
    return {"a": torch.randn(3), "c": torch.randn(3)}


def _describe(d):
    return d, type(d), list(d), getattr(d, "default_factory", "none")


def test_dict_union_of_tensor_values_is_one_graph():
    def fn(x, **kw):
        d = kw | {"b": x * 2, "a": x}  # a keeps its position, takes the right's value
        e = {"b": x} | collections.OrderedDict(kw)  # OrderedDict's reflected slot: an OrderedDict
        f = collections.OrderedDict(kw) | {"q": x}
        g = collections.defaultdict(list, kw) | {"q": x}
        h = {"q": x} | collections.defaultdict(int, kw)  # defaultdict's reflected slot, the right's factory
        i = collections.defaultdict(int, kw) | collections.OrderedDict(z=x)  # the left's slot: a defaultdict
        j = PlainOrdered(kw) | {"q": x}
        k = PlainDict(kw) | collections.OrderedDict(q=x)  # dict's slot: OrderedDict is no subclass of PlainDict
        return [_describe(v) for v in (d, e, f, g, h, i, j, k)], g["new"], len(g)
    assert run_differential(fn, _one, kwargs_fn=_kw).graph_count == 1
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    for n in (2, 2, 4):  # changing shapes: no break, no recompile beyond the shape change
        x, kw = torch.randn(n), {"a": torch.randn(n), "c": torch.randn(n)}
        torch.testing.assert_close(compiled(x, **kw)[0][0][0], fn(x, **kw)[0][0][0])
    assert backend.graph_count == 2


def test_dict_union_inplace_and_slots_called_directly():
    def fn(x, **kw):
        d = dict(kw)
        same = d.__ior__({"b": x})
        d |= [("z", x + 1)]
        o = collections.OrderedDict(kw)
        o |= {"a": x}
        p, q = PlainDict(kw), PlainOrdered(kw)
        p |= {"b": x}
        q |= collections.defaultdict(int, b=x)
        return (d, same is d, o, type(o), p, type(p), q, type(q), kw.__or__({"b": x - 1}), kw.__or__([1]), kw.__ror__({"c": 0, "q": x}),
                dict.__or__(kw, {"k": x}), x + 1)
    assert run_differential(fn, _one, kwargs_fn=_kw).graph_count == 1


@pytest.mark.parametrize("other", [[1], (1,), 3, None, "s", {1}])
def test_dict_union_with_a_non_dict_raises_as_eager(other):
    def fn(x, **kw):
        return x + 1, kw | other

    def rfn(x, **kw):
        return x + 1, other | kw
    for f in (fn, rfn):
        compiled = framejit.compile(f, backend=CountingBackend())
        x = torch.randn(3)
        with pytest.raises(TypeError) as eager:
            f(x, a=x)
        with pytest.raises(TypeError) as ours:
            compiled(x, a=x)
        assert str(ours.value) == str(eager.value)


def test_dict_union_with_a_subclass_that_has_its_own_operators():
    def fn(x, **kw):
        own = OwnOr(kw)
        return x * 2, own | {"b": 1}, {"b": 1, "c": 2} | own, kw | own
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for n in (3, 3):
        x = torch.randn(n)
        actual, expected = compiled(x, a=x), fn(x, a=x)
        torch.testing.assert_close(actual[0], expected[0])
        assert actual[1:] == expected[1:]
