"""Idioms from the fifth side-by-side sweep of framejit against stock torch.compile (issue 11, helper
h11lib): Python-library and torch.nn idioms as library authors write them.

Each program runs eagerly and compiled over several calls with inputs or state changed between them, and
asserts equal values, the graph and break counts where that is the point, and that no frame ran wholly
eagerly.
"""
from __future__ import annotations

import abc
import collections
import dataclasses
import itertools
import operator
import re
import typing

import torch

import framejit
from tests.helpers import CountingBackend, assert_same, logged_breaks, eager_frames


def _run(f, make_args, calls=3):
    """Runs f eagerly and compiled on the same fresh arguments; returns (backend, break records)."""
    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = eager_frames()
    with logged_breaks() as records:
        for i in range(calls):
            torch.manual_seed(i)
            expected = f(*make_args(i))
            torch.manual_seed(i)
            assert_same(compiled(*make_args(i)), expected)
    assert eager_frames() == eager_before
    return backend, list(records)


# ---- `x in obj` through iteration (NOTE [Membership by iteration], sequence_protocol.py) ---------------------
# A class with only the old sequence protocol (`__getitem__` raising IndexError) or only `__iter__` answers `in`
# by iterating: it was "`in` on ObjectValue(Seq)", a break at each test.
class _Evens:
    def __init__(self, n):
        self.n = n

    def __getitem__(self, i):
        if i >= self.n:
            raise IndexError(i)
        return i * 2


class _Names:
    def __init__(self, names):
        self.names = names

    def __iter__(self):
        return iter(self.names)


def test_membership_in_objects_without_contains_iterates():
    evens, names = _Evens(4), _Names(["q", "k"])

    def f(x, k):
        hits = (k in evens) + ("k" in names) + ("v" in names) + (k in _Evens(k))
        return x + hits, 3 in evens

    backend, records = _run(f, lambda i: (torch.full((2,), float(i)), i * 3), calls=4)
    assert records == []
    assert backend.graph_count == 4  # k is a constant of each trace (6 in evens is True, 9 is not)


def test_membership_by_getitem_raising_other_errors_raises_as_eager():
    class Bad:
        def __getitem__(self, i):
            raise KeyError(i)

    def f(x):
        try:
            return x + (1 in Bad())
        except KeyError:
            return x - 1

    _run(f, lambda i: (torch.randn(3),))


# ---- @property on a NamedTuple subclass -------------------------------------------------------------------
# "descriptor property for 'tot'": a break at each read (a namedtuple instance has no __dict__, so the class's
# property was not looked up as for objects).
class _Span(typing.NamedTuple):
    start: int
    stop: float

    @property
    def length(self):
        return self.stop - self.start

    @property
    def missing(self):
        raise AttributeError("computed lazily")


class _Point(collections.namedtuple("_Point", "x y")):
    __slots__ = ()

    @property
    def norm(self):
        return (self.x ** 2 + self.y ** 2) ** 0.5


def test_properties_of_namedtuple_subclasses_are_inlined():
    def f(x, n):
        span, p = _Span(n, 2.5), _Point(3, 4)
        return x * span.length + p.norm, getattr(span, "missing", "absent"), hasattr(p, "norm")

    backend, records = _run(f, lambda i: (torch.randn(3), i + 1))
    assert records == []
    assert backend.graph_count <= 2


# ---- str.format_map (NOTE [format_map through the mapping's protocol], string_formats.py) --------------------
class _Box:
    def __init__(self):
        self.width = 7


def test_format_map_with_a_defaultdict_and_a_chainmap_is_folded():
    def f(x, n):
        d = collections.defaultdict(lambda: "?", {"a": n, "box": _Box(), "dims": [4, 5]})
        s = "{a}-{b}|{a!r:>{w}}|{box.width}|{dims[1]}".format_map(collections.ChainMap({"w": 5}, d))
        return x * len(s), s, sorted(d)  # the missing "b" was inserted into d, as eager does

    backend, records = _run(f, lambda i: (torch.randn(2), 10 ** i))
    assert records == []


