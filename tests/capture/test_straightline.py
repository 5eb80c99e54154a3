"""Differential tests of straight-line tensor programs (issue: foundation).

Each case runs eagerly and compiled (fullgraph=True) on two fresh input sets and must capture exactly the
stated number of graphs (1 where any tensor op happens, 0 where the function only rebuilds values).
"""
from __future__ import annotations

import math
import operator

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import run_differential

SCALE = 3.0
OFFSETS = (1, 2, 3)
CONFIG = {"eps": 1e-5, "act": "relu", "layers": 2}


def T(*shape, dtype=torch.float32):
    return lambda seed: torch.randn(*shape, dtype=dtype)


def two(*shape):
    return lambda seed: (torch.randn(*shape), torch.randn(*shape))


def one(*shape):
    return lambda seed: (torch.randn(*shape),)


# ---- the programs ---------------------------------------------------------------------------------
def add(x, y): return x + y
def sub(x, y): return x - y
def mul(x, y): return x * y
def div(x, y): return x / (y.abs() + 1)
def floordiv(x, y): return x // (y.abs() + 1)
def mod(x, y): return x % (y.abs() + 1)
def power(x, y): return x.abs() ** 1.5
def matmul(x, y): return x @ y.T
def scalar_ops(x): return 2 * x + 1 - x / 4
def rsub(x): return 1 - x
def rdiv(x): return 2 / (x.abs() + 1)
def neg(x): return -x
def pos(x): return +x
def invert(x): return ~(x > 0)
def bitwise(x, y): return (x > 0) & (y > 0) | (x < -1) ^ (y < -1)
def compare_ops(x, y): return (x < y, x <= y, x > y, x >= y, x == y, x != y)
def chained(x): return ((x + 1) * 2 - 3) / 4
def inplace_local(x):
    y = x * 2
    y += 1
    y *= 3
    return y
def inplace_method_local(x):
    y = x.clone()
    y.add_(1).mul_(2)
    return y
def methods(x): return x.relu().sigmoid().tanh().exp().log1p()
def method_kwargs(x): return x.sum(dim=1, keepdim=True), x.mean(dim=-1), x.max(dim=0).values
def method_tuple(x):
    values, indices = x.max(dim=1)
    return values * 2, indices
def topk(x):
    v, i = torch.topk(x, 2, dim=-1)
    return v, i
def shape_attr(x): return x.reshape(x.shape[0], -1) * x.shape[1]
def size_method(x): return x.view(x.size(0), x.size(1) * x.size(2))
def dim_ndim(x): return x * x.dim() + x.ndim
def numel(x): return x.flatten() / x.numel()
def dtype_attr(x): return x.to(torch.float64) if x.dtype == torch.float32 else x
def device_attr(x): return torch.zeros(3, device=x.device) + x.sum()
def transpose_T(x): return x.T @ x
def mT(x): return x.mT
def permute(x): return x.permute(2, 0, 1).contiguous()
def unsqueeze_squeeze(x): return x.unsqueeze(0).squeeze(0).unsqueeze(-1)
def expand(x): return x[:, None].expand(-1, 4, -1)
def torch_fns(x, y): return torch.add(x, y, alpha=2), torch.cat([x, y], dim=0), torch.stack((x, y))
def torch_where(x, y): return torch.where(x > y, x, y)
def torch_kw(x): return torch.sum(x, dim=0, keepdim=True), torch.softmax(x, dim=-1)
def functional(x): return F.relu(x), F.gelu(x), F.softmax(x, dim=-1), F.layer_norm(x, x.shape[-1:])
def functional_linear(x, w): return F.linear(x, w)
def functional_pad(x): return F.pad(x, (1, 2))
def dropout_eval(x): return F.dropout(x, p=0.5, training=False)
def math_consts(x): return x * math.pi + math.sqrt(2.0) + math.floor(2.7)
def math_on_shape(x): return x / math.sqrt(x.shape[-1])
def index_int(x): return x[0], x[-1], x[1, 2]
def index_slice(x): return x[1:], x[:, ::2], x[1:3, 0:4:2]
def index_none_ellipsis(x): return x[None], x[..., 0], x[:, None, ...]
def index_negative(x): return x[-2:], x[:, -1]
def index_tensor(x): return x[torch.tensor([0, 2])]
def index_bool_select(x): return x.masked_fill(x > 0, 0.0)
def setitem_local(x):
    y = x.clone()
    y[0] = 0
    y[:, 1] = y[:, 1] * 2
    return y
