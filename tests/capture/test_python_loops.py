"""Loops over a tensor's rows whose body breaks on data run as Python (NOTE [Loops run as Python] in
framejit/capture/python_loops.py): the code before the loop and after it stays captured, the loop's module
and user-function calls are captured as their own frames, and the loop's own pieces make no graphs.
Differential: every call is compared with eager on fresh values; graph counts are deltas of one backend."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import framejit
from tests.capture.test_breaks_cells import closures_in_loop  # three closures made by a printing loop
from tests.helpers import CountingBackend, eager_frames


class Dense(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wi = nn.Linear(8, 16, bias=False)
        self.wo = nn.Linear(16, 8, bias=False)

    def forward(self, h):
        return self.wo(torch.relu(self.wi(h)))


class Experts(nn.ModuleDict):
    """The HF switch_transformers expert loop: nonzero, single-argument torch.where, an f-string of a row."""

    def __init__(self) -> None:
        super().__init__()
        for i in range(4):
            self[f"expert_{i}"] = Dense()

    def forward(self, h, sel, weight):
        out = torch.zeros_like(h)
        hit = torch.greater(sel.sum(0), 0).nonzero()
        for e in hit:
            (rows,) = torch.where(sel[:, e[0]])
            y = self[f"expert_{e[0]}"](h[rows]) * weight[rows, None]
            out.index_add_(0, rows, y.to(h.dtype))
        return out * 2


def _routing(assign: list[int]) -> torch.Tensor:
    return nn.functional.one_hot(torch.tensor(assign), 4)


def test_expert_loop_runs_as_python_and_captures_the_experts():
    torch.manual_seed(0)
    model = Experts().eval()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    eager_before = eager_frames()
    # experts hit with 3, 2, 3 rows; then all four with 2 rows each (no expert gets 0 < rows < 2)
    for assign in ([0, 0, 0, 1, 1, 3, 3, 3], [2, 2, 1, 1, 0, 0, 3, 3], [1, 1, 1, 1, 2, 2, 0, 0]):
        h, w = torch.randn(8, 8), torch.rand(8)
        with torch.no_grad():
            torch.testing.assert_close(compiled(h, _routing(assign), w), model(h, _routing(assign), w))
    # 1: zeros_like, sum, greater (before nonzero); the loop makes none; Dense.forward: 2 (3 rows static,
    # then 2 rows: dynamic, which serves every later row count >= 2); `out * 2` after the loop: 1
    assert backend.graph_count == 4, [g.code for g in backend.graphs]
    assert eager_frames() == eager_before
    ops = [sorted(str(n.target) for n in g.graph.nodes if n.op == "call_function") for g in backend.graphs]
    assert sum("<built-in function linear>" in o for o in ops) == 2  # only Dense graphs hold the experts


def _scale(t, k=1):
    return t * k + 1


def test_boolean_mask_loop_calls_user_function_through_its_hook():
    def f(x, groups):
        out = x.clone()
        for g in groups:
            out[g] = _scale(x[g], k=3)  # boolean mask: data-dependent rows; a keyword call
        return out.sum(0)

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = eager_frames()
    masks = ([[1, 1, 1, 0, 0], [0, 0, 0, 1, 1]], [[1, 1, 0, 0, 0], [0, 0, 1, 1, 1]], [[1, 0, 1, 0, 1], [0, 1, 1, 0, 1]])
    for m in masks:
        x, groups = torch.randn(5, 3), torch.tensor(m, dtype=torch.bool)
        torch.testing.assert_close(compiled(x, groups), f(x, groups))
    # clone before the loop: 1; _scale: 2 (3 rows static, then 2 rows dynamic); sum after the loop: 1
    assert backend.graph_count == 4, [g.code for g in backend.graphs]
    assert eager_frames() == eager_before


class Stack(nn.ModuleDict):
    def __init__(self) -> None:
        super().__init__()
        for i in range(3):
            self[f"layer_{i}"] = nn.Linear(4, 4)

    def forward(self, x):
        for i in range(3):
            x = torch.tanh(self[f"layer_{i}"](x))
        return x


def test_fstring_of_a_python_int_selects_modules_without_a_break():
    torch.manual_seed(0)
    model = Stack()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    for batch in (2, 2):
        x = torch.randn(batch, 4)
        torch.testing.assert_close(compiled(x), model(x))
    assert backend.graph_count == 1  # the f-string of a Python int is a constant: one graph, no break


def _crop(feat, size):
    y = torch.sin(feat) * 2
    h, w = size.tolist()  # breaks on data
    return torch.cos(y[:h, :w]) + 1


def _misses() -> int:
    return sum(1 for frame in framejit.stats()["frames"] if frame.get("cache") == "miss")


def test_a_loop_breaking_on_every_step_runs_as_python_from_its_second_step():
    # NOTE [Loops breaking on every step]: a per-image loop (VLMs) over a constant range or a list: its resume
    # function inside the body meets the break again at the next step, so the rest of the loop runs as
    # Python with its calls captured as frames, instead of one resume entry per loop position
    def over_range(feats, sizes):
        out = []
        for i in range(4):
            out.append(_crop(feats[i], sizes[i]))
        return out

    def over_list(feats, sizes):
        out = []
        for row in list(feats.unbind(0)):
            out.append(_crop(row, sizes[len(out)]))
        return out

    for fn in (over_range, over_list):
        backend = CountingBackend()
        compiled = framejit.compile(fn, backend=backend)
        misses, eager_before = _misses(), eager_frames()
        for seed in range(2):
            torch.manual_seed(seed)
            feats, sizes = torch.randn(4, 4, 4), torch.tensor([[3, 4], [2, 3], [3, 4], [4, 2]])
            for got, want in zip(compiled(feats, sizes), fn(feats, sizes), strict=True):
                torch.testing.assert_close(got, want)
        # fn up to the first step's break: none (only row selects: NOTE [Graphs that only select rows]);
        # _crop: 2 (row 0, then a row at another storage offset: symbolic layout); _crop after its break: 2
        # (h, w of row 0, then symbolic ints); the loop run as Python and the code after it: none
        assert backend.graph_count == 4, (fn.__name__, [g.code for g in backend.graphs])
        # fn, those 4, fn's resume function inside the body once (it runs the rest of the loop) and the
        # one after the loop once (an unrolled loop compiled the first one once per position)
        assert _misses() - misses == 7, fn.__name__
        assert eager_frames() == eager_before


def test_torch_layers_in_a_loop_run_as_python_are_captured_unless_hooked():
    # NOTE [torch.nn layers routed]: nn.Linear called in a loop over rows that breaks on data: its forward is
    # captured as a frame (it ran uncaptured: torch's code); with a forward hook it is called as it is
    torch.manual_seed(0)
    lin = nn.Linear(4, 4)

    def f(x):
        out = []
        for r in x:
            k = int(r.abs().sum().item()) % 3
            out.append(lin(r) * k)
        return torch.cat(out)

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = eager_frames()
    for n in (3, 3, 4):
        x = torch.randn(n, 2, 4)
        torch.testing.assert_close(compiled(x), f(x))
    linear_graphs = [g for g in backend.graphs if any("linear" in str(n.target) for n in g.graph.nodes)]
    # Linear.forward: row 0, then a symbolic layout (row 1) serving every row; the loop over rows runs as
    # Python from its first step, so no other graph holds the linear
    assert len(linear_graphs) == 2, [g.code for g in backend.graphs]
    handle = lin.register_forward_hook(lambda m, a, o: o * 2)
    try:
        count = backend.graph_count
        x = torch.randn(3, 2, 4)
        torch.testing.assert_close(compiled(x), f(x))
    finally:
        handle.remove()
    x = torch.randn(5, 2, 4)
    torch.testing.assert_close(compiled(x), f(x))
    assert backend.graph_count == count  # hooked: called as it is; unhooked again: its entries serve it
    assert eager_frames() == eager_before


def test_a_layer_whose_call_impl_is_replaced_is_called_as_it_is_in_a_loop_run_as_python():
    # review revB H1: torch's Module.__call__ runs `self._compiled_call_impl` when set, else `self._call_impl`;
    # a layer routed straight to its forward skipped a subclass's `_call_impl` (results 10x off, its log empty)
    log = []

    class Scaled(nn.Linear):
        def _call_impl(self, *args, **kwargs):
            log.append("call_impl")
            return super()._call_impl(*args, **kwargs) * 10

    torch.manual_seed(0)
    lin = Scaled(4, 4)
    plain = nn.Linear(4, 4)

    def f(x):
        out = []
        for r in x:
            k = int(r.abs().sum().item()) % 3
            out.append(lin(r) * k + plain(r))
        return torch.cat(out)

    def g(x):
        return sum(lin(x[i]) + plain(x[i]) for i in range(x.size(0)))

    for fn, kwargs in ((f, {}), (g, {"dynamic": True})):
        compiled = framejit.compile(fn, backend="eager", **kwargs)
        for n in (3, 4):
            x = torch.randn(n, 4)
            del log[:]
            expected, expected_log = fn(x), list(log)
            del log[:]
            torch.testing.assert_close(compiled(x), expected)
            assert log == expected_log
        plain._call_impl = lambda *a, **k: torch.zeros(4)  # on the instance: read by Module.__call__ too
        try:
            x = torch.randn(3, 4)
            del log[:]
            expected = fn(x)
            torch.testing.assert_close(compiled(x), expected)
        finally:
            del plain._call_impl



def _rows_then_closures(x):
    fns = []
    for r in list(x.unbind(0)):
        s = r.sum().item()  # a break on data in every step
        fns.append(lambda: r * s)
    return [f() for f in fns]


def _enumerated_rows(x):
    out = []
    for i, r in enumerate(list(x.unbind(0))):  # the loop's steps are (i, row) tuples
        out.append(r.sum().item() * i)
    return out


def _rows_then_closures_after_a_print(x):
    fns = []
    for r in list(x.unbind(0)):
        s = r.sum().item()
        fns.append(lambda: r * s)
    print("built", len(fns))  # another break: fns reaches the comprehension's function through it
    return [f() for f in fns]


def test_unbind_along_a_changing_length_is_not_specialised_per_length():
    """NOTE [Unbind along a symbolic length] (graph_calls.py) and NOTE [Comprehensions over sequences of
    changing length] (python_loops.py): the unbind specialised the length, so the owner frame (and the
    comprehension's resume function after the loop) compiled once per length, until the recompile limit ran
    them eagerly (revB M1). Now the unbind runs as Python once the length changed, and the loop and the
    comprehension over its rows run as Python: no new graph for a new length. (A loop over the rows that never
    breaks keeps the per-length graphs: NOTE [Unbinds whose loops break], test below; lambdas with defaults
    of their own: test_closures_with_defaults_of_their_own_get_a_bounded_number_of_hooks.)"""
    for fn in (_rows_then_closures, _rows_then_closures_after_a_print, _enumerated_rows):
        backend = CountingBackend()
        compiled = framejit.compile(fn, backend=backend)
        before, counts = eager_frames(), []
        for n in (2, 3, 4, 5, 6):
            x = torch.randn(n, 2)
            torch.testing.assert_close(compiled(x), fn(x))
            counts.append(backend.graph_count)
        assert eager_frames() == before, framejit.stats()["eager_frame_reasons"][before:]
        assert counts[-1] == counts[3], (fn.__name__, counts)  # no graph for a new length after the fourth


def _rnn_over_rows(x, w):
    h = torch.zeros(4)
    for xt in x.unbind(0):  # nothing in the loop breaks
        h = torch.tanh(xt + h @ w)
    return h


def test_an_unbind_whose_loop_never_breaks_keeps_the_loop_in_the_graph_per_length():
    """NOTE [Unbinds whose loops break] (graph_calls.py): an RNN unrolled over `x.unbind(0)` with two
    alternating lengths: the unbind of the length, symbolic from the second call on, broke there, and the loop
    body ran op by op outside any graph from the second length on (review revM HIGH-1). Now one whole graph
    per length, as before f5ce51c and as stock."""
    backend = CountingBackend()
    compiled = framejit.compile(_rnn_over_rows, backend=backend)
    w, counts = torch.randn(4, 4) * 0.1, []
    for n in (2, 3, 2, 3):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x, w), _rnn_over_rows(x, w))
        counts.append(backend.graph_count)
    assert counts == [1, 2, 2, 2], counts
    tanhs = [sum(1 for n in g.graph.nodes if n.target in (torch.tanh, torch.ops.aten.tanh.default)) for g in backend.graphs]
    assert tanhs == [2, 3], tanhs  # every step's tanh in its length's graph


def _gate_halves(x, s):
    y = x.sin()
    h, c = s.unbind(0)
    return y * h.sum() + c.sum()


def test_unbind_unpacked_into_names_stays_in_the_graph_with_dynamic_true():
    """NOTE [Unbind along a symbolic length] (graph_calls.py): `h, c = s.unbind(0)` needs exactly two rows (eager
    raises otherwise), so the size is specialised and the frame stays one graph; with dynamic=True every size is
    symbolic from the first call and this split the frame in two (review revH M1). A wrong row count still
    raises eager's ValueError."""
    backend = CountingBackend()
    compiled = framejit.compile(_gate_halves, backend=backend, dynamic=True)
    for n in (3, 4):
        x, s = torch.randn(n), torch.randn(2, n)
        torch.testing.assert_close(compiled(x, s), _gate_halves(x, s))
    assert backend.graph_count == 1
    with pytest.raises(ValueError, match="too many values to unpack"):
        compiled(torch.randn(3), torch.randn(3, 3))


def test_a_list_grown_by_a_breaking_loop_to_a_fixed_length_keeps_its_comprehension_captured(capsys):
    """NOTE [Lengths that change between calls] (carried_loops.py): fs has 1, 2, 3 items at the loop's
    breaks, so it is opaque, but 3 at the comprehension on every call: the comprehension is not run as Python
    (where the closures it calls ran as plain Python on 3.13: 0 graphs, the regression that reverted 17a3129);
    x's size changes, the frame's graphs follow it by automatic dynamic only."""
    backend = CountingBackend()
    compiled = framejit.compile(closures_in_loop, backend=backend)
    before, counts = eager_frames(), []
    for n in (3, 4, 5, 6):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), closures_in_loop(x))
        counts.append(backend.graph_count)
    assert eager_frames() == before
    assert counts[0] == 1 and counts[-1] == counts[1] == 2, counts  # `x * i` captured; one recompile for the size