def test_format_map_errors_are_raised_as_eager():
    def f(x, n):
        out = []
        for template, mapping in (("{}", {}), ("{0}", {0: 1}), ("{zz}", {"a": n}), ("{a", {"a": n}),
                                  ("{a!x}", {"a": n})):
            try:
                out.append(template.format_map(mapping))
            except (ValueError, KeyError) as e:
                out.append(f"{type(e).__name__}: {e}")
        return x + 1, out

    backend, records = _run(f, lambda i: (torch.randn(2), i))
    assert records == []


# ---- bytearray and memoryview (NOTE [Mutable buffers carried across breaks], carried_loops.py) ---------------
# A bytearray made in the frame (its construction is a break) reached the resume function as an argument
# that no value modelled ("L['___stack0'] is a bytearray"): that function ran wholly eagerly; one passed in
# made the whole frame eager. Now each use is a break that runs as Python and both sides stay captured.
def test_a_bytearray_made_in_the_frame_keeps_the_rest_captured():
    def f(x):
        b = bytearray(b"abc")
        y = x * 2
        b.append(100)
        b[0] = 120
        z = y + len(b) + b[0]
        return z.sin(), bytes(b)

    backend, records = _run(f, lambda i: (torch.randn(2),))
    assert backend.graph_count >= 2


def test_a_bytearray_argument_is_used_as_python_uses_it():
    def f(x, b, c):
        y = x * 2
        if b:  # an empty bytearray is false
            y = y + b[0]
        same, equal, n = b is c, b == c, len(b)
        for v in b:
            y = y + v
        b.extend(b"q")
        return y.cos(), b, same, equal, n, bytes(b) + b"!", list(b)

    def args(i):
        b = bytearray(b"xy"[:i % 2 + 1]) if i else bytearray()
        return torch.full((2,), float(i)), b, b if i == 2 else bytearray(b"x")

    backend, records = _run(f, args, calls=4)
    assert backend.graph_count >= 2
    assert all("eagerly" not in r for r in records)


# ---- a module made in forward and stored on self (NOTE [Modules made while tracing that outlive the trace]) ----
# `self.head = torch.nn.Identity()` broke at the store (registering a module), and the break's code had to
# rebuild the Identity made in the trace from the store's operands: "a module made in the compiled region
# escapes it", so the frame ran wholly eagerly (0 graphs, 1 eager frame; stock torch.compile 2 graphs). The
# operands of the breaking instruction now count as live, so the break moves to the construction.
def test_a_module_made_in_forward_and_stored_on_self_keeps_the_frame_captured():
    class Holder(torch.nn.Module):
        def forward(self, x):
            y = x.cos()
            self.head = torch.nn.Identity()
            return self.head(y) * 2

    class Lazy(torch.nn.Module):
        def forward(self, x):
            y = x.sin()
            if not hasattr(self, "act"):
                self.act = torch.nn.GELU()
            return self.act(y) * 2

    for cls in (Holder, Lazy):
        eager_module, compiled_module = cls(), cls()
        backend = CountingBackend()
        compiled = framejit.compile(compiled_module, backend=backend)
        eager_before = eager_frames()
        for i in range(3):
            x = torch.randn(2, 3)
            assert_same(compiled(x), eager_module(x))
        assert eager_frames() == eager_before
        assert backend.graph_count >= 1
        assert type(compiled_module.__dict__["_modules"][next(iter(compiled_module._modules))]) in (
            torch.nn.Identity, torch.nn.GELU)


# ---- frozen dataclasses as dict keys (NOTE [Frozen dataclasses as dict keys], values/builder.py) ------------
# A table keyed by frozen dataclass instances (hashed and compared by their fields) was "dict closure['table']
# has non-constant keys": the frame ran wholly eagerly (0 graphs, 2 eager frames over 3 calls; stock 2 graphs);
# a dict made in the frame broke at its first such key.
@dataclasses.dataclass(frozen=True)
class _Key:
    a: int
    b: str = "x"
    note: str = dataclasses.field(default="n", compare=False)


def test_frozen_dataclass_keys_are_looked_up_by_value():
    table = {_Key(1, "x"): 2.0, _Key(2, "y"): 3.0}

    def f(x, a):
        k = _Key(a, "x" if a == 1 else "y")
        local = {_Key(0, "z"): 1, k: 5}
        found = [key.a for key in table if key.b == "y"]
        return (x * table[k], local[_Key(0, "z")], local[k], _Key(7) in table, table.get(_Key(9), -1), found,
                list(local)[1].note)

    backend, records = _run(f, lambda i: (torch.randn(2), 1 + i % 2), calls=4)
    assert records == []
    assert backend.graph_count <= 2


