"""Differential tests for idioms of PyTorch's test_functions.py that framejit traces: backend flag objects,
state queries, float methods on dynamic floats, namedtuple classes made while tracing, modules made while
tracing, `yield from` in run-ahead generators, mapping objects in dict() and **, defaultdicts and dicts
keyed by Size/tensors from outside, and Dynamo-style placeholder names and stack traces."""
from __future__ import annotations

import collections
import functools
from collections.abc import KeysView, MutableMapping

import pytest
import torch

import framejit
from framejit.capture.breaks import Unsupported
from tests.helpers import CountingBackend, run_differential


@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


def test_cublas_flag_read_and_guarded():
    def fn(x):
        if torch.backends.cuda.matmul.allow_tf32:
            return x.sin() + 1
        return x.cos() - 1

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        for flag in (False, True, False):
            torch.backends.cuda.matmul.allow_tf32 = flag
            x = torch.randn(3)
            torch.testing.assert_close(compiled(x), fn(x))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    assert backend.graph_count == 2  # one trace per flag value: the second False call hits the first entry


def test_cublas_flag_missing_attribute_raises_as_eager():
    def fn(x):
        return x + torch.backends.cuda.matmul.no_such_flag

    with pytest.raises(AttributeError):
        fn(torch.ones(1))
    with pytest.raises(AttributeError):
        framejit.compile(fn, backend="eager", fullgraph=True)(torch.ones(1))


def test_privateuse1_name_is_a_guarded_constant():
    def fn(x):
        if torch._C._get_privateuse1_backend_name() == "privateuseone":
            return x + 1
        return x - 1

    backend = run_differential(fn, lambda seed: (torch.randn(2 + seed),))
    assert backend.graph_count == 2


def test_float_method_on_dynamic_float():
    def fn(t, m):
        return 2 * t if m.is_integer() else t

    backend = run_differential(fn, lambda seed: (torch.tensor([1.0]), [1.0, 1.5, 2.0, 2.5][seed]), seeds=(0, 1, 2, 3))
    assert backend.graph_count >= 2


def test_namedtuple_made_while_tracing():
    def fn(a, b):
        point = collections.namedtuple("point", ["x", "y", "xy"], defaults=(None, 1, None))
        tmp = point(a, xy=b)
        out = point(tmp.x, tmp[1], tmp.xy + b)
        return out.x + out.xy * out.y, type(out).__name__, point._fields, type(out).__module__

    backend = run_differential(fn, lambda seed: (torch.randn(3), torch.randn(3)))
    assert backend.graph_count == 1


def test_namedtuple_with_bad_field_raises_as_eager():
    def fn(a):
        collections.namedtuple("bad", ["x", "1y"])
        return a + 1

    run_differential(fn, lambda seed: (torch.randn(2),))


class _Pair(torch.nn.Module):
    def forward(self, x, y):
        out = torch.nn.ReLU()(torch.cat((x, y), dim=1))
        return torch.nn.Softmax(dim=-1)(out)


def _apply(mod, x, y):
    return mod(x, y)


@pytest.mark.parametrize("variant", ["module", "method", "library"])
def test_modules_made_while_tracing(variant):
    def fn(x, y):
        if variant == "library":
            return torch.nn.Softmax(dim=-1)(x + y * 2)
        mod = _Pair() if variant == "module" else _Pair().forward
        return functools.partial(_apply, mod)(x=x, y=y)

    backend = run_differential(fn, lambda seed: (torch.randn(2, 3 + seed), torch.randn(2, 3 + seed)))
    assert backend.graph_count == 2  # one per shape: no break


def test_module_with_parameters_made_while_tracing_breaks_and_keeps_rng():
    def fn(x):
        return torch.nn.Linear(2, 2)(x) + torch.rand(2)

    for compiled in (fn, framejit.compile(fn, backend="eager")):
        torch.manual_seed(0)
        result = compiled(torch.ones(2))
        if compiled is fn:
            expected = result
    torch.testing.assert_close(result, expected)
    with pytest.raises(Unsupported):
        framejit.compile(fn, backend="eager", fullgraph=True)(torch.ones(2))


def test_module_made_while_tracing_is_fresh_per_call():
    def fn(x):
        return torch.nn.ReLU(), x + 1

    compiled = framejit.compile(fn, backend="eager")
    first, second = compiled(torch.ones(1))[0], compiled(torch.ones(1))[0]
    assert type(first) is torch.nn.ReLU and first is not second