def _closures_with_defaults_over_a_symbolic_range(x):
    fs = []
    for i in range(x.size(0)):
        fs.append(lambda i=i: x[i] * i)  # a closure over x with a default of its own
        print("made", i)
    out = []
    for f in fs:  # a loop over a list of changing length: runs as Python, its calls routed through hooks
        out.append(f())
    return out


def test_closures_with_defaults_of_their_own_get_a_bounded_number_of_hooks(capsys, monkeypatch):
    """NOTE [Functions made per call with their own defaults] (closure_hooks.py): the closures' shared hook is
    keyed by the ids of their defaults, so every new `i` made a new hook, traced anew: graphs grew with every
    longer input, for good. A code now gets at most OBJECTS_PER_CODE such hooks; later objects run as plain
    Python (2 here, to keep the test short)."""
    from framejit.capture.hook import Hooks
    monkeypatch.setattr(Hooks, "OBJECTS_PER_CODE", 2)
    backend = CountingBackend()
    fn = _closures_with_defaults_over_a_symbolic_range
    compiled = framejit.compile(fn, backend=backend)
    before, counts = eager_frames(), []
    for n in range(2, 8):
        x = torch.randn(n, 2)
        torch.testing.assert_close(compiled(x), fn(x))
        counts.append(backend.graph_count)
    assert eager_frames() == before
    assert counts[-1] == counts[-3], counts  # no new graph for the longest inputs