def test_frozen_dataclass_keys_passed_in_and_returned_keep_their_identity():
    def f(x, k, table):
        made = {_Key(k.a + 1): x * 2, k: x}
        return x * table[k], k in table, made

    table = {_Key(1): 2.0, _Key(2): 3.0}
    backend, records = _run(f, lambda i: (torch.randn(2), _Key(1 + i % 2), table), calls=4)
    assert records == []
    compiled = framejit.compile(f, backend=backend)
    key = _Key(1)
    first, second = compiled(torch.ones(2), key, table)[2], compiled(torch.ones(2), key, table)[2]
    assert list(first)[1] is key and list(first)[0] is not list(second)[0]  # a new key per call, as eager


def test_a_dataclass_with_its_own_hash_is_not_keyed_by_value():
    @dataclasses.dataclass(frozen=True)
    class Custom:
        a: int

        def __hash__(self):
            return 0

    table = {Custom(1): 1.0}

    def f(x):
        return x * table[Custom(1)]

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    x = torch.randn(2)
    assert_same(compiled(x), f(x))


def test_a_dataclass_hash_that_counts_runs_on_every_call():
    calls = []

    @dataclasses.dataclass(frozen=True)
    class Counted:
        a: int

        def __hash__(self):
            calls.append(self.a)
            return hash(self.a)

    table = {Counted(1): 1.0}
    calls.clear()

    def f(x):
        return x * table[Counted(1)]

    compiled = framejit.compile(f, backend=CountingBackend())
    for _ in range(3):
        compiled(torch.randn(2))
    assert calls == [1, 1, 1]  # the user's __hash__ ran once per call, as eager runs it


# ---- hooks registered and removed within each call (NOTE [Hook ids that never leave the trace]) -------------
# The trace guarded `RemovableHandle.next_id == n`, which the call itself advances: a frame that registers
# and removes a hook on every call traced every call, then ran eagerly from the 9th (8 graphs, 1 eager frame
# over 12 calls; stock torch.compile 2 graphs).
def _hooked_linear():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 3)


def test_a_hook_registered_and_removed_per_call_is_traced_once():
    from torch.utils.hooks import RemovableHandle
    lin = _hooked_linear()

    def f(x):
        handle = lin.register_forward_hook(lambda m, i, o: o * 2)
        pre = lin.register_forward_pre_hook(lambda m, args: (args[0] + 1,))
        try:
            y = lin(x)
        finally:
            handle.remove()
            pre.remove()
        return y + lin(x)

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = eager_frames()
    for i in range(12):
        x = torch.randn(2, 3)
        start = RemovableHandle.next_id
        expected = f(x)
        eager_ids = RemovableHandle.next_id - start
        start = RemovableHandle.next_id
        assert_same(compiled(x), expected)
        assert RemovableHandle.next_id - start == eager_ids == 2
        assert not lin._forward_hooks and not lin._forward_pre_hooks
    assert eager_frames() == eager_before
    assert backend.graph_count == 1


def test_hook_ids_that_leave_the_trace_are_the_ids_eager_hands_out():
    from torch.utils.hooks import RemovableHandle
    lin = _hooked_linear()

    def returns_handle(x):
        handle = lin.register_forward_hook(lambda m, i, o: o * 2)
        return lin(x), handle

    def returns_id(x):
        handle = lin.register_forward_hook(lambda m, i, o: o + 1)
        y = lin(x)
        handle.remove()
        return y, handle.id

    for f in (returns_handle, returns_id):
        compiled = framejit.compile(f, backend=CountingBackend())
        for i in range(3):
            x = torch.randn(2, 3)
            before = RemovableHandle.next_id
            y, out = compiled(x)
            handle_id = out.id if f is returns_handle else out
            assert handle_id == before  # the id the counter handed out in this call
            assert RemovableHandle.next_id == before + 1
            if f is returns_handle:
                assert list(lin._forward_hooks) == [handle_id]
                out.remove()
            assert not lin._forward_hooks


