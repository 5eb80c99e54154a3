"""The onnxrt backend's lowering and session set-up: composite ops that mutate their temporaries, input
mutations next to them, transposes folded into Gemm, and weights frozen into ORT sessions.

Differential (tolerance 1e-4 relative / 1e-5 absolute, float32) on two fresh input sets; each test also
checks the structure that makes the graph fast (ORT part count, no `copy_` left to eager torch, no
Transpose in the model, sessions rebuilt when a frozen weight changes).
"""
from __future__ import annotations

import onnx
import pytest
import torch

import framejit
from framejit.backends.onnxrt import onnxrt, runtime

F32 = dict(rtol=1e-4, atol=1e-5)


def _x(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class GRULoop(torch.nn.Module):
    """Stacked GRUCells unrolled over 3 steps, like the zoo's gru_cell (aten::gru_cell's C++ kernel
    mutates its gate temporaries in place, below functionalization)."""

    def __init__(self, features=4, hidden=8, layers=2):
        super().__init__()
        self.cells = torch.nn.ModuleList(
            torch.nn.GRUCell(features if i == 0 else hidden, hidden) for i in range(layers))
        self.norm = torch.nn.LayerNorm(hidden)

    def forward(self, x):
        hs = [x.new_zeros(x.shape[0], cell.hidden_size) for cell in self.cells]
        outs = []
        for t in range(3):
            inp = x[:, t]
            for i, cell in enumerate(self.cells):
                hs[i] = cell(inp, hs[i])
                inp = self.norm(hs[i])
            outs.append(inp)
        return torch.stack(outs, 1), hs[-1]


def _parts(compiled) -> list:
    program = next(p for p in compiled.programs.values() if p is not None)
    return [m for m in program.graph_module.modules() if isinstance(m, runtime.OrtPart)]


def _ort_ops(compiled) -> list[str]:
    return [n.op_type for part in _parts(compiled) for n in onnx.load_from_string(part.model).graph.node]


def test_gru_cell_loop_is_one_ort_part():
    torch.manual_seed(0)
    model = GRULoop().eval()
    gm = torch.fx.symbolic_trace(model)
    with torch.no_grad():
        compiled = onnxrt(gm, [_x(0, 2, 3, 4)])
        for seed in (1, 2):
            x = _x(seed, 2, 3, 4)
            torch.testing.assert_close(compiled(x), model(x), **F32)
    (info,) = compiled.summary()
    assert not info["eager_graph"] and info["parts"] == 1, info
    assert not any("copy_" in reason for reason in info["eager_nodes"].values()), info["eager_nodes"]
    assert "Sigmoid" in _ort_ops(compiled)  # sigmoid_ became one Sigmoid, not a prims chain


def test_gru_cell_through_framejit_compile():
    torch.manual_seed(1)
    model = GRULoop(layers=1).eval()
    with torch.no_grad():
        compiled = framejit.compile(model, backend="onnxrt")
        for seed in (3, 4):
            x = _x(seed, 2, 3, 4)
            torch.testing.assert_close(compiled(x), model(x), **F32)


def test_input_mutation_next_to_a_mutating_composite_op():
    weights = [_x(9, 12, 3), _x(10, 12, 4), _x(11, 12), _x(12, 12)]

    def fn(x, h, acc):
        h2 = torch.gru_cell(x, h, *weights)
        acc.add_(h2)
        return h2 * 2

    gm = torch.fx.symbolic_trace(fn)
    compiled = onnxrt(gm, [_x(0, 2, 3), _x(1, 2, 4), _x(2, 2, 4)])
    for seed in (3, 4):
        x, h, acc = _x(seed, 2, 3), _x(seed + 10, 2, 4), _x(seed + 20, 2, 4)
        acc_eager = acc.clone()
        expected = fn(x, h, acc_eager)
        torch.testing.assert_close(compiled(x, h, acc), expected, **F32)
        torch.testing.assert_close(acc, acc_eager, **F32)
    (info,) = compiled.summary()
    assert info["parts"] == 1, info
    copies = [reason for reason in info["eager_nodes"].values() if "copy_" in reason]
    assert len(copies) == 1, info["eager_nodes"]  # only the write-back into `acc`


@pytest.mark.parametrize("freeze", [True, False])
def test_linear_transposes_are_folded_into_gemm(freeze):
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU(), torch.nn.Linear(5, 3)).eval()
    gm = torch.fx.symbolic_trace(model)
    with torch.no_grad():
        compiled = onnxrt(gm, [_x(0, 4, 6)], {"freeze_weights": freeze})
        for seed in (1, 2):
            x = _x(seed, 4, 6)
            torch.testing.assert_close(compiled(x), model(x), **F32)
    ops = _ort_ops(compiled)
    assert ops.count("Gemm") == 2 and "Transpose" not in ops, ops
    (part,) = _parts(compiled)
    assert len(part.frozen_positions) == (4 if freeze else 0)


def test_frozen_weights_follow_updates_and_replacements():
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.BatchNorm1d(4)).eval()
    with torch.no_grad():
        model[2].running_mean.uniform_(-1, 1)
        compiled = framejit.compile(model, backend="onnxrt", options={"freeze_weights": True})
        x = _x(1, 3, 4)
        torch.testing.assert_close(compiled(x), model(x), **F32)
        model[0].weight.mul_(-2)          # in place: a new version of the same tensor
        model[2].running_var.add_(0.5)    # a buffer (its source is a module attribute)
        torch.testing.assert_close(compiled(x), model(x), **F32)
        model[0].bias = torch.nn.Parameter(_x(2, 4))  # a new tensor object
        torch.testing.assert_close(compiled(_x(3, 3, 4)), model(_x(3, 3, 4)), **F32)


