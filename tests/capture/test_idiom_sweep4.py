"""Idioms from the fourth side-by-side sweep of framejit against stock torch.compile (issue 11, helper
h11sweep4; the sweep programs are in /tmp/h11s4/s*.py of that session).

Each program is written as library or model code writes it, runs eagerly and compiled over several calls
with inputs or state changed between them, and asserts equal values, the graph count where that is the
point, and that no frame ran wholly eagerly.
"""
from __future__ import annotations

import bisect
import dataclasses
import enum
import functools
import itertools

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same, logged_breaks, eager_frames


_same = assert_same  # eager vs compiled, containers item by item


# ---- a library metaclass's __getattr__ (NOTE [Library metaclass __getattr__], lookup.py) -------------------
# dataclasses.astuple/asdict of a config holding an Enum asks hasattr(type(member), "__dataclass_fields__");
# on 3.11 EnumType has its own __getattr__, which the trace's absence guard said it had not: the guard failed
# on every call, 8 graphs then the frame ran eagerly from the 9th call (stock torch.compile: 2 graphs).
class _Act(enum.Enum):
    RELU = "relu"
    GELU = "gelu"


@dataclasses.dataclass
class _Cfg:
    act: _Act = _Act.GELU
    depth: int = 2


def test_astuple_of_a_config_holding_an_enum_is_not_traced_per_call():
    def f(x, cfg):
        fields = dataclasses.astuple(cfg)
        act = torch.relu if fields[0] is _Act.RELU else torch.tanh
        return act(x) * fields[1], dataclasses.asdict(cfg)["depth"], hasattr(_Act, "missing"), \
            getattr(_Act, "RELU").value

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = eager_frames()
    for i in range(12):
        x = torch.randn(3)
        cfg = _Cfg(act=_Act.GELU, depth=i % 3)
        _same(compiled(x, cfg), f(x, cfg))
    assert eager_frames() == eager_before
    assert backend.graph_count <= 2


# ---- modules as dict keys (NOTE [Objects as dict keys], identity_keys.py) -----------------------------------
# `scales = {block: 2.0, ...}` (a dict keyed by modules, hashed by identity as CPython does) from outside was
# "dict G['scales'] has non-constant keys": a break, then the resume function holding it ran wholly eagerly
# (before: 1 graph and 1 eager frame; stock torch.compile: 1 graph). A dict made in the frame keyed by modules
# (`{m: n for n, m in model.named_modules()}`) broke at its first key.
def _keyed_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU(), torch.nn.Linear(2, 2))


def test_a_global_dict_keyed_by_modules_is_read_and_iterated_in_the_graph():
    model = _keyed_model()
    scales = {model[0]: 2.0, model[2]: 3.0}

    def f(x):
        names = {m: n for n, m in model.named_modules()}
        out = x
        for m, s in scales.items():
            out = m(out) * s
        return out, names[model[2]], model[1] in scales, scales.get(model[1], -1.0), scales[model[0]], len(names)

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = eager_frames()
    for n in (3, 3, 5):
        x = torch.randn(n, 2)
        _same(compiled(x), f(x))
    assert eager_frames() == eager_before
    assert backend.graph_count <= 2  # the first trace and one with a dynamic size, no break


def test_a_dict_keyed_by_modules_passed_in_and_changed_between_calls():
    model = _keyed_model()
    a, b = model[0], model[2]

    def f(x, d, k):
        d[b] = k  # a store keyed by a module, replayed into the caller's dict
        return [m(x) * s for m, s in d.items()], {m: s * 2 for m, s in d.items()}[a], len(d)

    compiled = framejit.compile(f, backend=CountingBackend())
    eager_before = eager_frames()
    for make in (lambda: {a: 1.0}, lambda: {a: 1.0, b: 2.0}, lambda: {b: 1.0, a: 2.0}, lambda: {a: 3.0}):
        x = torch.randn(2)
        got_d, want_d = make(), make()
        _same(compiled(x, got_d, 4.0), f(x, want_d, 4.0))
        assert list(got_d) == list(want_d) and list(got_d.values()) == list(want_d.values())
    assert eager_frames() == eager_before