# ---- abstract bases, itertools.accumulate, Python __setitem__/__delitem__ -----------------------------------
# `Base()` of an abc.ABC with abstract methods was "creating an instance of Base": a break inside the try
# block, so the rest of the frame ran as plain Python (0 graphs; stock 1). It now raises CPython's own
# TypeError (object.__new__ run at trace time; __abstractmethods__ guarded).
class _Act(abc.ABC):
    @abc.abstractmethod
    def act(self, x):
        ...

    def __call__(self, x):
        return self.act(x) * 2


class _Relu(_Act):
    def act(self, x):
        return x.relu()


def test_instantiating_an_abstract_class_raises_as_eager():
    def f(x):
        try:
            _Act()
        except TypeError as e:
            message = str(e)
        return _Relu()(x), message, isinstance(_Relu(), _Act)

    backend, records = _run(f, lambda i: (torch.randn(2),))
    assert records == []
    assert backend.graph_count == 1


# `itertools.accumulate` had no handler ("creating an instance of accumulate", a break): timm-style
# cumulative depths, running sums of tensors, running max.
def test_itertools_accumulate_is_traced():
    def f(x, depths):
        products = list(itertools.accumulate([1, 2, 3], operator.mul))
        offsets = list(itertools.accumulate(depths, initial=0))
        running = list(itertools.accumulate([x, x * 2, x * 3]))
        peaks = list(itertools.accumulate([3, 1, 4, 1, 5], max))
        return x * sum(products) + offsets[-1], running[-1], peaks, offsets

    backend, records = _run(f, lambda i: (torch.randn(2), [2, 2, 6 + i, 2]))
    assert records == []
    assert backend.graph_count <= 2


# A Python class's own `__setitem__`/`__delitem__` (collections.ChainMap, a config registry) was "item
# assignment into New(ChainMap)" / "deleting an item of ...": a break at each store.
class _Registry:
    def __init__(self):
        self.table = {}

    def __setitem__(self, key, value):
        self.table[key] = value

    def __getitem__(self, key):
        return self.table[key]

    def __delitem__(self, key):
        del self.table[key]


def test_python_setitem_and_delitem_are_inlined():
    shared = _Registry()

    def f(x):
        chain = collections.ChainMap({"a": 1}, {"a": 2, "b": 3})
        chain["z"] = 9
        del chain["a"]
        local = _Registry()
        local["k"] = 3
        shared["n"] = 4
        shared["m"] = 1
        del shared["m"]
        return x * chain["b"] + len(chain) + local["k"] + shared["n"], dict(chain.maps[0]), sorted(shared.table)

    backend, records = _run(f, lambda i: (torch.randn(2),))
    assert records == []
    assert sorted(shared.table) == ["n"]


# ---- an exception raised in compiled code and caught by the caller (NOTE [Exceptions raised by the traced
# code], convert.py) --------------------------------------------------------------------------------------------
# A frame whose trace raised (outside any try block of its own) ran wholly eagerly: `y = x.sin(); return
# check(y)` with check raising ValueError for 1-d inputs was 0 graphs and 1 eager frame per input kind. It now
# breaks before the root instruction that raises: the code before it is a graph, the instruction raises in
# plain Python, and the caller's handler sees eager's exception.
def test_an_exception_raised_inside_is_caught_outside_with_the_rest_captured():
    def check(x):
        if x.dim() == 1:
            raise ValueError("need a matrix")
        return x

    def f(x):
        y = x.sin() * 2
        return check(y).sum()

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = eager_frames()
    for i in range(4):
        x = torch.randn(3) if i % 2 else torch.randn(2, 3)
        outcomes = []
        for fn in (f, compiled):
            try:
                outcomes.append(("value", fn(x)))
            except ValueError as e:
                outcomes.append(("raised", str(e)))
        assert outcomes[0][0] == outcomes[1][0]
        assert_same(outcomes[1][1], outcomes[0][1])
    assert eager_frames() == eager_before
    assert backend.graph_count >= 2  # the 2-d trace, and the 1-d trace's part before the raise