def test_a_weight_changing_every_call_stops_being_frozen():
    torch.manual_seed(4)
    model = torch.nn.Linear(4, 3).eval()
    gm = torch.fx.symbolic_trace(model)
    with torch.no_grad():
        compiled = onnxrt(gm, [_x(0, 2, 4)], {"freeze_weights": True})
        (part,) = _parts(compiled)
        assert part.frozen_positions
        for step in range(5):
            model.weight.add_(0.1)
            x = _x(step, 2, 4)
            torch.testing.assert_close(compiled(x), model(x), **F32)
    assert part.frozen_positions == () and part.refreezes == runtime._MAX_REFREEZE + 1


def test_freeze_weights_option_is_checked():
    with pytest.raises(TypeError, match="freeze_weights"):
        onnxrt(torch.fx.symbolic_trace(torch.nn.ReLU()), [_x(0, 2)], {"freeze_weights": "yes"})


@pytest.mark.parametrize("approximate,op", [("none", "Gelu"), ("tanh", "FastGelu")])
def test_gelu_is_one_contrib_op(approximate, op):
    """NOTE [Fused ops in the lowering]: one com.microsoft node instead of torchlib's five-op formula."""
    torch.manual_seed(5)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(approximate=approximate),
                                torch.nn.Linear(8, 3)).eval()
    gm = torch.fx.symbolic_trace(model)
    with torch.no_grad():
        compiled = onnxrt(gm, [_x(0, 4, 6)])
        for seed in (1, 2):
            x = _x(seed, 4, 6) * 3
            torch.testing.assert_close(compiled(x), model(x), **F32)
    ops = _ort_ops(compiled)
    assert ops.count(op) == 1 and "Erf" not in ops and "Tanh" not in ops, ops


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_zeros_have_eager_sign(approximate):
    """NOTE [Sign of gelu's zeros]: where gelu underflows to zero (and at -0.0) the contrib op's zeros carry
    the sign eager's kernel gives for tensors of several elements (+0.0 for erf gelu on AVX2 CPUs, where ORT
    gives -0.0), over two sizes."""
    gm = torch.fx.symbolic_trace(torch.nn.GELU(approximate=approximate))
    with torch.no_grad():
        for n in (7, 40):
            x = torch.full((n,), -30.0)
            x[::3] = -0.0
            x[1::5] = -12.0
            expected = torch.nn.functional.gelu(x, approximate=approximate)
            got = onnxrt(gm, [x])(x)
            assert torch.equal(got, expected)
            assert torch.equal(got.signbit(), expected.signbit()), (got, expected)


def _cat_onto_literal(dtype) -> torch.fx.GraphModule:
    """`torch.cat([torch.tensor([], dtype=dtype), x], dim=-2) * 2`: transformers' DynamicCache concatenates
    each layer's keys and values onto such a literal (gpt2, llama, qwen2)."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    empty = graph.call_function(torch.tensor, ([],), {"dtype": dtype})
    cat = graph.call_function(torch.cat, ([empty, x],), {"dim": -2})
    graph.output(graph.call_function(torch.mul, (cat, 2.0)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cat_onto_an_empty_tensor_literal_runs_in_ort(dtype):
    """NOTE [Tensor literals in graphs] (the graph ran wholly eagerly: lowering failed on the literal) and
    NOTE [Cat skips empty vectors] (the cat ran in eager torch, cutting the graph); float64 checks that
    the empty vector still takes part in type promotion."""
    gm = _cat_onto_literal(dtype)
    with torch.no_grad():
        compiled = onnxrt(gm, [_x(0, 2, 3, 4)])
        for seed in (1, 2):
            x = _x(seed, 2, 3, 4)
            got, want = compiled(x), gm(x)
            assert got.dtype == want.dtype == dtype
            torch.testing.assert_close(got, want, **F32)
    (row,) = compiled.summary()
    assert not row["eager_graph"] and row["parts"] == 1 and "cat" not in row["eager_nodes"], row
    assert "Concat" not in _ort_ops(compiled)


def _cat_onto_literal_then_view() -> torch.fx.GraphModule:
    """bloom's attention: keys (b, s, h, d) transposed to (b, h, s, d), concatenated onto DynamicCache's empty
    literal, then viewed as (b * h, s, d); the view needs the cat's contiguous result."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    keys = graph.call_method("transpose", (x, 1, 2))
    empty = graph.call_function(torch.tensor, ([],), {"dtype": torch.float32})
    cat = graph.call_function(torch.cat, ([empty, keys],), {"dim": -2})
    view = graph.call_method("view", (cat, 4, -1, 16))
    graph.output(graph.call_function(torch.mul, (view, 2.0)))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def test_cat_onto_an_empty_literal_keeps_the_cats_layout_for_a_view():
    """NOTE [Copies laid out as the op]: the cat became a clone in the transposed layout, the view of it failed
    in the exporter's type promotion and the whole graph ran eagerly (transformers' bloom on onnxrt)."""
    gm = _cat_onto_literal_then_view()
    with torch.no_grad():
        compiled = onnxrt(gm, [_x(0, 2, 8, 2, 16)])
        for seed in (1, 2):
            x = _x(seed, 2, 8, 2, 16)
            got, want = compiled(x), gm(x)
            assert got.shape == want.shape and got.stride() == want.stride()
            torch.testing.assert_close(got, want, **F32)
    (row,) = compiled.summary()
    assert not row["eager_graph"] and row["ort_nodes"] > 0, row
