"""Dynamic shapes (issue 13): symbolic sizes through capture, automatic dynamic, dynamic=True/False,
mark_dynamic / mark_static / maybe_mark_dynamic and torch's own markers, symbolic ints, guards on
relations and the recompile log. Differential: every call is compared with eager on fresh inputs, and the
number of compilations is asserted."""
from __future__ import annotations

import logging
import math
import textwrap

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same, run_cache_program, run_sizes

SIZES = [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]


def heads(x, w):
    b, s, d = x.shape
    h = 2
    q = (x @ w).view(b, -1, h, d // h).transpose(1, 2)
    scores = (q @ q.transpose(-1, -2)) / (q.size(-1) ** 0.5)
    out = scores.softmax(-1) @ q
    return out.transpose(1, 2).reshape(b, s, d) + x.shape[0] * 2


def batch_args(n):
    return torch.randn(n, 5, 8), torch.randn(8, 8)


def seq_args(n):
    return torch.randn(3, n, 8), torch.randn(8, 8)


@pytest.mark.parametrize("make_args", [batch_args, seq_args], ids=["batch", "seq"])
def test_automatic_dynamic_compiles_at_most_twice(make_args):
    backend = run_sizes(heads, make_args, SIZES)
    assert backend.graph_count == 2  # static first, then one entry for every later size


def test_size_one_specialises_once():
    def fn(x, y):
        return (x + y).sum(0), x.shape[0]

    backend = run_sizes(fn, lambda n: (torch.randn(n, 4), torch.randn(n, 1)), [3, 4, 1, 5, 1, 6, 7])
    assert backend.graph_count == 3  # static, symbolic (sizes >= 2), size 1


def test_dynamic_true_compiles_once():
    backend = run_sizes(heads, batch_args, SIZES, dynamic=True)
    assert backend.graph_count == 1


def test_dynamic_false_recompiles_per_size():
    backend = run_sizes(lambda x: x * x.shape[0], lambda n: (torch.randn(n),), [2, 3, 4], dynamic=False)
    assert backend.graph_count == 3


def test_mark_dynamic_compiles_once():
    def make(n):
        x = torch.randn(n, 6)
        framejit.mark_dynamic(x, 0)
        return (x,)

    backend = run_sizes(lambda x: x.softmax(-1) * x.size(0), make, SIZES)
    assert backend.graph_count == 1


def test_maybe_mark_dynamic_compiles_once():
    def make(n):
        x = torch.randn(n, 6)
        framejit.maybe_mark_dynamic(x, 0)
        return (x,)

    backend = run_sizes(lambda x: x.cumsum(0) - x.shape[0], make, SIZES)
    assert backend.graph_count == 1


def test_torch_markers_are_honoured():
    def make(n):
        x = torch.randn(4, n)
        torch._dynamo.mark_dynamic(x, 1)  # library code written for torch.compile
        return (x,)

    import torch._dynamo  # noqa: F401  (the test plays the library: framejit only reads the attribute)
    backend = run_sizes(lambda x: x.sum(1) / x.shape[1], make, SIZES)
    assert backend.graph_count == 1


def test_mark_static_wins_over_dynamic_true():
    def make(n):
        x = torch.randn(n, 3)
        framejit.mark_static(x, 0)
        return (x,)

    backend = run_sizes(lambda x: x * 2, make, [2, 3, 4], dynamic=True)
    assert backend.graph_count == 3


def test_mark_dynamic_range_is_guarded():
    def make(n):
        x = torch.randn(n)
        framejit.mark_dynamic(x, 0, min=2, max=8)
        return (x,)

    backend = CountingBackend()
    compiled = framejit.compile(lambda x: x + x.shape[0], backend=backend)
    for n in (3, 8, 5):
        args = make(n)
        assert_same(compiled(*args), args[0] + n)
    assert backend.graph_count == 1
    sources = [e.guard.source for e in compiled.entries]
    assert any("<= 8" in s for s in sources)
    with pytest.raises(framejit.ConstraintViolationError, match=r"size\(0\) is 9, not in the range \[2, 8\]"):
        compiled(*make(9))  # past the range: the guard fails and the retrace raises, as torch.compile does


def test_relations_are_guarded():
    def fn(x):
        if x.shape[0] > 4:
            return x * 2
        if x.size(0) % 2 == 0:
            return x - 1
        return x + 1

    backend = run_sizes(fn, lambda n: (torch.randn(n),), [5, 9, 6, 11, 2, 4, 3, 3], dynamic=True)
    assert backend.graph_count == 3  # > 4; <= 4 and even; <= 4 and odd


def test_sizes_unified_by_an_op_are_guarded_equal():
    def fn(x, y):
        return x + y

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, dynamic=True)
    for n in (3, 5):
        x, y = torch.randn(n), torch.randn(n)
        assert_same(compiled(x, y), fn(x, y))
    assert backend.graph_count == 1
    x, y = torch.randn(4), torch.randn(6)
    with pytest.raises(RuntimeError):
        fn(x, y)
    with pytest.raises(RuntimeError):
        compiled(x, y)


