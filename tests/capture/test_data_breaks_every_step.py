"""A loop over known items whose body breaks on a data-shaped op in every step runs as Python, its calls
captured as their frames (NOTE [Data breaks on every step] in framejit/capture/step_breaks.py)."""
import pytest
import torch

import framejit
from tests.helpers import CountingBackend, eager_frames, run_differential


class _Adapters(torch.nn.Module):
    """HF xmod's lang_adapter: one adapter per language, applied to the rows of that language."""

    def __init__(self, form):
        super().__init__()
        self.form = form
        self.pre = torch.nn.Linear(4, 4)
        self.ads = torch.nn.ModuleDict({"en": torch.nn.Linear(4, 4), "de": torch.nn.Linear(4, 4)})
        self.seq = torch.nn.ModuleList([self.ads["en"], self.ads["de"]])

    def forward(self, h, ids):
        h = self.pre(h)
        new = torch.zeros_like(h)
        if self.form == "keys":
            for i, k in enumerate(self.ads.keys()):
                m = ids == i
                new[m] = self.ads[k](h[m])
        elif self.form == "modulelist":
            for i, ad in enumerate(self.seq):
                m = ids == i
                new[m] = ad(h[m])
        else:  # a tuple of ints, nonzero
            for i in (0, 1):
                rows = (ids == i).nonzero().squeeze(1)
                new[rows] = self.seq[i](h[rows]) * 2
        return new + h


def _args(seed):
    b = (2, 2, 3, 5)[seed]
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, 3, 4, generator=g), torch.randint(0, 2, (b,), generator=g)


@pytest.mark.parametrize("form", ["keys", "modulelist", "tuple_nonzero"])
def test_adapter_loop_runs_as_python(form):
    torch.manual_seed(0)
    model = _Adapters(form)
    backend = CountingBackend()
    before = eager_frames()
    run_differential(model, _args, seeds=(0, 1, 2, 3), fullgraph=False, backend=backend,
                     compiled=framejit.compile(model, backend=backend))
    assert eager_frames() == before
    # the forward before the loop, the adapters' Linear (both adapters: one frame), the code after the loop;
    # once static, once more when the batch becomes symbolic, and the Linear's frame once more when its rows
    # become symbolic (stepped per key before: 10 to 12)
    assert backend.graph_count <= 7, backend.graph_count
    # the adapters are captured: a graph holds their linear and nothing else
    assert any([n.target for n in g.graph.nodes if n.op == "call_function"] == [torch._C._nn.linear]
               for g in backend.graphs)


def _once(x, xs):
    out = x * 0
    for i in range(len(xs)):  # not rows of tensors (NOTE [Loops run as Python] runs those as Python)
        t = xs[i]
        if i == 0:  # a break on one step only: the loop is unrolled as before
            idx = (t > 0).nonzero().squeeze(1)
            out = out + t[idx].sum()
        out = out + t * 2
    return out


def test_break_on_one_step_keeps_the_loop_captured():
    backend = run_differential(_once, lambda s: (torch.randn(3), [torch.randn(3) for _ in range(3)]),
                               seeds=(0, 1, 2), fullgraph=False)
    # `x * 0` and every step's `t * 2` are in graphs (run as Python, the steps' ops would be in none)
    muls = [n for g in backend.graphs for n in g.graph.nodes if getattr(n.target, "__name__", "") == "mul"]
    assert len(muls) >= 4, [g.code for g in backend.graphs]


class _Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, h):
        h = torch.relu(self.lin(h))
        keep = h[h.sum(-1) > 0]  # a data-shaped op inside a callee of the loop over layers
        return h * 2 + keep.sum()


class _Stack(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([_Layer(), _Layer()])

    def forward(self, h):
        for i, layer in enumerate(self.layers):
            h = layer(h) + i
        return h


def test_break_inside_a_layer_keeps_the_layers_captured():
    torch.manual_seed(0)
    model = _Stack()
    backend = CountingBackend()
    run_differential(model, lambda s: (torch.randn(3, 4, generator=torch.Generator().manual_seed(s)),),
                     seeds=(0, 1, 2), fullgraph=False, backend=backend,
                     compiled=framejit.compile(model, backend=backend))
    assert any(torch._C._nn.linear in [n.target for n in g.graph.nodes] for g in backend.graphs)


def _zipped_rows(x, ts):
    # vilt's `for i, (v, nv, p) in enumerate(zip(valid_nums, non_valid_nums, pad_nums))`: rows holding tensors,
    # a data-shaped op in either arm of a branch (NOTE [Rows of rebuilt combinators])
    out = x * 0
    for i, (w, t) in enumerate(zip([1, 2, 3], ts)):
        if i % 2 == 0:
            r = t[t > 0]
        else:
            r = t[t < 0]
        out = out + r.sum() * w
    return out


def test_rows_of_an_enumerated_zip_run_as_python():
    def args(s):
        g = torch.Generator().manual_seed(s)
        n = (3, 3, 4, 6)[s]
        return torch.randn(n, generator=g), [torch.randn(n, generator=g) for _ in range(3)]
    backend = run_differential(_zipped_rows, args, seeds=(0, 1, 2, 3), fullgraph=False)
    # before, each step's rest was a resume function recompiled per step and size (8 graphs)
    assert backend.graph_count <= 4, backend.graph_count


_WEIGHTS = [torch.full((4,), 1.5), torch.full((4,), -2.0), torch.arange(4.0)]


def _zip_over_reversed(h, ids):
    new = torch.zeros_like(h)
    for i, w in zip(reversed(range(3)), _WEIGHTS):
        m = ids == i
        new[m] = h[m] * w
    return new


class _RunCounting(CountingBackend):
    """Counts how often each compiled graph runs: a graph compiled and then thrown away never does."""

    def __call__(self, gm, example_inputs):
        super().__call__(gm, example_inputs)
        index = len(self.graphs) - 1
        self.runs = getattr(self, "runs", []) + [0]

        def run(*args):
            self.runs[index] += 1
            return gm.forward(*args)
        return run


def test_zip_over_an_iterator_it_drew_compiles_no_graph_it_throws_away():
    """NOTE [Rebuilt before the backend] in step_breaks.py (review revAD MED-1): the zip cannot be rebuilt at
    a break (it drew from `reversed(...)`), so the loop stays unrolled; the graph before it must not be handed
    to the backend first and then dropped (one wasted compile per new size: 15 graphs over these 5 calls, 13
    now)."""
    def args(seed):
        b = (4, 4, 6, 3, 7)[seed]
        g = torch.Generator().manual_seed(seed)
        return torch.randn(b, 4, generator=g), torch.randint(0, 3, (b,), generator=g)
    backend = _RunCounting()
    before = eager_frames()
    run_differential(_zip_over_reversed, args, seeds=(0, 1, 2, 3, 4), fullgraph=False, backend=backend)
    assert eager_frames() == before
    # never run: only the first trace's graph up to the break, once per new size (the unrolled form moves the
    # break); before, the graph before the loop was also compiled once more per new size and dropped
    assert backend.runs.count(0) <= 2, backend.runs
    assert backend.graph_count <= 13, backend.graph_count