def constants_only(x): return 1 + 2 * 3
def return_input(x): return x
def return_tuple(x): return x, x + 1, (x * 2, [x - 1])
def return_dict(x): return {"a": x + 1, "b": {"c": x * 2}, "n": 3}
def return_list(x): return [x.sum(), x.mean(), None, "s"]
def return_nested_const(x): return (1, (2.5, "x"), None, True), x + 0
def python_arith(x):
    a = 3
    b = a * 2 + 1
    c = b // 2 - a % 2
    d = 7 / 2 ** 2
    return x * c + d
def python_bool_logic(x):
    flag = True
    other = not flag
    if flag and not other:
        return x + 1
    return x - 1
def python_compare_chain(x):
    n = x.shape[0]
    if 0 < n <= 10:
        return x * 2
    return x
def string_ops(x):
    name = "layer" + str(2)
    return x * len(name)
def fstring_const(x):
    key = f"{'a'}_{3}"
    return {key: x + 1}
def tuple_unpack(x):
    a, b = x.chunk(2, dim=0)
    return b, a
def star_unpack(x):
    first, *rest = x.unbind(0)
    return first, torch.stack(rest)
def list_literal_index(x):
    items = [x, x * 2, x * 3]
    return items[1] + items[-1]
def dict_literal(x):
    d = {"a": x, "b": x + 1}
    return d["a"] * d["b"]
def tuple_concat(x):
    shape = x.shape[:1] + (-1,)
    return x.reshape(shape)
def shape_unpack(x):
    b, c, h = x.shape
    return x.reshape(b, c * h)
def if_shape(x):
    if x.shape[0] > 2:
        return x.sum(0)
    return x.mean(0)
def if_dtype(x):
    if x.dtype is torch.float32:
        return x.double()
    return x.float()
def if_ndim(x):
    return x.flatten() if x.ndim > 1 else x
def if_none(x, y=None):
    if y is None:
        return x * 2
    return x * y
def ternary(x): return x + 1 if x.shape[-1] % 2 == 0 else x - 1
def is_floating(x): return x * 2 if x.is_floating_point() else x + 1
def global_const(x): return x * SCALE + OFFSETS[1]
def global_dict(x): return x + CONFIG["eps"] if CONFIG["act"] == "relu" else x
def builtins_use(x):
    n = len(x)
    m = min(x.shape)
    k = max(3, 4)
    return x * (n + m + k + abs(-2) + round(2.6))
def int_float_bool(x): return x * int(2.9) + float(3) + bool(1)
def isinstance_check(x):
    if isinstance(x, torch.Tensor):
        return x + 1
    return x
def kwargs_call(x): return torch.clamp(x, min=-0.5, max=0.5)
def dtype_cast(x): return x.to(dtype=torch.float16).float(), x.long(), x.bool()
def int_tensor(x): return (x * 10).long() // 3, (x > 0).sum()
def reductions(x): return x.sum(), x.mean(1), x.amax(0), x.argmax(-1), x.var(0), x.std(1), x.prod(1), x.norm()
def creation(x): return torch.zeros_like(x), torch.ones(2, 3), torch.arange(5) * 2, torch.full((2,), 3.0), torch.eye(3)
def creation_dtype(x): return torch.zeros(3, dtype=x.dtype), torch.empty(0).shape
def zero_dim(x): return x.sum() * 2 + torch.tensor(1.0)
def empty_tensor(x): return x[:0] * 2
def conv(x, w): return F.conv2d(x, w, padding=1)
def pool(x): return F.max_pool2d(x, 2), F.avg_pool2d(x, 2), F.adaptive_avg_pool2d(x, 1)
def einsum(x, y): return torch.einsum("ij,kj->ik", x, y)
def bmm(x): return torch.bmm(x, x.transpose(1, 2))
def split_chunk(x): return x.split(2, dim=1), x.chunk(3, dim=0)
def cat_list_comp(x): return torch.cat((x, x * 2, x * 3), dim=-1)
def contiguous_input(x): return x.t().contiguous().view(-1)
def noncontig_input(x): return x + 1
def operator_module(x): return operator.add(x, 1), operator.mul(x, x), operator.getitem(x, 0)
def range_loop_unrolled(x):
    for i in range(3):
        x = x + i
    return x
