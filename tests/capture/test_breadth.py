"""Differential tests of capture breadth (issue: capture breadth): inlining, nn.Module, user classes,
containers, loops and control flow, context managers and builtins. Every case runs eagerly and compiled
with fullgraph=True on two fresh input sets and must be captured into exactly one graph."""
from __future__ import annotations

import dataclasses
import enum
import functools
import itertools
import math
import operator
from collections import namedtuple
from typing import NamedTuple, Optional

import pytest
import torch

import framejit
import torch.nn as nn
import torch.nn.functional as F

from tests.helpers import run_differential


def one(*shape):
    return lambda seed: (torch.randn(*shape),)


def two(*shape):
    return lambda seed: (torch.randn(*shape), torch.randn(*shape))


# ---- inlining --------------------------------------------------------------------------------------
def helper_add(a, b=1.0):
    return a + b


def helper_kwonly(a, *, scale, shift=0.0):
    return a * scale + shift


def helper_varargs(*xs, **kw):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out * kw.get("k", 1.0)


def helper_recursive(x, n):
    if n == 0:
        return x
    return helper_recursive(x * 2, n - 1)


def make_adder(k):
    def add(x):
        return x + k
    return add


ADD3 = make_adder(3.0)
PARTIAL_SCALE = functools.partial(helper_kwonly, scale=2.0)


class Ops:
    factor = 4.0

    @staticmethod
    def static_double(x):
        return x * 2

    @classmethod
    def cls_scale(cls, x):
        return x * cls.factor

    def method(self, x):
        return self.static_double(x) + self.cls_scale(x)


def inl_function(x): return helper_add(x) + helper_add(x, 2.0)
def inl_defaults_kw(x): return helper_add(x, b=3.0)
def inl_kwonly(x): return helper_kwonly(x, scale=3.0, shift=1.0)
def inl_varargs(x, y): return helper_varargs(x, y, x, k=2.0)
def inl_star_call(x, y):
    args = (x, y)
    kw = {"k": 0.5}
    return helper_varargs(*args, **kw)
def inl_nested_def(x):
    def inner(y):
        return y * 3
    return inner(x) + inner(x + 1)
def inl_lambda(x):
    f = lambda t, s=2: t * s  # noqa: E731
    return f(x) + f(x, 3)
def inl_closure_outer_cell(x): return ADD3(x)
def inl_closure_created_inside(x):
    k = x.sum()
    def use(y):
        return y * k
    return use(x)
def inl_closure_mutated_inside(x):
    total = x
    def bump():
        nonlocal total
        total = total + 1
    bump()
    bump()
    return total
def inl_partial(x): return PARTIAL_SCALE(x, shift=1.0)
def inl_partial_inside(x):
    f = functools.partial(helper_add, b=5.0)
    return f(x)
def inl_staticmethod(x): return Ops.static_double(x)
def inl_classmethod(x): return Ops.cls_scale(x)
def inl_method(x): return Ops().method(x)
def inl_recursion(x): return helper_recursive(x, 3)
def inl_returned_closure(x):
    f = make_adder(2.0)
    return f(x)


# ---- user classes ----------------------------------------------------------------------------------
@dataclasses.dataclass
class Config:
    hidden: int = 4
    scale: float = 2.0
    act: str = "relu"


@dataclasses.dataclass
class Output:
    value: torch.Tensor
    extra: Optional[torch.Tensor] = None


@dataclasses.dataclass(frozen=True)
class Frozen:
    a: torch.Tensor
    b: int = 1