# ---- itertools.product(..., repeat=r) and bisect over a sorted list of constants ----------------------------
# Window/anchor grids (`product(range(n), repeat=2)`) and bucketing (`bisect_right(bounds, x.shape[0])`, as
# MultiStepLR does with its milestones): both were breaks ("itertools.product with repeat=", "call of
# _bisect.bisect_right"), the product's loop then stepped as Python with a resume function per row: 9 graphs
# over 3 calls in the sweep's program (stock torch.compile: 6). Errors of `repeat` are CPython's own.
def test_product_with_repeat_and_bisect_are_captured():
    bounds = [0, 4, 16, 64]

    def f(x, sizes, r):
        combos = [a * b for a, b in itertools.product(sizes, repeat=2)]
        grid = list(itertools.product(range(2), "ab", repeat=r))
        bucket = bisect.bisect_right(bounds, x.shape[0]) + bisect.bisect_left(bounds, 4, 1)
        return x * bucket + sum(combos), grid, list(itertools.product()), list(itertools.product([], repeat=0))

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = eager_frames()
    for n, sizes, r in ((3, [1, 2, 3], 1), (3, [1, 2, 3], 1), (20, [4, 2, 5], 1)):
        x = torch.randn(n)
        _same(compiled(x, sizes, r), f(x, sizes, r))
    assert eager_frames() == eager_before
    assert backend.graph_count <= 2  # no break: the first trace, then one for the new size and items


@pytest.mark.parametrize("repeat", [-1, 1.5, 2])
def test_product_repeat_checks_are_cpythons(repeat):
    def f(x):
        return x * len(list(itertools.product("ab", repeat=repeat)))

    compiled = framejit.compile(f, backend=CountingBackend())
    x = torch.randn(2)
    try:
        want = f(x)
    except Exception as e:  # noqa: BLE001
        with pytest.raises(type(e)):
            compiled(x)
    else:
        _same(compiled(x), want)


# ---- functions as dict keys (NOTE [Functions as dict keys], values/builder.py) ------------------------------
# A dispatch table keyed by functions from outside was "dict G['...'] has non-constant keys": a break and the
# resume function holding it ran wholly eagerly (the lookup by an argument function: 1 eager frame; stock
# torch.compile: 1 graph per function). Iterating it gave the keys as constants that could not be called.
def _weighted_act(t):
    return t.sigmoid()


_ACT_WEIGHTS = {torch.relu: 1.0, torch.tanh: 2.0, torch.nn.functional.gelu: 3.0, _weighted_act: 4.0}


def test_a_dict_keyed_by_functions_is_looked_up_iterated_and_rebuilt():
    def f(x, act):
        y = act(x) * _ACT_WEIGHTS[act] + _ACT_WEIGHTS.get(torch.nn.functional.silu, 0.0)
        for fn, w in _ACT_WEIGHTS.items():
            y = y + fn(x) * w
        doubled = {fn: w * 2 for fn, w in _ACT_WEIGHTS.items()}
        return y, doubled[_weighted_act], [k.__name__ for k in doubled], list(doubled), _weighted_act in doubled

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = eager_frames()
    for act in (torch.tanh, torch.tanh, _weighted_act, torch.nn.functional.gelu):
        x = torch.randn(3)
        got, want = compiled(x, act), f(x, act)
        _same(got, want)
        assert all(g is w for g, w in zip(got[3], want[3]))  # the functions themselves
    assert eager_frames() == eager_before
    assert backend.graph_count == 3  # one per function passed in (its identity is guarded), no break


def test_a_dict_argument_keyed_by_functions_changes_between_calls():
    def f(x, table):
        table[torch.tanh] = table.get(torch.tanh, 0) + 1
        return [fn(x) * w for fn, w in table.items()]

    compiled = framejit.compile(f, backend=CountingBackend())
    eager_before = eager_frames()
    for make in (lambda: {torch.relu: 1}, lambda: {torch.tanh: 1}, lambda: {torch.tanh: 2, _weighted_act: 3}):
        x = torch.randn(2)
        got_t, want_t = make(), make()
        _same(compiled(x, got_t), f(x, want_t))
        assert list(got_t.items()) == list(want_t.items())
    assert eager_frames() == eager_before


# ---- WRONG behaviour before: a dict iterator rebuilt before the replay of a store (NOTE [Dict iterators built
# after replay], codegen.py) -----------------------------------------------------------------------------------
# `d["new"] = 1; g = (v * 2 for v in d.values()); first = next(g)`: the break's code rebuilt the iterator over
# the caller's dict before replaying the store, so its next step raised "RuntimeError: dictionary changed size
# during iteration" where eager runs on; returning such an iterator (or a list holding it) raised the same in
# the caller.
def test_a_dict_iterator_made_after_a_store_survives_a_break(capsys):
    def f(x, d):
        keys = d.keys()
        d["new"] = 1
        g = (v * 2 for v in d.values())
        first = next(g)
        print("first", first)
        rest = list(g)
        return x * len(keys), first, rest, list(keys)

    compiled = framejit.compile(f, backend=CountingBackend())
    eager_before = eager_frames()
    for make in (lambda: {"a": 1}, lambda: {"a": 1, "b": 2}, lambda: {"c": 3}):
        x = torch.randn(2)
        got_d, want_d = make(), make()
        _same(compiled(x, got_d), f(x, want_d))
        assert got_d == want_d
    out = capsys.readouterr().out.splitlines()
    assert out[0::2] == out[1::2]  # compiled and eager printed the same, call by call
    assert eager_frames() == eager_before