def for_over_tuple(x):
    total = x
    for s in (1.0, 2.0, 3.0):
        total = total * s
    return total
def while_python(x):
    i = 0
    while i < 3:
        x = x * 2
        i += 1
    return x
def nested_return(x): return [{"k": (x, x + 1)}]
def sum_of_list(x): return sum([x, x * 2, x * 3])
def grad_enabled_query(x): return x * 2 if torch.is_grad_enabled() else x
def requires_grad_query(x): return x * 2 if x.requires_grad else x * 3
def triu_mask(x):
    n = x.shape[-1]
    mask = torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
    return x.masked_fill(mask, float("-inf")).softmax(-1)
def layer_norm_manual(x):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-5)
def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return F.softmax(scores, dim=-1) @ v
def sdpa(q, k, v): return F.scaled_dot_product_attention(q, k, v, is_causal=True)
def embedding(idx, w): return F.embedding(idx, w)
def one_hot(idx): return F.one_hot(idx, num_classes=5)
def cross_entropy(x, t): return F.cross_entropy(x, t)
def clamp_methods(x): return x.clamp(min=0), x.clamp_max(1.0), torch.clip(x, -1, 1)
def complex_index(x): return x[1:, [0, 2]], x[..., 1:2]
def tensor_method_chain(x): return x.view(-1).contiguous().reshape(2, -1).t().flatten()
def float_of_shape(x): return x / float(x.shape[0])
def keyword_only(x, *, scale=2.0): return x * scale
def varargs(*xs): return sum(xs[1:], xs[0])
def varkw(x, **kw): return x * kw.get("scale", 1.0) + kw.get("bias", 0.0)
def default_args(x, n=3, flag=False): return x * n if not flag else x
def slicing_list(x):
    parts = [x[0], x[1], x[2]]
    return parts[1:], parts[::-1]
def bool_constant_ops(x): return x * (True + True)
def abs_builtin(x): return abs(x)
def pow_builtin(x): return pow(x, 2)
def divmod_const(x):
    q, r = divmod(7, 3)
    return x * q + r
def tensor_truediv_int(x): return (x * 100).int() / 7
def where_scalar(x): return torch.where(x > 0, x, 0.0)