class Point(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor


Pair = namedtuple("Pair", ["first", "second"])


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class Shape:
    sides = 4

    def __init__(self, scale):
        self.scale = scale

    @property
    def doubled(self):
        return self.scale * 2

    def area(self, x):
        return x * self.scale * self.sides


class Square(Shape):
    def __init__(self, scale):
        super().__init__(scale)
        self.kind = "square"

    def area(self, x):
        return super().area(x) + 1


CFG = Config()
SHAPE = Shape(1.5)


def cls_dataclass_global(x):
    if CFG.act == "relu":
        x = torch.relu(x)
    return x * CFG.scale + CFG.hidden
def cls_dataclass_output(x): return Output(x * 2, x + 1)
def cls_dataclass_default(x): return Output(x.sum())
def cls_frozen_output(x): return Frozen(x * 3)
def cls_namedtuple_output(x): return Point(x, x * 2)
def cls_namedtuple_kw(x): return Pair(first=x, second=x - 1)
def cls_namedtuple_attr(x):
    p = Point(x, x + 1)
    return p.x * p.y, p[0]
def cls_enum(x, color=Color.RED):
    return x * 2 if color is Color.RED else x * 3
def cls_enum_value(x): return x * Color.BLUE.value
def cls_instance_inside(x):
    s = Shape(2.0)
    return s.area(x) + s.doubled
def cls_subclass_super(x): return Square(0.5).area(x)
def cls_global_object(x): return SHAPE.area(x) + SHAPE.doubled
def cls_isinstance(x):
    s = Square(1.0)
    return x * (isinstance(s, Shape) + issubclass(Square, Shape) + isinstance(x, (list, torch.Tensor)))
def cls_getattr_hasattr(x):
    n = getattr(SHAPE, "sides")
    m = getattr(SHAPE, "missing", 7)
    return x * (n + m + hasattr(SHAPE, "scale") + hasattr(SHAPE, "nope"))
def cls_setattr_new(x):
    s = Shape(1.0)
    setattr(s, "scale", 3.0)
    s.extra = 2
    return s.area(x) * s.extra
def cls_type_of(x): return x * (type(SHAPE) is Shape)
def cls_dataclass_fields(x):
    c = Config(hidden=8)
    return x * c.hidden
def cls_output_dict_of_dataclass(x): return {"out": Output(x), "n": 1}


# ---- containers ------------------------------------------------------------------------------------
def ct_list_methods(x):
    items = [x]
    items.append(x * 2)
    items.extend([x * 3, x * 4])
    items.insert(0, x - 1)
    last = items.pop()
    first = items.pop(0)
    return items, last, first, len(items)
def ct_list_reverse_index(x):
    items = [1, 2, 3, 2]
    items.reverse()
    return x * items.index(3) + items.count(2)
def ct_dict_methods(x):
    d = {"a": x}
    d.update({"b": x * 2}, c=x * 3)
    d.setdefault("d", x * 4)
    v = d.pop("a")
    total = sum(d.values()) + v
    keys = list(d.keys())
    return total, keys, d.get("zz", 5), [k for k, _ in d.items()]
def ct_dict_in_eq(x):
    d = {"a": 1, "b": 2}
    same = d == {"a": 1, "b": 2}
    return x * ("a" in d) + ("z" in d) + same
def ct_tuple_ops(x):
    t = (1, 2) + (3,)
    r = t * 2
    return x * len(r) + t[-1] + (2 in t)
def ct_list_concat_repeat(x):
    a = [x, x]
    b = a + [x * 2]
    c = [0] * 3
    return torch.stack(b).sum(0) + len(c)
def ct_star_unpack(x):
    a, *b, c = [x, x * 2, x * 3, x * 4]
    return a + c + len(b)
def ct_nested_unpack(x):
    (a, b), c = (x, x + 1), x + 2
    return a * b * c
def ct_list_comprehension(x): return torch.stack([x * i for i in range(4)])
def ct_dict_comprehension(x): return {f"k{i}": x + i for i in range(3)}
def ct_comprehension_filter(x): return [x * i for i in range(6) if i % 2 == 0]
def ct_nested_comprehension(x): return [[x * i * j for j in range(2)] for i in range(2)]
def ct_genexp_sum(x): return sum(x * i for i in range(4))
def ct_genexp_any_all(x):
    sizes = [2, 3, 4]
    return x * any(s > 3 for s in sizes) + all(s > 1 for s in sizes)
def ct_genexp_tuple_list(x): return tuple(x + i for i in range(2)), list(x * i for i in range(2))
def ct_genexp_min_max(x): return x * max(i * i for i in range(4)) - min(abs(i - 2) for i in range(4))
def ct_sorted_reversed(x):
    order = sorted([3, 1, 2], reverse=True)
    return [x * i for i in reversed(order)]
def ct_slicing(x):
    items = [x, x * 2, x * 3, x * 4]
    return items[1:3], items[::2], items[-1]
def ct_list_setitem(x):
    items = [x, x, x]
    items[1] = x * 5
    items[-1] = items[-1] + 1
    return items
def ct_list_in_tensor_identity(x):
    items = [x, x * 2]
    return x * (len(items) == 2)
def ct_string_format(x):
    name = "%s_%d" % ("layer", 3)
    other = "{}-{}".format("a", 2)
    key = f"{name}:{other}:{3.14159:.2f}"
    return {key: x}
def ct_str_methods(x):
    s = "Hello World"
    return x * len(s.lower().split()) + s.startswith("He")


# ---- loops and control flow ------------------------------------------------------------------------
def lp_enumerate(x):
    out = x
    for i, s in enumerate([1.0, 2.0, 3.0]):
        out = out + s * i
    return out
def lp_zip(x, y):
    out = []
    for a, b in zip(x.unbind(0), y.unbind(0)):
        out.append(a * b)
    return torch.stack(out)
def lp_reversed(x):
    out = x
    for i in reversed(range(3)):
        out = out * 2 - i
    return out
def lp_dict(x):
    weights = {"a": 1.0, "b": 2.0}
    out = x
    for k in weights:
        out = out + weights[k]
    for k, v in weights.items():
        out = out * v
    return out
def lp_tensor_rows(x):
    total = torch.zeros_like(x[0])
    for row in x:
        total = total + row
    return total
def lp_break_continue(x):
    out = x
    for i in range(10):
        if i % 2:
            continue
        if i > 5:
            break
        out = out + i
    return out
def lp_while_break(x):
    i = 0
    while True:
        x = x * 1.5
        i += 1
        if i >= 3:
            break
    return x
def lp_nested(x):
    out = x
    for i in range(2):
        for j in range(3):
            out = out + i * j
    return out
def lp_for_else(x):
    for i in range(3):
        if i == 10:
            break
    else:
        x = x + 100
    return x
def cf_elif(x):
    n = x.shape[0]
    if n == 1:
        return x
    elif n == 2:
        return x * 2
    else:
        return x * 3
def cf_and_or(x, flag=True, other=None):
    scale = other or 2.0
    if flag and x.ndim == 2 or False:
        return x * scale
    return x
def cf_assert_ok(x):
    assert x.dim() == 2, "needs a matrix"
    assert isinstance(x, torch.Tensor)
    return x.t()
def cf_try_finally(x):
    try:
        y = x * 2
    finally:
        y = y + 1
    return y
def cf_try_except_not_raised(x):
    try:
        y = x + 1
    except ValueError:
        y = x - 1
    return y
def cf_try_except_else(x):
    try:
        y = x * 3
    except (KeyError, IndexError):
        y = x
    else:
        y = y + 1
    return y
def cf_ternary_chain(x): return x * (1 if x.shape[0] > 3 else 2 if x.shape[0] > 1 else 3)
def cf_is_none_default(x, mask=None):
    if mask is not None:
        x = x * mask
    return x
def cf_return_in_loop(x):
    for i in range(5):
        if i == 2:
            return x * i
    return x
def cf_with_user_ctx(x):
    with Recorder() as r:
        y = x * r.k
    return y
def cf_shape_conditions(x):
    b, t = x.shape
    if t % 2 == 0 and b < 10:
        return x.view(b, t // 2, 2).sum(-1)
    return x


class Recorder:
    def __init__(self):
        self.k = 2.0

    def __enter__(self):
        self.k = 3.0
        return self

    def __exit__(self, *exc):
        return False


# ---- context managers and global state -------------------------------------------------------------
@torch.no_grad()
def _nograd_helper(x):
    return x * 2


@torch.enable_grad()
def _enablegrad_helper(x):
    return x * 3


def gm_no_grad(x):
    with torch.no_grad():
        y = x * 2
    return y, x * 3
def gm_enable_grad_inside_no_grad(x):
    with torch.no_grad():
        a = x + 1
        with torch.enable_grad():
            b = x * 2
    return a, b
def gm_set_grad_enabled_ctx(x):
    with torch.set_grad_enabled(False):
        y = x * 2
    return y + x
def gm_set_grad_enabled_call(x):
    torch.set_grad_enabled(False)
    y = x * 2
    torch.set_grad_enabled(True)
    return y + x
def gm_decorator(x): return _nograd_helper(x) + _enablegrad_helper(x)
def gm_inference_mode(x):
    with torch.inference_mode():
        y = x * 2
    return y
def gm_is_grad_enabled(x):
    with torch.no_grad():
        flag = torch.is_grad_enabled()
    return x * (2 if flag else 3)
def gm_autocast(x, w):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = x @ w
        z = torch.relu(y)
    return z, y.dtype
def gm_autocast_disabled(x, w):
    with torch.autocast("cpu", enabled=False):
        return x @ w


# ---- builtins and modules --------------------------------------------------------------------------
def bi_math(x): return x * math.log(8, 2) + math.exp(0) + math.cos(0) + math.ceil(1.2) + math.gcd(12, 8)
def bi_operator(x): return operator.mul(operator.add(x, 1), 2), x
def bi_reduce(x): return functools.reduce(operator.add, [x, x * 2, x * 3])
def bi_chain(x): return [x * i for i in itertools.chain(range(2), [5])]
def bi_product(x): return sum(x * (i + j) for i, j in itertools.product(range(2), range(3)))
def bi_conversions(x): return x * int("3") + float("1.5") + int(True) + round(3.7) + bool([]) + len(str(12))
def bi_min_max_args(x): return x * min(3, 4, 1) + max([2, 9]) + abs(-3)
def bi_range_args(x): return [x * i for i in range(1, 7, 2)]
def bi_map_filter(x): return list(map(lambda i: x * i, filter(lambda i: i > 1, [1, 2, 3])))
def bi_callable_len(x): return x * (callable(helper_add) + len(range(4)))
def bi_divmod_pow(x): return x * pow(2, 3) + divmod(9, 4)[1]


CASES = [
    (inl_function, one(3), 1), (inl_defaults_kw, one(3), 1), (inl_kwonly, one(3), 1), (inl_varargs, two(3), 1),
    (inl_star_call, two(3), 1), (inl_nested_def, one(3), 1), (inl_lambda, one(3), 1),
    (inl_closure_outer_cell, one(3), 1), (inl_closure_created_inside, one(3), 1),
    (inl_closure_mutated_inside, one(3), 1), (inl_partial, one(3), 1), (inl_partial_inside, one(3), 1),
    (inl_staticmethod, one(3), 1), (inl_classmethod, one(3), 1), (inl_method, one(3), 1),
    (inl_recursion, one(3), 1), (inl_returned_closure, one(3), 1),
    (cls_dataclass_global, one(3), 1), (cls_dataclass_output, one(3), 1), (cls_dataclass_default, one(3), 1),
    (cls_frozen_output, one(3), 1), (cls_namedtuple_output, one(3), 1), (cls_namedtuple_kw, one(3), 1),
    (cls_namedtuple_attr, one(3), 1), (cls_enum, one(3), 1), (cls_enum_value, one(3), 1),
    (cls_instance_inside, one(3), 1), (cls_subclass_super, one(3), 1), (cls_global_object, one(3), 1),
    (cls_isinstance, one(3), 1), (cls_getattr_hasattr, one(3), 1), (cls_setattr_new, one(3), 1),
    (cls_type_of, one(3), 1), (cls_dataclass_fields, one(3), 1), (cls_output_dict_of_dataclass, one(3), 0),
    (ct_list_methods, one(3), 1), (ct_list_reverse_index, one(3), 1), (ct_dict_methods, one(3), 1),
    (ct_dict_in_eq, one(3), 1), (ct_tuple_ops, one(3), 1), (ct_list_concat_repeat, one(3), 1),
    (ct_star_unpack, one(3), 1), (ct_nested_unpack, one(3), 1), (ct_list_comprehension, one(3), 1),
    (ct_dict_comprehension, one(3), 1), (ct_comprehension_filter, one(3), 1),
    (ct_nested_comprehension, one(3), 1), (ct_genexp_sum, one(3), 1), (ct_genexp_any_all, one(3), 1),
    (ct_genexp_tuple_list, one(3), 1), (ct_genexp_min_max, one(3), 1), (ct_sorted_reversed, one(3), 1),
    (ct_slicing, one(3), 1), (ct_list_setitem, one(3), 1), (ct_list_in_tensor_identity, one(3), 1),
    (ct_string_format, one(3), 0), (ct_str_methods, one(3), 1),
    (lp_enumerate, one(3), 1), (lp_zip, two(3, 2), 1), (lp_reversed, one(3), 1), (lp_dict, one(3), 1),
    (lp_tensor_rows, one(4, 3), 1), (lp_break_continue, one(3), 1), (lp_while_break, one(3), 1),
    (lp_nested, one(3), 1), (lp_for_else, one(3), 1), (cf_elif, one(2, 3), 1), (cf_and_or, one(2, 3), 1),
    (cf_assert_ok, one(2, 3), 1), (cf_try_finally, one(3), 1), (cf_try_except_not_raised, one(3), 1),
    (cf_try_except_else, one(3), 1), (cf_ternary_chain, one(2), 1), (cf_is_none_default, one(3), 0),
    (cf_return_in_loop, one(3), 1), (cf_with_user_ctx, one(3), 1), (cf_shape_conditions, one(3, 4), 1),
    (gm_no_grad, lambda s: (torch.randn(3, requires_grad=True),), 1),
    (gm_enable_grad_inside_no_grad, lambda s: (torch.randn(3, requires_grad=True),), 1),
    (gm_set_grad_enabled_ctx, lambda s: (torch.randn(3, requires_grad=True),), 1),
    (gm_set_grad_enabled_call, lambda s: (torch.randn(3, requires_grad=True),), 1),
    (gm_decorator, lambda s: (torch.randn(3, requires_grad=True),), 1),
    (gm_inference_mode, one(3), 1), (gm_is_grad_enabled, one(3), 1),
    (gm_autocast, lambda s: (torch.randn(4, 4), torch.randn(4, 4)), 1),
    (gm_autocast_disabled, lambda s: (torch.randn(4, 4), torch.randn(4, 4)), 1),
    (bi_math, one(3), 1), (bi_operator, one(3), 1), (bi_reduce, one(3), 1), (bi_chain, one(3), 1),
    (bi_product, one(3), 1), (bi_conversions, one(3), 1), (bi_min_max_args, one(3), 1),
    (bi_range_args, one(3), 1), (bi_map_filter, one(3), 1), (bi_callable_len, one(3), 1),
    (bi_divmod_pow, one(3), 1),
]


@pytest.mark.parametrize("fn,make_args,graphs", CASES, ids=[c[0].__name__ for c in CASES])
def test_breadth(fn, make_args, graphs):
    backend = run_differential(fn, make_args)
    assert backend.graph_count == graphs


# ---- more: inputs of user types, closures escaping, typing, recursion ------------------------------
from typing import Dict, List, Tuple  # noqa: E402


def returns_closure(x):
    k = x.sum()

    def scale(y, bias=1.0):
        return y * k + bias
    return scale


def dataclass_input(cfg, x):
    return x * cfg.scale + cfg.hidden if cfg.act == "relu" else x


def namedtuple_input(p):
    return p.x + p.y, p[1] * 2


def enum_input(x, color):
    return x + color.value


def nested_input(batch):
    return batch["inputs"][0] * batch["scale"] + batch["inputs"][1]


def annotated(x: torch.Tensor, n: int = 2) -> Tuple[torch.Tensor, List[int]]:
    sizes: List[int] = [n, n + 1]
    table: Dict[str, int] = {"a": 1}
    return x * sizes[1] + table["a"], sizes


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def bounded_recursion(x):
    return x * fib(6)


def tuple_items_index(x):
    items = [(2, x), (1, x * 2), (3, x * 3)]
    return [items[1][1], items[0][1]]


def chained_comparisons(x):
    lo, hi = 1, x.shape[0]
    return x * (lo < 2 < hi <= 10) + (lo == 1 != hi)


def string_keys_loop(x):
    out = {}
    for name in ("q", "k", "v"):
        out[name.upper()] = x * len(name)
    return out


def tuple_of_shapes(x, y):
    shapes = [t.shape for t in (x, y)]
    return x.reshape(shapes[1]) + y if shapes[0].numel() == shapes[1].numel() else x


# The Python values below differ between the two seeds (a config field, an enum member, a scale):
# each is specialised and guarded, so each seed compiles its own graph.
MORE = [
    (returns_closure, one(3), 1, lambda f, a: f(*a)(torch.ones(3))),
    (dataclass_input, lambda s: (Config(hidden=s + 1), torch.randn(3)), 2, None),
    (namedtuple_input, lambda s: (Point(torch.randn(2), torch.randn(2)),), 1, None),
    (enum_input, lambda s: (torch.randn(3), [Color.RED, Color.BLUE][s % 2]), 2, None),
    (nested_input, lambda s: ({"inputs": [torch.randn(2), torch.randn(2)], "scale": 2.0 + s},), 2, None),
    (annotated, one(3), 1, None), (bounded_recursion, one(3), 1, None), (tuple_items_index, one(3), 1, None),
    (chained_comparisons, one(4), 1, None), (string_keys_loop, one(3), 1, None),
    (tuple_of_shapes, lambda s: (torch.randn(2, 3), torch.randn(3, 2)), 1, None),
]


@pytest.mark.parametrize("fn,make_args,graphs,use", MORE, ids=[c[0].__name__ for c in MORE])
def test_breadth_more(fn, make_args, graphs, use):
    if use is None:
        backend = run_differential(fn, make_args)
        assert backend.graph_count == graphs
        return
    from tests.helpers import CountingBackend, assert_same
    import framejit
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    for seed in (0, 1):
        args = make_args(seed)
        assert_same(use(compiled, args), use(fn, args))
    assert backend.graph_count == graphs


# ---- sets of constants -----------------------------------------------------------------------------
ALLOWED = {"relu", "gelu"}


def set_literal_and_in(x):
    names = {"a", "b", "a"}
    names.add("c")
    return x * len(names) + ("b" in names) + ("z" in names)


def set_ops(x):
    a, b = {1, 2, 3}, {2, 3, 4}
    u, i, d = a | b, a & b, a - b
    a |= {9}
    return x * (len(u) + len(i) + len(d) + len(a)), sorted(a ^ b)


def set_methods(x):
    s = set([1, 2, 2, 3])
    s.discard(1)
    s.update([5, 6])
    t = frozenset({2, 3})
    return x * len(s) + s.issuperset(t) + len(s.union(t)) + len(s.difference(t))


def set_global_membership(x, act):
    return torch.relu(x) if act in ALLOWED else x


def set_set_comprehension(x):
    sizes = {n % 3 for n in range(10)}
    return x * sum(sizes), sizes


SETS = [
    (set_literal_and_in, one(3), 1), (set_ops, one(3), 1), (set_methods, one(3), 1),
    (set_set_comprehension, one(3), 1),
]


@pytest.mark.parametrize("fn,make_args,graphs", SETS, ids=[c[0].__name__ for c in SETS])
def test_sets(fn, make_args, graphs):
    backend = run_differential(fn, make_args)
    assert backend.graph_count == graphs


def test_set_global_membership_guards_the_set():
    backend = run_differential(set_global_membership, lambda s: (torch.randn(3), ["relu", "tanh"][s]))
    # two entries ("relu" in ALLOWED, "tanh" not); only the first runs a tensor op, so one graph
    assert backend.graph_count == 1
    compiled = framejit.compile(set_global_membership)
    x = torch.randn(3)
    assert torch.equal(compiled(x, "tanh"), x)
    ALLOWED.add("tanh")  # the set is guarded by value: the entry for "tanh" must not be reused
    try:
        assert torch.equal(compiled(x, "tanh"), torch.relu(x))
    finally:
        ALLOWED.discard("tanh")