def test_a_returned_dict_iterator_made_after_a_store_is_one_live_iterator():
    def f(x, d):
        d["k"] = 5
        it = iter(d.items())
        first = next(it)
        return x + 1, it, [it], first

    compiled = framejit.compile(f, backend=CountingBackend())
    for make in (lambda: {"a": 1}, lambda: {"a": 1, "b": 2}):
        got_d, want_d = make(), make()
        got, want = compiled(torch.ones(1), got_d), f(torch.ones(1), want_d)
        assert got[1] is got[2][0]
        assert list(got[1]) == list(want[1]) and got[3] == want[3] and got_d == want_d


def test_a_dict_iterator_made_before_a_store_still_raises_as_eager():
    def f(x, d):
        it = iter(d)
        d["z"] = 1
        print("between")
        return x, list(it)

    compiled = framejit.compile(f, backend=CountingBackend())
    with pytest.raises(RuntimeError):
        f(torch.ones(1), {"a": 1})
    with pytest.raises(RuntimeError):
        compiled(torch.ones(1), {"a": 1})


# ---- WRONG VALUES before: a cached function's mutable answer (NOTE [Cached mutable answers], cached_calls.py)
# An lru_cache function returns the same list on every eager call; the trace inlined `__wrapped__` and made a
# new list per compiled call: `l = sizes(n); l.append(0)` returned [1, 2, 0] on every call where eager returns
# [1, 2, 0, 0], [1, 2, 0, 0, 0], ... and the real cache never saw the appends.
def test_a_cached_list_is_the_same_list_on_every_call():
    @functools.lru_cache(None)
    def sizes_eager(n):
        return [n, n + 1]

    @functools.lru_cache(None)
    def sizes_compiled(n):
        return [n, n + 1]

    def program(sizes):
        def f(x, n):
            sz = sizes(n)
            sz.append(0)
            return x * len(sz), list(sz)
        return f

    compiled = framejit.compile(program(sizes_compiled), backend=CountingBackend())
    eager = program(sizes_eager)
    eager_before = eager_frames()
    for n in (1, 1, 2, 1):
        x = torch.randn(2)
        _same(compiled(x, n), eager(x, n))
    assert sizes_compiled(1) == sizes_eager(1) == [1, 2, 0, 0, 0]
    assert eager_frames() == eager_before


def test_cached_tables_tensors_and_modules_are_the_cached_objects():
    @functools.lru_cache(None)
    def table(name):
        return {"scale": 2.0, "names": [name, name + "_b"]}

    @functools.lru_cache(None)
    def freqs(n):
        return torch.arange(n, dtype=torch.float32)

    @functools.lru_cache(maxsize=4)
    def act(name):
        return {"relu": torch.nn.ReLU(), "tanh": torch.nn.Tanh()}[name]

    def f(x, name):
        t = table(name)
        return act(name)(x) * t["scale"] + freqs(x.shape[0]), t["names"][1], t is table(name)

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    for name, n in (("relu", 3), ("relu", 3), ("relu", 3)):
        x = torch.randn(n)
        _same(compiled(x, name), f(x, name))
    assert backend.graph_count == 1
    table.cache_clear()  # a new object from now on: the guard sees it (the cache answers another dict)
    freqs.cache_clear()
    for name, n in (("relu", 3), ("tanh", 4)):
        x = torch.randn(n)
        _same(compiled(x, name), f(x, name))


# ---- str.join over a generator (NOTE [Strings joined from generators], folded_results.py) -------------------
# `", ".join(f"{k}={v}" for k, v in cfg.items())` was a break ("call of str.join": a generator is no constant);
# the sweep's program had 2 breaks per call. CPython draws the iterable into a list and then checks its items:
# the same TypeError for a non-str item.
def test_str_join_of_a_generator_is_folded():
    def f(x, cfg):
        s = ", ".join(f"{k}={v}" for k, v in cfg.items())
        t = "|".join(f"{v:03d}" for v in range(3))
        w = b"/".join(p.encode() for p in ("a", "b"))
        return x * len(s), s, t, w

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = eager_frames()
    with logged_breaks() as breaks:
        for cfg in ({"a": 1}, {"a": 1}, {"a": 1, "b": 2.5}):
            x = torch.randn(2)
            _same(compiled(x, cfg), f(x, cfg))
    assert breaks == []
    assert backend.graph_count == 2  # one per key set of cfg
    assert eager_frames() == eager_before


def test_str_join_of_a_generator_with_a_bad_item_raises_as_eager():
    def f(x):
        return x, ",".join(v for v in [1, 2])

    with pytest.raises(TypeError, match="sequence item 0"):
        f(torch.ones(1))
    with pytest.raises(TypeError, match="sequence item 0"):
        framejit.compile(f, backend=CountingBackend())(torch.ones(1))