def _sum_rows_by_range(x):
    total = x[0]
    for i in range(1, x.size(0)):
        total = total + x[i]
    return total


def test_range_over_a_size_runs_as_python():
    # NOTE [Loops over symbolic ranges]: the loop runs as Python; unrolled, it compiled once per length
    backend = run_sizes(_sum_rows_by_range, lambda n: (torch.randn(n, 3),), [2, 3, 3, 2, 4], dynamic=True)
    assert backend.graph_count == 1


def test_range_over_a_size_unrolls_with_fullgraph():
    backend = run_sizes(_sum_rows_by_range, lambda n: (torch.randn(n, 3),), [2, 3, 3, 2, 4], dynamic=True,
                        fullgraph=True)
    assert backend.graph_count == 3  # no break by choice: one per length (the loop unrolls); each entry reused


def test_returned_sizes_are_ints_from_the_graph():
    def fn(x):
        return x.shape[0] * 2, x.size(1) // 2, x.numel(), x.shape

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, dynamic=True)
    traced = framejit.stats()["frames_traced"]
    for n in (3, 7, 10):
        x = torch.randn(n, n + 2)
        result = compiled(x)
        assert result == fn(x) and type(result[0]) is int and type(result[3]) is torch.Size
    assert backend.graph_count == 0  # sizes only: the graph runs as its own code (NOTE [Graphs that only read
    # sizes])
    assert framejit.stats()["frames_traced"] == traced + 1  # one entry serves every size


def test_view_and_split_heads_with_symbolic_sizes():
    def fn(x):
        b, s, d = x.shape
        y = x.view(b, s, 2, d // 2).permute(0, 2, 1, 3).reshape(b * 2, s, -1)
        return y[:, : s - 1].mean(1), torch.zeros(b, s * 2).sum()

    backend = run_sizes(fn, lambda n: (torch.randn(n, n + 1, 6),), SIZES)
    assert backend.graph_count == 2


def test_placeholders_carry_symbols_and_example_inputs_stay_real():
    backend = CountingBackend()
    compiled = framejit.compile(lambda x, n: x * n + x.shape[0], backend=backend, dynamic=True)
    for n in (3, 4):
        assert_same(compiled(torch.ones(n, 2), 5), torch.ones(n, 2) * 5 + n)
    assert backend.graph_count == 1
    placeholders = [p for p in backend.graphs[0].graph.nodes if p.op == "placeholder"]
    fake = placeholders[0].meta["val"]
    assert isinstance(fake.shape[0], torch.SymInt) and fake.shape[1] == 2
    assert [type(t) for t in backend.example_inputs[0]] == [torch.Tensor, int]  # n: a symbolic int argument


def test_changing_int_argument_becomes_symbolic():
    def fn(x, step):
        return x * step + step, step + 1

    backend = run_sizes(fn, lambda n: (torch.randn(3), n), SIZES)
    assert backend.graph_count == 2


def test_int_used_for_its_value_specialises():
    def fn(x, n):
        return torch.cat([x] * n) + n

    backend = run_sizes(fn, lambda n: (torch.randn(2), n), [2, 3, 3, 2])
    assert backend.graph_count == 2  # each value needs its own graph (the list length); entries reused


def test_int_methods_of_a_symbolic_int_specialise_under_fullgraph():
    """bit_length/as_integer_ratio/real of an int that became symbolic need its value: specialised and
    guarded, not a break (fullgraph raised Unsupported: "attribute 'bit_length' of SymInt(s2)")."""
    def fn(x, n):
        return x + n.bit_length() + n.as_integer_ratio()[0] + n.real * 2

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)
    for n in [3, 5, 9, 5, 3, 1000]:
        x = torch.randn(3)
        assert_same(compiled(x, n), fn(x, n))
    assert backend.graph_count == 4  # one per value (3, 5, 9, 1000); repeated values hit their entry