class _Keys(KeysView):
    def __init__(self, keys):
        self.keys = keys

    def __iter__(self):
        yield from self.keys

    def __len__(self):
        return len(self.keys)


def _inner(n):
    yield n
    yield n + 1
    return n * 10


def _outer(n):
    result = yield from _inner(n)
    yield result
    yield from (n, n)


def test_yield_from_in_generators():
    def fn(x):
        keys = _Keys([1, 2, 3, 3])
        return len(set(keys)) * x, list(_outer(2)), [x * k for k in keys]

    backend = run_differential(fn, lambda seed: (torch.randn(3),))
    assert backend.graph_count == 1


class _TensorDict(MutableMapping):
    def __init__(self):
        self._dict = {}

    def __getitem__(self, key):
        return self._dict[key]

    def __setitem__(self, key, value):
        self._dict[key] = value

    def __delitem__(self, key):
        del self._dict[key]

    def __iter__(self):
        return iter(self._dict)

    def __len__(self):
        return len(self._dict)


def _scale(x, a=1, b=0):
    return x * a + b


def test_mapping_object_in_dict_and_double_star():
    mapping = _TensorDict()
    mapping["a"] = torch.full((3,), 2.0)

    def fn(x):
        copy = dict(mapping)
        return x * copy["a"], _scale(x, **mapping), {**mapping, "b": 1}["b"], list(mapping.keys())

    backend = run_differential(fn, lambda seed: (torch.randn(3),))
    assert backend.graph_count == 1
    mapping["b"] = torch.ones(3)  # a new key: recompiles, and the new value is used
    run_differential(fn, lambda seed: (torch.randn(3),))


def test_double_star_with_non_string_keys_raises_as_eager():
    mapping = _TensorDict()
    mapping[1] = torch.ones(3)

    def fn(x):
        return _scale(x, **mapping)

    run_differential(fn, lambda seed: (torch.randn(3),))


def test_made_keys_view_escapes():
    mapping = _TensorDict()
    mapping["k"] = 1

    def fn(x):
        return mapping.keys(), x + 1

    keys, _ = framejit.compile(fn, backend="eager", fullgraph=True)(torch.ones(1))
    assert type(keys) is KeysView and list(keys) == ["k"] and keys._mapping is mapping


@pytest.mark.parametrize("factory", [dict, list, tuple, set, lambda: dict()])
def test_defaultdict_from_outside_with_tensor_keys(factory):
    param = torch.nn.Parameter(torch.ones(2, 2))
    eager_dd, compiled_dd = collections.defaultdict(factory), collections.defaultdict(factory)

    def body(dd, x):
        dd["a"] = x + 1
        dd[param] = 123
        dd["c"] = x * 2
        return dd["b"]

    backend = CountingBackend()
    compiled = framejit.compile(body, backend=backend, fullgraph=True)
    for _ in range(3):
        x = torch.randn(3)
        assert compiled(compiled_dd, x) == body(eager_dd, x)
        assert list(map(type, compiled_dd)) == list(map(type, eager_dd)) and list(compiled_dd)[1] is param
        assert compiled_dd[param] == 123 and torch.equal(compiled_dd["c"], eager_dd["c"])
    assert backend.graph_count == 2  # the first call adds keys; the third hits the second entry


def test_dict_keyed_by_tensor_guards_identity():
    a, b = torch.ones(1), torch.ones(1)  # equal values, different objects

    def fn(d, x):
        return x + sum(d.values())

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    x = torch.zeros(1)
    assert compiled({a: 1}, x).item() == 1
    assert compiled({b: 2}, x).item() == 2
    assert backend.graph_count == 2


def test_dict_keyed_by_size_from_outside():
    def fn(x, cached):
        if x.shape not in cached:
            cached[x.shape] = x
        return x + cached[x.shape]

    compiled = framejit.compile(fn, backend="eager", fullgraph=True)
    eager_cache, compiled_cache = {}, {}
    for shape in ((2, 3), (2, 3), (3,), (2, 3)):
        x = torch.randn(shape)
        torch.testing.assert_close(compiled(x, compiled_cache), fn(x, eager_cache))
        assert list(compiled_cache) == list(eager_cache)


def test_dict_keys_of_equal_values_but_other_types_recompile():
    def fn(d, x):
        return x + 1 if type(next(iter(d))) is bool else x - 1

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    x = torch.zeros(1)
    assert compiled({1: 0}, x).item() == -1
    assert compiled({True: 0}, x).item() == 1


