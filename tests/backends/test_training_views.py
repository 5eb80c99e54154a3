"""Views around onnxrt training programs (NOTE [Returned views read by ORT] in onnxrt/partition.py, NOTE
[Identity views between the halves] in backends/joint.py).

A graph that returns `w.t()` and multiplies by it keeps the returned view in torch (it aliases `w`) while
its ORT part reads `w` itself; a Linear stack trained through onnxrt saves no `t(t(w))` chain and returns
no `t(t(mm))` gradient: no transpose runs in torch between or after the ORT programs, and losses, gradients
and parameters match eager over 3 steps on changing inputs.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import framejit
from framejit.backends import joint as joint_mod
from framejit.backends.onnxrt.partition import ALIAS_REASON
from tests.backends.test_training_backends import (  # noqa: F401 (_count_ort_runs: the autouse fixture)
    TOL, Recording, _count_ort_runs, assert_backward_in_backend, assert_same_state)

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]


def _ort_inputs(program) -> list:
    """The FX nodes that feed the program's ORT parts."""
    return [a for n in program.graph_module.graph.nodes if n.op == "call_module" for a in n.args]


def test_returned_view_stays_a_view_while_ort_reads_the_base():
    def fn(x, w):
        wt = w.t()
        return wt, torch.relu(x @ wt) * 2

    recording = Recording("onnxrt")
    fast = framejit.compile(fn, backend=recording)
    for seed in range(2):
        gen = torch.Generator().manual_seed(seed)
        x, w = torch.randn(3, 4, generator=gen), torch.randn(5, 4, generator=gen)
        (view, out), (expected_view, expected) = fast(x, w), fn(x, w)
        torch.testing.assert_close(out, expected, **TOL)
        assert view.data_ptr() == w.data_ptr() and view.stride() == expected_view.stride()  # a view of w
        w.add_(1)  # writes through the input reach the returned view, as in eager
        torch.testing.assert_close(view, w.t())
    (compiled,) = recording.compiled
    (program,) = [p for p in compiled.programs.values() if p is not None]
    assert program.num_parts == 1
    assert all(a.op == "placeholder" for a in _ort_inputs(program)), program.graph_module.code


def test_linear_training_runs_no_views_between_programs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
    fast_model = copy.deepcopy(model)
    recording = Recording("onnxrt")
    fast = framejit.compile(fast_model, backend=recording)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-6) for m in (model, fast_model)]
    for step in range(3):
        x = torch.randn(4, 6, generator=torch.Generator().manual_seed(step))
        inputs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
        losses = [m(i).square().mean() for m, i in zip((model, fast), inputs)]
        torch.testing.assert_close(losses[1], losses[0], **TOL)
        for loss, opt in zip(losses, opts):
            loss.backward()
            opt.step()
        torch.testing.assert_close(inputs[1].grad, inputs[0].grad, **TOL)
        for opt in opts:
            opt.zero_grad()
    assert_same_state(fast_model, model)
    assert_backward_in_backend(recording)
    (joint,) = recording.joints()
    (forward,), (backward,) = joint.compiled_forwards, joint.compiled_backwards
    (fw_program,) = [p for p in forward.programs.values() if p is not None]
    (bw_program,) = [p for p in backward.programs.values() if p is not None]
    assert ALIAS_REASON not in fw_program.eager_nodes.values(), fw_program.eager_nodes  # no saved t(w) views
    assert all(a.op == "placeholder" for a in _ort_inputs(fw_program)), fw_program.graph_module.code
    assert bw_program.num_parts == 1
    for program in (fw_program, bw_program):  # no t(t(w)) saved, no t(t(mm)) returned: no transpose in torch
        assert not _torch_transposes(program), program.graph_module.code


def _torch_transposes(program) -> list:
    return [n for n in program.graph_module.graph.nodes if n.op == "call_function" and n.target in (
        torch.ops.aten.t.default, torch.ops.aten.transpose.int, torch.ops.aten.permute.default)]


def test_fold_identity_views_keeps_user_outputs_and_real_views():
    graph = torch.fx.Graph()
    w = graph.placeholder("w")
    w.meta["val"] = torch.empty(3, 4)
    t1 = graph.call_function(torch.ops.aten.t.default, (w,))
    t1.meta["val"] = torch.empty(3, 4).t()
    t2 = graph.call_function(torch.ops.aten.t.default, (t1,))
    t2.meta["val"] = torch.empty(3, 4)
    graph.output((t2, t2, t1))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert joint_mod.fold_identity_views(gm, first=1) == 1  # t2 as a user output (index 0) stays
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    assert out[0] is t2 and out[1] is w and out[2] is t1  # t1 alone is a real view: kept


def test_fold_drops_clones_of_fresh_intermediates_only():
    graph = torch.fx.Graph()
    w = graph.placeholder("w")
    w.meta["val"] = torch.empty(3, 4)
    nodes = {}
    for name, target, arg in (("a", torch.ops.aten.relu.default, w), ("b", torch.ops.aten.tanh.default, w),
                              ("ca", torch.ops.aten.clone.default, "a"), ("cb", torch.ops.aten.clone.default, "b"),
                              ("cw", torch.ops.aten.clone.default, w)):
        nodes[name] = graph.call_function(target, (nodes.get(arg, arg),))
        nodes[name].meta["val"] = torch.empty(3, 4)
    graph.output((nodes["b"], nodes["ca"], nodes["cb"], nodes["cw"]))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert joint_mod.fold_identity_views(gm, first=1) == 1
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    # clone(a) is a; clone(b) stays (b is returned too: two distinct tensors); clone of an input stays
    assert out[1] is nodes["a"] and out[2] is nodes["cb"] and out[3] is nodes["cw"]