def test_recompile_log_names_dimension_and_relation(caplog):
    backend = CountingBackend()
    compiled = framejit.compile(lambda x: x * 2, backend=backend)
    framejit.set_logs("recompiles")
    try:
        with caplog.at_level(logging.INFO, logger="framejit"):
            for n in (3, 5, 1):
                x = torch.randn(n, 2)
                assert_same(compiled(x), x * 2)
    finally:
        framejit.set_logs("")
    messages = [r.getMessage() for r in caplog.records]
    assert any("size of dim 0 of L['x'] changed" in m for m in messages)
    assert any("SHAPE_ENV" in m and "x.size(0) >= 2" in m for m in messages)  # size 1 fails the relation
    assert backend.graph_count == 3


def test_module_with_varying_batch_and_sequence():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    backend = CountingBackend()
    compiled = framejit.compile(layer, backend=backend)
    with torch.no_grad():
        for b, s in [(2, 3), (3, 5), (4, 7), (2, 9), (5, 4), (3, 3)]:
            x = torch.randn(b, s, 8)
            torch.testing.assert_close(compiled(x), layer(x))
    assert backend.graph_count <= 3


PROGRAM = textwrap.dedent('''
    import json, sys
    import torch
    import framejit

    def f(x, y):
        return (x * 2).view(x.shape[0], -1).sum(1) + y.shape[0]

    compiled = framejit.compile(f, backend="eager")
    sizes = [int(s) for s in sys.argv[1].split(",")]
    ok = True
    for n in sizes:
        x, y = torch.randn(n, 3, 2), torch.randn(n)
        ok = ok and torch.equal(compiled(x, y), f(x, y))
    stats = framejit.stats()
    print(json.dumps({"ok": ok, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"]}))
''')


def test_frame_cache_serves_new_sizes_without_tracing(tmp_path):
    cold = run_cache_program(tmp_path, "dynamic_program.py", PROGRAM, "3,5")
    assert cold["ok"] and cold["traced"] == 2
    warm = run_cache_program(tmp_path, "dynamic_program.py", PROGRAM, "7,9,12")
    assert warm["ok"] and warm["traced"] == 0 and warm["loaded"] >= 1


def test_len_and_numpy_shape_of_a_symbolic_tensor():
    def fn(x):
        a = x.numpy()
        return x * len(x) + torch.from_numpy(a.reshape(a.shape[0], -1) * 2).sum(1, keepdim=True)

    backend = run_sizes(fn, lambda n: (torch.randn(n, 3),), [2, 3, 4, 3], dynamic=True)
    assert backend.graph_count <= 3  # len() and a NumPy shape need the value: specialised, guarded


def test_in_place_update_with_a_symbolic_int():
    def fn(x, n):
        x.add_(n)
        return x * x.shape[0]

    backend = run_sizes(fn, lambda n: (torch.randn(n, 2), n), SIZES)
    assert backend.graph_count == 2


def test_batch_and_sequence_vary_and_meet_size_one():
    def fn(x, mask):
        scores = x @ x.transpose(-1, -2) + mask[:, None, :]
        return scores.softmax(-1) @ x

    calls = [(2, 3), (4, 5), (3, 7), (5, 2), (6, 9), (1, 4), (1, 8), (2, 6)]
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for b, s in calls:
        x, mask = torch.randn(b, s, 4), torch.randn(b, s)
        torch.testing.assert_close(compiled(x, mask), fn(x, mask))
    assert backend.graph_count == 3  # static, batch and sequence symbolic, batch 1


# ---- size arithmetic that stays symbolic (NOTE [Size arithmetic stays symbolic] in sym_arith.py) ----------
def _len_of_tensor(x, y):
    return x * len(x) + len(y)


def _negated_size(x, y):
    return x + (-x.size(0)) + (+y.shape[0])


def _true_division(x, y):
    half = x.size(0) / 2  # a SymFloat in torch
    return x * half + y / (y.shape[0] * 0.5), half


def _whole_shape_comparisons(x, y):
    out = x + 1 if x.shape == y.shape else x - 1
    if x.shape[1:] == (3,) and x.shape != (1, 3) and list(y.shape) == [y.size(0), 3]:
        out = out * 2
    if x.shape < y.shape or x.shape[1:] >= (4,):
        out = out + 100
    return out


def _size_concatenation(x, y):
    return x.new_zeros(x.shape[:-1] + (4,)).view(x.shape[0], 2, 2) + y.reshape(y.shape[:1] + (3,))[:, :1, None]


def _size_numel(x, y):
    return x * x.shape.numel() - y.shape[1:].numel()