CASES = [
    (add, two(3, 4), 1), (sub, two(3, 4), 1), (mul, two(2, 5), 1), (div, two(4), 1), (floordiv, two(4), 1),
    (mod, two(4), 1), (power, two(3), 1), (matmul, two(3, 4), 1), (scalar_ops, one(5), 1), (rsub, one(5), 1),
    (rdiv, one(5), 1), (neg, one(5), 1), (pos, one(5), 1), (invert, one(5), 1), (bitwise, two(6), 1),
    (compare_ops, two(4), 1), (chained, one(3, 3), 1), (inplace_local, one(4), 1),
    (inplace_method_local, one(4), 1), (methods, one(6), 1), (method_kwargs, one(3, 4), 1),
    (method_tuple, one(3, 4), 1), (topk, one(3, 5), 1), (shape_attr, one(2, 3, 4), 1),
    (size_method, one(2, 3, 4), 1), (dim_ndim, one(2, 2), 1), (numel, one(2, 3), 1), (dtype_attr, one(3), 1),
    (device_attr, one(3), 1), (transpose_T, one(3, 4), 1), (mT, one(2, 3, 4), 1), (permute, one(2, 3, 4), 1),
    (unsqueeze_squeeze, one(3, 4), 1), (expand, one(3, 5), 1), (torch_fns, two(2, 3), 1),
    (torch_where, two(4, 4), 1), (torch_kw, one(3, 4), 1), (functional, one(2, 8), 1),
    (functional_linear, lambda s: (torch.randn(2, 4), torch.randn(3, 4)), 1), (functional_pad, one(2, 3), 1),
    (dropout_eval, one(4, 4), 1), (math_consts, one(3), 1), (math_on_shape, one(2, 16), 1),
    (index_int, one(3, 4), 1), (index_slice, one(4, 6), 1), (index_none_ellipsis, one(2, 3, 4), 1),
    (index_negative, one(4, 5), 1), (index_tensor, one(4, 3), 1), (index_bool_select, one(3, 3), 1),
    (setitem_local, one(3, 4), 1), (constants_only, one(2), 0), (return_input, one(2), 0),
    (return_tuple, one(3), 1), (return_dict, one(3), 1), (return_list, one(4), 1),
    (return_nested_const, one(2), 1), (python_arith, one(3), 1), (python_bool_logic, one(3), 1),
    (python_compare_chain, one(4), 1), (string_ops, one(3), 1), (fstring_const, one(3), 1),
    (tuple_unpack, one(4, 2), 1), (star_unpack, one(4, 3), 1), (list_literal_index, one(3), 1),
    (dict_literal, one(3), 1), (tuple_concat, one(2, 3, 4), 1), (shape_unpack, one(2, 3, 4), 1),
    (if_shape, one(3, 2), 1), (if_dtype, one(3), 1), (if_ndim, one(2, 3), 1), (if_none, one(3), 1),
    (ternary, one(2, 4), 1), (is_floating, one(3), 1), (global_const, one(3), 1), (global_dict, one(3), 1),
    (builtins_use, one(3, 5), 1), (int_float_bool, one(2), 1), (isinstance_check, one(3), 1),
    (kwargs_call, one(5), 1), (dtype_cast, one(4), 1), (int_tensor, one(5), 1), (reductions, one(4, 5), 1),
    (creation, one(2, 3), 1), (creation_dtype, one(3), 1), (zero_dim, one(3), 1), (empty_tensor, one(3, 2), 1),
    (conv, lambda s: (torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)), 1), (pool, one(1, 2, 4, 4), 1),
    (einsum, two(3, 4), 1), (bmm, one(2, 3, 4), 1), (split_chunk, one(3, 4), 1), (cat_list_comp, one(2, 2), 1),
    (contiguous_input, one(3, 4), 1), (noncontig_input, lambda s: (torch.randn(4, 6)[:, ::2],), 1),
    (operator_module, one(3, 3), 1), (range_loop_unrolled, one(3), 1), (for_over_tuple, one(3), 1),
    (while_python, one(3), 1), (nested_return, one(2), 1), (sum_of_list, one(3), 1),
    (grad_enabled_query, one(3), 1), (requires_grad_query, lambda s: (torch.randn(3, requires_grad=True),), 1),
    (triu_mask, one(2, 4, 4), 1), (layer_norm_manual, one(2, 8), 1),
    (attention, lambda s: (torch.randn(2, 3, 4), torch.randn(2, 3, 4), torch.randn(2, 3, 4)), 1),
    (sdpa, lambda s: (torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)), 1),
    (embedding, lambda s: (torch.randint(0, 6, (2, 3)), torch.randn(6, 4)), 1),
    (one_hot, lambda s: (torch.randint(0, 5, (4,)),), 1),
    (cross_entropy, lambda s: (torch.randn(4, 5), torch.randint(0, 5, (4,))), 1),
    (clamp_methods, one(5), 1), (complex_index, one(3, 4), 1), (tensor_method_chain, one(2, 3), 1),
    (float_of_shape, one(4), 1), (keyword_only, one(3), 1), (varargs, two(3), 1), (default_args, one(3), 1),
    (slicing_list, one(3, 2), 1), (bool_constant_ops, one(2), 1), (abs_builtin, one(3), 1),
    (pow_builtin, one(3), 1), (divmod_const, one(3), 1), (tensor_truediv_int, one(4), 1),
    (where_scalar, one(4), 1),
]


@pytest.mark.parametrize("fn,make_args,graphs", CASES, ids=[c[0].__name__ for c in CASES])
def test_straight_line(fn, make_args, graphs):
    backend = run_differential(fn, make_args)
    assert backend.graph_count == graphs


def test_keyword_arguments_at_call_site():
    backend = run_differential(keyword_only, one(3), kwargs_fn=lambda s: {"scale": 4.0})
    assert backend.graph_count == 1


def test_varkw_call():
    backend = run_differential(varkw, one(3), kwargs_fn=lambda s: {"scale": 2.0, "bias": 1.5})
    assert backend.graph_count == 1


def test_optional_tensor_argument_given():
    backend = run_differential(if_none, two(3))
    assert backend.graph_count == 1


def test_dtypes_float16_and_int():
    run_differential(chained, lambda s: (torch.randn(4, dtype=torch.float64),))
    run_differential(scalar_ops, lambda s: (torch.randint(-5, 5, (4,)),))
    run_differential(add, lambda s: (torch.randn(4).half(), torch.randn(4).half()))