def test_placeholders_named_as_dynamo_names_them():
    def fn(x, y):
        return torch.mul(x, y)

    backend = CountingBackend()
    framejit.compile(fn, backend=backend)(torch.ones(2), torch.ones(2))
    placeholders = [n for n in backend.graphs[0].graph.nodes if n.op == "placeholder"]
    assert [(n.target, n.name) for n in placeholders] == [("L_x_", "l_x_"), ("L_y_", "l_y_")]
    code = backend.graphs[0].print_readable(print_output=False)
    assert 'File "' not in code and "test_functions_gaps.py" in code  # FX parsed the stack trace


@pytest.mark.parametrize("op", [torch.ops.aten.add.Tensor, torch.ops.aten.add_.Tensor, torch.ops.aten.mul.Tensor])
def test_pybind_readonly_property_read_and_guarded(op):
    def fn(x, schema):
        if schema.is_mutable:
            return x.cos(), schema.name
        return x.sin(), schema.name

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    for schema in (torch.ops.aten.add.Tensor._schema, op._schema):
        x = torch.randn(3)
        result, expected = compiled(x, schema), fn(x, schema)
        torch.testing.assert_close(result[0], expected[0])
        assert result[1] == expected[1]


def test_tensors_made_from_constants_have_known_data():
    def fn(a, b):
        items = [a, b, a + 1, b + 1]
        i = torch.as_tensor(2)
        j = torch.tensor(1) + 2
        k = torch.tensor(0)
        k.add_(1)  # in place: the known value follows
        flag = bool(torch.tensor(0.0))
        return items[i] + items[j] + items[k], float(torch.tensor(1.5) * 2), flag, int(j)

    backend = run_differential(fn, lambda seed: (torch.randn(2 + seed), torch.randn(2 + seed)))
    assert backend.graph_count == 2


def test_tensor_index_errors_as_eager():
    def float_index(a):
        return [a, a][torch.tensor(1.0)]

    def two_elements(a):  # no known data: a graph break, then eager's TypeError
        return [a, a][torch.tensor([0, 1])]

    run_differential(float_index, lambda seed: (torch.randn(2),))
    run_differential(two_elements, lambda seed: (torch.randn(2),), fullgraph=False)


@pytest.mark.parametrize("value_dtype", [torch.float32, torch.float64, torch.int64])
def test_addcmul_with_a_tensor_value(value_dtype):
    def fn(x, y, z, s):
        out = x.addcmul_(y, z, value=s)
        return out, torch.addcdiv(x, y, z + 2, value=s)

    def make(seed):
        return (torch.ones(2, 3 + seed), torch.ones(2, 3 + seed) + 1, torch.rand(2, 3 + seed),
                torch.tensor(3, dtype=value_dtype) if value_dtype is torch.int64 else
                torch.tensor(0.3 + seed, dtype=value_dtype))

    backend = run_differential(fn, make)
    assert backend.graph_count == 2


@pytest.mark.parametrize("base_dtype", [torch.float32, torch.float64])
def test_foreach_pow_and_lerp_with_tensor_scalars(base_dtype):
    def pow_fn(base, exps):
        return torch._foreach_pow(base, exps)

    def lerp_fn(xs, ys, weight):
        torch._foreach_lerp_(xs, ys, weight)
        return [x * 2 for x in xs]

    run_differential(pow_fn, lambda seed: (torch.tensor(0.8 + seed, dtype=base_dtype),
                                           [torch.tensor(3.4), torch.rand(2, 2)]))
    run_differential(lerp_fn, lambda seed: ([torch.ones(2, 2) * 4.26, torch.ones(3) * 3.14],
                                            [torch.ones(2, 2), torch.randn(3)],
                                            torch.tensor(0.5 + seed / 4, dtype=base_dtype)))


def test_addcmul_with_a_tensor_value_on_onnxrt():
    def fn(x, y, z, s):
        return x.addcmul(y, z, value=s) * 2

    run_differential(fn, lambda seed: (torch.ones(2, 2), torch.rand(2, 2), torch.rand(2, 2), torch.tensor(0.3)),
                     backend="onnxrt")


def test_dict_keyed_by_tensors_with_tensor_values():
    weight, bias = torch.nn.Parameter(torch.ones(2)), torch.zeros(2)

    def fn(state, x):
        return state[weight] * x + state[bias], len(state)

    backend = run_differential(fn, lambda seed: ({weight: torch.randn(2), bias: torch.randn(2)}, torch.randn(2)))
    assert backend.graph_count == 1  # new values under the same keys: the same entry