def _max_min_abs_pow(x, y):
    return x * max(x.size(0), 3) + min(x.size(0), y.size(0), 7) + abs(5 - x.size(0)) + x.size(0) ** 2


def _ceil_floor_round(x, y):
    n = x.size(0)
    return x * math.ceil(n / 2) + math.floor(n / 3) + math.trunc(n / 4) + round(n / 3) + int(n / 2) + float(n) \
        + x.size(0) // 2 + x.size(0) % 3, math.ceil(n / 2)


def _sqrt_scale(x, y):
    return x / math.sqrt(x.size(-1)) + y / math.sqrt(y.size(0))


def _range_without_unrolling(x, y):
    r = range(1, x.size(0), 2)
    inside = 4 in range(x.size(0)) and y.size(0) - 1 in range(0, 2 * y.size(0), 1)
    return x * len(r) + range(x.size(0))[-1] + range(0, x.size(0) + 4, 3)[1], inside


SYMBOLIC_ARITHMETIC = [_len_of_tensor, _negated_size, _true_division, _whole_shape_comparisons,
                       _size_concatenation, _size_numel, _max_min_abs_pow, _ceil_floor_round, _sqrt_scale]


def pair_args(n):
    return torch.randn(n, 3), torch.randn(n, 3)


@pytest.mark.parametrize("fn", SYMBOLIC_ARITHMETIC, ids=lambda f: f.__name__)
def test_size_arithmetic_compiles_once_with_dynamic_true(fn):
    backend = run_sizes(fn, pair_args, SIZES, dynamic=True)
    assert backend.graph_count == 1  # no value of a size was specialised


@pytest.mark.parametrize("fn", SYMBOLIC_ARITHMETIC, ids=lambda f: f.__name__)
def test_size_arithmetic_compiles_twice_with_automatic_dynamic(fn):
    backend = run_sizes(fn, pair_args, SIZES)
    assert backend.graph_count == 2


def test_range_of_a_size_without_unrolling_guards_relations():
    backend = run_sizes(_range_without_unrolling, pair_args, SIZES, dynamic=True)
    assert backend.graph_count == 2  # `4 in range(n)` flips once (n > 4): one entry per answer


def test_shape_comparison_guards_the_relation_not_the_sizes():
    backend = CountingBackend()
    compiled = framejit.compile(_whole_shape_comparisons, backend=backend, dynamic=True)
    for n, m in [(3, 3), (5, 5), (8, 8), (4, 6), (7, 2), (9, 9)]:
        x, y = torch.randn(n, 3), torch.randn(m, 3)
        assert_same(compiled(x, y), _whole_shape_comparisons(x, y))
    assert backend.graph_count == 3  # equal (x < y false); different and x smaller; different and x larger
    guards = "\n".join(e.guard.source for e in compiled.entries)
    assert "y.size(0) == x.size(0)" in guards and "x.size(0) != y.size(0)" in guards
    assert "x.size(0) == 3" not in guards and "y.size(0) == 5" not in guards


def test_symbolic_true_division_result_is_a_float_from_the_graph():
    backend = CountingBackend()
    compiled = framejit.compile(lambda x: (x.shape[0] / 4, -x.shape[0], x.shape[0] / 4 > 1.5), backend=backend,
                                dynamic=True)
    for n in (3, 6, 10):
        result = compiled(torch.randn(n))
        assert result[:2] == (n / 4, -n) and type(result[0]) is float and type(result[1]) is int
        assert result[2] is (n / 4 > 1.5)
    assert backend.graph_count == 0  # the returned comparison is computed by the graph too, which reads sizes
    # only: it runs as its own code (NOTE [Graphs that only read sizes])


@pytest.mark.parametrize("kind", ["gru_cell", "lstm"])
def test_composite_ops_keep_a_symbolic_batch(kind):
    """nn.GRUCell / nn.LSTM run composite aten ops whose C++ decomposition read `int(size)` of the fake
    input (a specialisation: one compilation per batch size until the recompile limit); under torch's Python
    dispatcher they decompose with SymInts."""
    torch.manual_seed(0)
    module = torch.nn.GRUCell(4, 6) if kind == "gru_cell" else torch.nn.LSTM(4, 6, batch_first=True)

    def make(n):
        return (torch.randn(n, 4), torch.randn(n, 6)) if kind == "gru_cell" else (torch.randn(n, 3, 4),)

    backend = CountingBackend()
    compiled = framejit.compile(module, backend=backend)
    with torch.no_grad():
        for n in SIZES:
            args = make(n)
            assert_same(compiled(*args), module(*args))
    assert backend.graph_count == 2
