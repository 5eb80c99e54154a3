"""Fusion and behaviour tests of the triton backend: kernel counts for known patterns, the fusion
log, options, eager fallbacks (CPU without interpreter, training, changed inputs), input mutation,
dumps and determinism. Values are always compared with eager (float32, atol=rtol=1e-5).
"""
import logging
import os

import pytest
import torch
import torch.nn.functional as F

import framejit.backends.triton as triton_backend_module
from framejit import config, logs
from framejit.backends.triton import triton as triton_backend
from framejit.backends.triton import codegen, ir, scheduler
from framejit.backends.triton.runtime import CompiledGraph, EagerGraph
from tests.backends.triton_util import compile_and_compare, randn


def inputs_of(*shapes):
    return lambda seed: tuple(randn(*s, seed=seed + k) for k, s in enumerate(shapes))


def test_pointwise_chain_of_five_is_one_kernel():
    compiled = compile_and_compare(lambda x, y: torch.sigmoid((x + y) * 3 - 1).abs(), inputs_of((4, 9), (9,)))
    assert (compiled.kernel_count, compiled.extern_count) == (1, 0)


def test_layer_norm_is_one_kernel():
    compiled = compile_and_compare(lambda x, w, b: F.layer_norm(x, (9,), w, b), inputs_of((2, 3, 9), (9,), (9,)))
    assert (compiled.kernel_count, compiled.extern_count) == (1, 0)


def test_softmax_is_one_kernel_persistent_and_looped():
    for options in (None, {"persistent_reduction_limit": 16}):
        compiled = compile_and_compare(lambda x: torch.softmax(x, -1), inputs_of((3, 50)), options=options)
        assert compiled.kernel_count == 1
        source = open(compiled.source_path).read()
        assert ("for roffset in range" in source) == (options is not None)


def test_linear_bias_gelu_is_one_extern_and_one_kernel_in_place():
    compiled = compile_and_compare(lambda x, w, b: F.gelu(F.linear(x, w, b)), inputs_of((4, 8), (5, 8), (5,)))
    assert compiled.extern_count == 1 and compiled.kernel_count <= 1
    assert "computed in place" in open(compiled.source_path).read()


def test_mlp_block_counts():
    def block(x, w1, b1, w2, b2):
        h = F.layer_norm(x, (8,))
        return x + F.linear(F.relu(F.linear(h, w1, b1)), w2, b2)

    compiled = compile_and_compare(block, inputs_of((3, 8), (16, 8), (16,), (8, 16), (8,)))
    # layer norm, relu epilogue, residual epilogue; two addmm externs
    assert (compiled.kernel_count, compiled.extern_count) == (3, 2)


def test_reduction_read_at_another_row_is_not_fused(caplog):
    logs.set_logs("fusion")
    try:
        with caplog.at_level(logging.INFO, logger="framejit.fusion"):
            compiled = compile_and_compare(lambda x: x.sum(1).view(2, 2).t() + 1, inputs_of((4, 6)))
    finally:
        logs.set_logs("")
    assert compiled.kernel_count == 2
    assert any("keep apart" in r.getMessage() and "another row" in r.getMessage() for r in caplog.records)


def test_fusion_log_explains_decisions(caplog):
    logs.set_logs("fusion,output_code")
    try:
        with caplog.at_level(logging.INFO, logger="framejit"):
            compile_and_compare(lambda x: torch.softmax(x * 2, -1), inputs_of((3, 5)))
    finally:
        logs.set_logs("")
    fusion = [r.getMessage() for r in caplog.records if r.name == "framejit.fusion"]
    assert any("reduction prologue" in m for m in fusion)
    assert any("reduction epilogue" in m for m in fusion)
    code = [r.getMessage() for r in caplog.records if r.name == "framejit.output_code"]
    assert any("@triton.jit" in m for m in code)


def test_different_sizes_are_not_fused():
    compiled = compile_and_compare(lambda x, y: (x * 2).sum() + (y + 1), inputs_of((3, 4), (5,)))
    assert compiled.kernel_count == 2


def test_options_are_validated():
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    with pytest.raises(ValueError, match="autotune"):
        triton_backend(gm, [torch.ones(3)], {"block": 4})
    with pytest.raises(TypeError, match="persistent_reduction_limit"):
        triton_backend(gm, [torch.ones(3)], {"persistent_reduction_limit": "big"})
    with pytest.raises(TypeError, match="options"):
        triton_backend(gm, [torch.ones(3)], [("autotune", True)])


