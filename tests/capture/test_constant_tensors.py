"""NOTE [Tensors made from constants]: the truth of a tensor computed only from constants (a mask made in the
forward, compared with torch.nn's causal mask) is evaluated while tracing instead of breaking the graph."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch.nn.modules.transformer import _detect_is_causal_mask

import framejit
from tests.helpers import assert_same, logged_breaks, run_differential, run_sizes


def test_torch_nn_causal_mask_detection_is_not_a_break():
    """What TransformerEncoder/Decoder do with a mask and no `is_causal`: canonicalise it, then detect it."""
    def f(x):
        n = x.size(1)
        bool_mask = F._canonical_mask(mask=torch.zeros(n, n, dtype=torch.bool), mask_name="mask", other_type=None,
                                      other_name="", target_type=x.dtype, check_other=False)
        causal = nn.Transformer.generate_square_subsequent_mask(n)
        masks = (causal, bool_mask, causal[:, :n - 1], torch.zeros(n, n).masked_fill(causal.bool(), float("-inf")))
        return [x * 2 if _detect_is_causal_mask(m, None, n) else x * 3 for m in masks]

    with logged_breaks() as breaks:
        backend = run_differential(f, lambda seed: (torch.randn(2, 5, 8),), seeds=(0, 1), fullgraph=False)
    assert backend.graph_count == 1 and breaks == []  # before: a break at the first mask


def test_truths_over_symbolic_sizes_are_checked_at_the_graph_start():
    def f(x):
        n = x.size(0)
        causal = x * 2 if _detect_is_causal_mask(nn.Transformer.generate_square_subsequent_mask(n), None, n) else x
        return causal + 1 if (torch.arange(n) < 6).all() else causal - 1  # False from length 7 on

    with logged_breaks() as breaks:
        # length 7: the symbolic graph (traced at 6) checks the second truth at its start, that fails, the call
        # reruns eagerly
        backend = run_differential(f, lambda length: (torch.randn(length),), seeds=(5, 6, 7), fullgraph=False)
    # one recompile, with the length symbolic: NOTE [Truths over symbolic sizes]; before: breaks at that call
    assert backend.graph_count == 2 and breaks == []
    assert sum(n.target is torch._assert_async for n in backend.graphs[1].graph.nodes) == 2


def _filled(x):
    m = torch.zeros(x.size(0), dtype=torch.bool)
    m[1:] = True  # written by an op on constants: evaluated with it
    if (m.sum() == x.size(0) - 1).all():
        return x + 1
    return x - 1


def _written_from_input(x):
    m = torch.zeros(x.size(0))
    m.add_(x)  # the data now depends on the input: a break, the branch follows the data
    if (m > 0).all():
        return x + 1
    return x - 1


def _written_through_view(x):
    m = torch.zeros(4)
    m[:2].copy_(x[:2])  # a view of the constant tensor written from the input
    if (m == 0).all():
        return x * 2
    return x * 3


def _random(x):
    if (torch.rand(3) < 2.0).all():  # random data: never evaluated while tracing
        return x + 1
    return x


def test_constant_truth_follows_writes_and_refuses_inputs():
    def zeros_or_positive(seed):
        return (torch.zeros(4) if seed == 0 else torch.rand(4) + 1,)

    # a break: the graph before it and one per branch taken (both inputs take both sides but _random)
    for fn, graphs in ((_filled, 1), (_written_from_input, 3), (_written_through_view, 3), (_random, 2)):
        backend = run_differential(fn, zeros_or_positive, seeds=(0, 1, 0), fullgraph=False)
        assert backend.graph_count == graphs, fn.__name__
    assert run_sizes(_filled, lambda n: (torch.randn(n),), (3, 3)).graph_count == 1


def _relu_in_place(x):
    c = torch.tensor([-1.0, 2.0])
    F.relu(c, inplace=True)  # a write whose name does not look in-place, on constants: evaluated with it
    return x + 1 if c.sum() > 1.5 else x - 1


def _dunder_ipow(x):
    c = torch.tensor([3, 5])
    c.__ipow__(2)
    return x + 1 if c.sum() == 8 else x - 1


def _running_stats_from_input(x):
    mean, var = torch.zeros(1), torch.ones(1)
    F.batch_norm(x.view(4, 1), mean, var, training=True, momentum=0.5)  # writes the running stats from x
    return x + 1 if (mean == 0).all() else x - 1


def _embedding_max_norm(x):
    w = torch.full((2, 3), 2.0)
    F.embedding((x > 0).long(), w, max_norm=1.0)  # renormalises the rows of w it reads, in place
    return x + 1 if (w == 2.0).all() else x - 1


def test_writes_by_ops_whose_names_do_not_look_in_place():
    """NOTE [Ops known not to write]: before, each took the branch of the unwritten data (1 graph, no break)."""
    def zeros_or_positive(seed):
        return (torch.zeros(4) if seed == 0 else torch.rand(4) + 1,)

    for fn, graphs in ((_relu_in_place, 1), (_dunder_ipow, 1), (_running_stats_from_input, 3),
                       (_embedding_max_norm, 2)):
        backend = run_differential(fn, zeros_or_positive, seeds=(0, 1, 0), fullgraph=False)
        assert backend.graph_count == graphs, fn.__name__


def _counting_reruns(monkeypatch) -> list:
    from framejit.capture.requests import RerunState
    reruns, restore = [], RerunState.restore
    monkeypatch.setattr(RerunState, "restore", lambda self: (reruns.append(1), restore(self))[1])
    return reruns


def test_failing_truth_of_sizes_reruns_once_then_compiles_and_keeps_input_writes(monkeypatch):
    """Review revP: HIGH-1, an op copied to the graph's start raises (IndexError for n <= 3) before the graph
    writes its input (NOTE [A failing entry condition fails the check]); HIGH-2, a truth whose answer flips with
    the size (traced False at n=3) reran every later call eagerly (NOTE [A failed truth of sizes recompiles])."""
    reruns = _counting_reruns(monkeypatch)

    def g(x, log):
        n = x.size(0)
        x.add_(1)
        log.append(n)
        t = torch.eye(n)[torch.tensor([3])]
        return x * 2 if (t.sum() == 1) else x * 3

    def custom(gm, example_inputs):  # a custom backend's own callable (not gm.forward)
        return lambda *args: gm(*args)

    for cg in (framejit.compile(g, backend="eager"), framejit.compile(g, backend=custom)):
        for n in (5, 6, 7, 3, 8):
            x, xc, log, logc = torch.zeros(n), torch.zeros(n), [], []
            try:
                expected, error = g(x, log), None
            except IndexError as e:
                expected, error = None, e
            if error is None:
                assert_same(cg(xc, logc), expected)
            else:
                with pytest.raises(IndexError):
                    cg(xc, logc)
            assert_same(xc, x)  # written once before the error, as eager (before: x unwritten at n=3)
            assert logc == log
    reruns.clear()

    def f(x):
        n = x.size(0)
        return x + 1 if torch.ones(n).sum() > 3 else x - 1

    cf = framejit.compile(f, backend="eager")
    for n in [2, 3] + [4, 5, 6, 7] * 3:
        x = torch.randn(n)
        assert_same(cf(x), f(x))
    assert len(reruns) == 1  # the first call of n >= 4 only (before: 12 of 14 calls)
