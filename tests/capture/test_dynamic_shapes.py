"""Dynamic shapes (issue 13): symbolic sizes through capture, automatic dynamic, dynamic=True/False,
mark_dynamic / mark_static / maybe_mark_dynamic and torch's own markers, symbolic ints, guards on
relations and the recompile log. Differential: every call is compared with eager on fresh inputs, and the
number of compilations is asserted."""
from __future__ import annotations

import logging
import textwrap

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same, run_cache_program

SIZES = [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]


def run_sizes(fn, make_args, sizes, **compile_kwargs):
    """Calls `fn` compiled and eagerly for each size (fresh inputs each time); returns the backend."""
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, **compile_kwargs)
    for i, n in enumerate(sizes):
        torch.manual_seed(i)
        args = make_args(n)
        torch.manual_seed(i)
        compiled_args = make_args(n)  # the same values, made anew (markers set on tensors are kept)
        assert_same(compiled(*compiled_args), fn(*args))
        assert_same(compiled_args, args)  # the same in-place updates
    return backend


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
    for n in (3, 8, 9, 5):
        args = make(n)
        assert_same(compiled(*args), args[0] + n)
    assert backend.graph_count == 2  # 9 is past the range
    sources = [e.guard.source for e in compiled.entries]
    assert any("<= 8" in s for s in sources)


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


def test_range_over_a_size_specialises():
    def fn(x):
        total = x[0]
        for i in range(1, x.size(0)):
            total = total + x[i]
        return total

    backend = run_sizes(fn, lambda n: (torch.randn(n, 3),), [2, 3, 3, 2, 4], dynamic=True)
    assert backend.graph_count == 3  # one per length (the loop unrolls); each entry reused


def test_returned_sizes_are_ints_from_the_graph():
    def fn(x):
        return x.shape[0] * 2, x.size(1) // 2, x.numel(), x.shape

    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, dynamic=True)
    for n in (3, 7, 10):
        x = torch.randn(n, n + 2)
        result = compiled(x)
        assert result == fn(x) and type(result[0]) is int and type(result[3]) is torch.Size
    assert backend.graph_count == 1


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
    assert all(type(t) is torch.Tensor for t in backend.example_inputs[0])


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