def test_autotune_option():
    compiled = compile_and_compare(lambda x: torch.softmax(x, -1) + x, inputs_of((3, 20)), options={"autotune": True})
    assert "@triton.autotune" in open(compiled.source_path).read()


def test_cpu_without_interpreter_runs_eagerly(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    gm = torch.fx.symbolic_trace(lambda x: x * 2)
    compiled = triton_backend(gm, [torch.ones(3)])
    assert isinstance(compiled, EagerGraph) and "TRITON_INTERPRET" in compiled.reason
    x = randn(3)
    torch.testing.assert_close(compiled(x), x * 2)


def test_training_graph_runs_forward_and_backward_kernels():
    from framejit.backends.joint import JointGraph

    gm = torch.fx.symbolic_trace(lambda x, w: (x * w).sum())
    x, w = randn(5), randn(5).requires_grad_()
    compiled = triton_backend(gm, [x, w])
    assert isinstance(compiled, JointGraph)  # backends/joint.py: forward and backward compiled
    compiled(x, w).backward()
    torch.testing.assert_close(w.grad, x)
    (backward,) = compiled.compiled_backwards
    assert isinstance(backward, CompiledGraph) and backward.runs == 1


def test_compiled_graph_called_with_grad_inputs_keeps_autograd():
    gm = torch.fx.symbolic_trace(lambda x: (x * 3).sin())
    compiled = triton_backend(gm, [randn(4)])
    assert isinstance(compiled, CompiledGraph)
    x = randn(4, seed=2).requires_grad_()
    out = compiled(x)
    out.sum().backward()
    torch.testing.assert_close(x.grad, 3 * torch.cos(3 * x.detach()))


def test_changed_input_shape_runs_eagerly_and_correctly():
    gm = torch.fx.symbolic_trace(lambda x: x.softmax(-1))
    compiled = triton_backend(gm, [randn(3, 4)])
    x = randn(2, 6, seed=1)
    torch.testing.assert_close(compiled(x), x.softmax(-1))


def test_input_mutation_is_written_back():
    def fn(x, y):
        x.mul_(2)
        return (x + y,)

    gm = torch.fx.symbolic_trace(fn)
    compiled = triton_backend(gm, [randn(5), randn(5, seed=1)])
    assert isinstance(compiled, CompiledGraph)
    for seed in (0, 3):
        x1, y = randn(5, seed=seed), randn(5, seed=seed + 1)
        x2 = x1.clone()
        expected = fn(x1, y)
        actual = compiled(x2, y)
        torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(x2, x1)


def test_nested_outputs_and_module_parameters():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(6, 4)
            self.register_buffer("scale", torch.arange(4.0))

        def forward(self, x):
            y = self.lin(x) * self.scale
            return {"y": y, "parts": [y.relu(), y.amax(-1)]}

    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        compiled = compile_and_compare(torch.fx.symbolic_trace(net), inputs_of((3, 6)))
    assert compiled.extern_count == 1


def test_module_itself_is_a_backend():
    gm = torch.fx.symbolic_trace(lambda x: x.exp() + 1)
    compiled = triton_backend_module(gm, [randn(7)])
    x = randn(7, seed=4)
    torch.testing.assert_close(compiled(x), x.exp() + 1)


def test_source_is_deterministic_and_dumped(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "dump_dir", str(tmp_path))
    fn = lambda x: torch.softmax(x + 1, -1)  # noqa: E731
    paths = [compile_and_compare(fn, inputs_of((3, 7))).source_path for _ in range(2)]
    assert paths[0] == paths[1] and os.path.dirname(paths[0]) == str(tmp_path / "triton")
    text = open(paths[0]).read()
    assert "def call(" in text and "@triton.jit" in text


def test_int64_indexing_is_chosen_for_huge_buffers():
    big = ir.PointwiseNode("buf0", (2 ** 31 + 5,), torch.float32, ir.Scalar(1.0, torch.float32))
    small = ir.PointwiseNode("buf0", (100,), torch.float32, ir.Scalar(1.0, torch.float32))
    for node, expected in ((big, True), (small, False)):
        group = scheduler.FusedGroup(0, [node], None, node.shape[0], stores=["buf0"], name="k")
        assert codegen.needs_int64(group, {"buf0": node}) is expected
        kernel = codegen.generate_kernel(group, {"buf0": node}, codegen.LaunchConfig(1024))
        assert ("tl.program_id(0).to(tl.int64)" in kernel.source) is expected