# ---- data descriptors written in Python (NOTE [Data descriptors written in Python], attributes.py) ----------
# A validating field (`scale = Positive()` with __set_name__/__get__/__set__) broke at every read and store
# ("descriptor Positive for 'scale'", "a store through the descriptor Positive"): 0 graphs, 3 breaks per call.
class _Positive:
    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return getattr(obj, self.name)

    def __set__(self, obj, value):
        if value <= 0:
            raise ValueError("must be positive")
        setattr(obj, self.name, value)


def _tagged(cls):
    cls.tagged = True
    return cls


@_tagged
class _Scaled:
    scale = _Positive()

    def __init__(self, scale):
        self.scale = scale

    def __call__(self, x):
        return x * self.scale


def test_python_data_descriptors_are_inlined_on_reads_and_stores():
    outside = _Scaled(2.0)

    def f(x, s):
        made = _Scaled(s)
        try:
            _Scaled(-1)
        except ValueError as e:
            message = str(e)
        outside.scale = s  # an input float, not one computed from it: a comparison of a float computed from
        # dynamic floats is a break by design (1fc472a, NOTE in the dynamic-float comparisons), not what this tests
        return made(x) + outside(x), message, _Scaled.tagged, outside._scale, isinstance(_Scaled.scale, _Positive)

    backend, records = _run(f, lambda i: (torch.randn(2), i + 1.5))
    assert records == []
    assert outside._scale == 3.5  # the last call (s = 3.5) stored s through the descriptor


# ---- a class statement inside a compiled function (graph_break._SIMPLE: LOAD_BUILD_CLASS) -------------------
# LOAD_BUILD_CLASS had no handler and was no break site: the whole frame ran eagerly (0 graphs, 1 eager frame).
# Now the class is made by plain Python at a break and the code around it is captured (a new class per call,
# so its resume function recompiles per call, as stock torch.compile's does).
def test_a_class_statement_breaks_instead_of_running_the_frame_eagerly():
    def f(x):
        y = x.cos() * 2

        class Local(_Relu):
            k = 3
        return Local()(y) * Local.k, [c.__name__ for c in Local.__mro__][1:]

    backend, records = _run(f, lambda i: (torch.randn(2),), calls=3)
    assert backend.graph_count >= 2


# ---- regular expressions on constant strings (NOTE [Regular expressions on constants], library_substitutes.py) --
# Parameter-name parsing (`pat.match(name).group(1)`, `re.split`, `re.sub`) broke at every call of a Pattern or
# Match method and of the `re` functions: 20 breaks over 3 calls in the sweep's program (stock 1 graph).
_LAYER = re.compile(r"layer\.(\d+)\.(\w+)")


def test_regular_expressions_on_constant_strings_are_folded():
    def f(x, name):
        m = _LAYER.match(name)
        index = int(m.group(1)) if m else -1
        parts = re.split(r"[._]", name)
        renamed = re.sub(r"\.(\d+)\.", r"[\1].", name)
        found = re.findall(r"\d+", name)
        none = re.fullmatch(r"block", name)
        return x * index, parts, renamed, found, none is None, m.groups(), _LAYER.pattern

    backend, records = _run(f, lambda i: (torch.randn(2), f"layer.{i}.attn"))
    assert records == []
    assert backend.graph_count == 3  # one per name, as stock torch.compile specialises on strings


def test_regular_expression_errors_raise_as_eager():
    def f(x):
        try:
            re.compile("(unclosed")
        except re.error as e:
            return x + 1, type(e).__name__
        return x, None

    backend, records = _run(f, lambda i: (torch.randn(2),))
    assert records == []


# ---- operator.methodcaller (stdlib.getter_of) ----------------------------------------------------------------
# A call of a methodcaller was "call of methodcaller.__call__": a break at each (stock 2 graphs, framejit 2
# graphs and 1 break before).
_MEAN_ROWS = operator.methodcaller("mean", dim=1)


def test_methodcaller_calls_are_traced():
    def f(x):
        total = operator.methodcaller("sum", dim=0)
        shout = operator.methodcaller("upper")
        swap = operator.methodcaller("replace", "a", "b")
        counts = list(map(operator.methodcaller("count", 1), [[1, 1], [1]]))
        return total(x) + _MEAN_ROWS(x).sum(), shout("abc"), swap("banana"), counts

    backend, records = _run(f, lambda i: (torch.randn(2, 3),))
    assert records == []
    assert backend.graph_count == 1
