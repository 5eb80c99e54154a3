"""onnxrt training steps call a joint's halves through framejit's own autograd.Function (NOTE [Lean joint calls]
in framejit/backends/joint_function.py) once the joint's first backward has run through AOT autograd's runtime
wrappers; joints that need those wrappers (a mutated input, an output aliasing an input) keep them. Every
step is differential against eager: outputs, gradients, parameters after SGD, version counters, and the
errors of a second backward, a double backward and an in-place change of a saved tensor. Also NOTE [No
donated buffers] in joint.py: a backward with retain_graph=True after a plain one works as in eager.
"""
from __future__ import annotations

import copy

import pytest
import torch

import framejit
from framejit import config
from framejit.backends import joint


class Recording:
    def __init__(self):
        self.compiled = []

    def __call__(self, gm, example_inputs):
        compiled = framejit.lookup_backend("onnxrt")(gm, example_inputs)
        self.compiled.append(compiled)
        return compiled

    def joint_graphs(self):
        return [c._joint for c in self.compiled if getattr(c, "_joint", None) is not None]


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(6, 16), torch.nn.Linear(16, 3)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))
        return self.fc2(self.norm(h + h.sin()))


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setattr(config, "cache_enabled", False)


def _train(model, ref, compiled, inputs, check=None):
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (model, ref))
    kinds = []
    for x in inputs:
        xa, xb = (x.detach().clone().requires_grad_(x.requires_grad) for _ in range(2))
        out, want = compiled(xa), ref(xb)
        kinds.append(type(out.grad_fn).__name__)
        assert out._version == want._version and out.requires_grad == want.requires_grad
        out.square().mean().backward()
        want.square().mean().backward()
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
        if x.requires_grad:
            torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-5, atol=1e-6)
        for a, b in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)
        opt.step(), ref_opt.step(), opt.zero_grad(), ref_opt.zero_grad()
    for a, b in zip(model.state_dict().values(), ref.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    return kinds


def test_steps_after_the_first_backward_skip_aot_autograds_runtime_wrappers():
    torch.manual_seed(0)
    model = MLP()
    ref = copy.deepcopy(model)
    recording = Recording()
    compiled = framejit.compile(model, backend=recording)
    inputs = [torch.randn(4, 6) for _ in range(3)] + [torch.randn(4, 6, requires_grad=True) for _ in range(2)]
    kinds = _train(model, ref, compiled, inputs)
    # step 1 builds the joint through AOT autograd; steps 2-3 are lean; an input requiring grad is
    # another signature: its first step through AOT autograd again, then lean
    assert kinds == ["CompiledFunctionBackward", "LeanJointBackward", "LeanJointBackward",
                     "CompiledFunctionBackward", "LeanJointBackward"]
    graphs = recording.joint_graphs()  # the input's requires_grad is guarded: a second frame
    total = {key: sum(g.stats[key] for g in graphs) for key in ("lean_joints", "forward", "backward")}
    assert total == {"lean_joints": 2, "forward": 5, "backward": 5}  # every half ran in ORT (joint._Counted)


def test_lean_and_aot_calls_give_bitwise_equal_training():
    torch.manual_seed(1)
    base = MLP()
    runs = []
    for lean in (True, False):
        model = copy.deepcopy(base)
        recording = Recording()
        compiled = framejit.compile(model, backend=recording)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        losses = []
        for k in range(4):
            x = torch.randn(3, 6, generator=torch.Generator().manual_seed(k))
            loss = compiled(x).square().mean()
            loss.backward()
            losses.append(loss.detach())
            opt.step(), opt.zero_grad()
            if not lean:
                for graph in recording.joint_graphs():
                    for entry in graph.joints.values():
                        entry.lean, entry.parts = None, None
        runs.append((losses, [p.detach().clone() for p in model.parameters()]))
    (la, pa), (lb, pb) = runs
    assert all(torch.equal(a, b) for a, b in zip(la, lb))
    assert all(torch.equal(a, b) for a, b in zip(pa, pb))


def _two_steps(fn, *shapes):
    """Eager and compiled tensors after one full step, so the compiled joint is lean from then on."""
    compiled = framejit.compile(fn, backend="onnxrt")
    leaves = [torch.randn(*s, requires_grad=True) for s in shapes]
    compiled(*leaves).sum().backward()
    return compiled


def test_backward_twice_and_in_place_change_of_a_saved_tensor_raise_eagers_errors():
    def fn(x, w):
        return torch.tanh(x @ w).square()
    compiled = _two_steps(fn, (3, 4), (4, 2))
    for run in (fn, compiled):
        x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True)
        out = run(x, w)
        if run is compiled:
            assert type(out.grad_fn).__name__ == "LeanJointBackward"
        loss = out.sum()
        loss.backward()
        with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
            loss.backward()
        w2 = torch.randn(4, 2, requires_grad=True)
        x2 = torch.randn(3, 4, requires_grad=True)
        leaf = w2.detach().requires_grad_()
        out = run(x2, leaf)
        with torch.no_grad():
            leaf.add_(1.0)  # the forward saved `w`: its version changed
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


def test_retain_graph_after_a_plain_backward_and_double_backward():
    def fn(x, w):
        return torch.sigmoid(x @ w).square()
    compiled = _two_steps(fn, (3, 4), (4, 2))  # first backward: plain (no retain_graph)
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True)
    ex, ew = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    out, want = compiled(x, w).sum(), fn(ex, ew).sum()
    for _ in range(2):  # NOTE [No donated buffers]: AOT autograd refused this (donated buffers)
        out.backward(retain_graph=True)
        want.backward(retain_graph=True)
        torch.testing.assert_close(w.grad, ew.grad)
        torch.testing.assert_close(x.grad, ex.grad)
    (grad,) = torch.autograd.grad(compiled(x, w).sum(), w, create_graph=True)
    (want_grad,) = torch.autograd.grad(fn(ex, ew).sum(), ew, create_graph=True)
    torch.testing.assert_close(grad, want_grad)
    with pytest.raises(RuntimeError, match="double backward"):
        grad.sum().backward()


def test_outputs_that_need_no_gradient_and_weights_that_do_not():
    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(5, 4)
            self.frozen = torch.nn.Linear(4, 4)
            self.frozen.requires_grad_(False)

        def forward(self, x):
            y = self.frozen(torch.relu(self.fc(x)))
            return y, y.argmax(-1), (y * 2).detach()
    torch.manual_seed(2)
    model = Head()
    ref = copy.deepcopy(model)
    compiled = framejit.compile(model, backend="onnxrt")
    opt, ref_opt = (torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.1) for m in (model, ref))
    for k in range(3):
        x = torch.randn(6, 5)
        (y, idx, det), (ey, eidx, edet) = compiled(x), ref(x)
        assert (y.requires_grad, idx.requires_grad, det.requires_grad) == (True, False, False)
        assert torch.equal(idx, eidx) and idx.dtype == eidx.dtype
        torch.testing.assert_close(det, edet)
        (y.sum() + det.sum()).backward()
        (ey.sum() + edet.sum()).backward()
        for a, b in zip(model.parameters(), ref.parameters()):
            assert (a.grad is None) == (b.grad is None)
            if a.grad is not None:
                torch.testing.assert_close(a.grad, b.grad)
        opt.step(), ref_opt.step(), opt.zero_grad(), ref_opt.zero_grad()
        if k:
            assert type(y.grad_fn).__name__ == "LeanJointBackward"


def test_batchnorm_running_statistics_are_written_back_as_in_eager():
    # NOTE [Buffers written back]: the running statistics and num_batches_tracked are mutated inputs
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.GELU())
    ref = copy.deepcopy(model)
    compiled = framejit.compile(model, backend="onnxrt")
    bn, ref_bn = model[1], ref[1]
    versions = [(b._version, r._version) for b, r in zip(bn.buffers(), ref_bn.buffers())]
    kinds = _train(model, ref, compiled, [torch.randn(5, 6) for _ in range(4)])
    assert kinds == ["CompiledFunctionBackward"] + ["LeanJointBackward"] * 3
    assert int(bn.num_batches_tracked) == int(ref_bn.num_batches_tracked) == 4
    bumps = [(b._version - vb, r._version - vr)
             for (b, r), (vb, vr) in zip(zip(bn.buffers(), ref_bn.buffers()), versions)]
    assert all(b == r for b, r in bumps), bumps  # one version bump per write, as eager's in-place update
    model.eval(), ref.eval()
    x = torch.randn(5, 6)
    torch.testing.assert_close(compiled(x), ref(x), rtol=1e-5, atol=1e-6)


def test_joints_that_need_aot_wrappers_keep_them():
    def fn(x, w):
        return torch.relu(x @ w), x.view(-1)
    compiled = framejit.compile(fn, backend="onnxrt")
    for _ in range(3):
        x, w = torch.randn(3, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True)
        out, flat = compiled(x, w)
        # relu's result, which eager saves and flat's backward never reads, comes as a copy of the joint's own
        # saved tensor (NOTE [Checks where eager's backward reaches]): the joint's node is below the copy
        assert type(out.grad_fn).__name__ == "CloneBackward0"
        assert flat._base is x and type(out.grad_fn.next_functions[0][0]).__name__ == "CompiledFunctionBackward"
        (out.sum() + flat.sum()).backward()
        torch.testing.assert_close(x.grad, (torch.relu(x @ w) > 0).float() @ w.t() + 1)


def test_a_persisted_joint_loaded_in_a_later_process_goes_lean_too(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "cache_enabled", True)
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "cache"))
    torch.manual_seed(4)
    model = MLP()
    ref = copy.deepcopy(model)
    inputs = [torch.randn(4, 6) for _ in range(4)]
    assert _train(model, ref, framejit.compile(model, backend="onnxrt"), inputs[:1]) == ["CompiledFunctionBackward"]
    framejit.reset()  # the frame and the joint now come from the store (NOTE [Persisted joints])
    before = dict(joint.STATS)
    kinds = _train(model, ref, framejit.compile(model, backend="onnxrt"), inputs[1:])
    assert joint.STATS["loaded"] - before.get("loaded", 0) == 1 and joint.STATS["traced"] == before.get("traced", 0)
    assert kinds == ["CompiledFunctionBackward", "LeanJointBackward", "LeanJointBackward"]


def test_a_view_of_an_intermediate_returned_alone_goes_lean():
    # AOT autograd returns such an output through aten._unsafe_view (output type unsafe_view_alias, as the
    # zoo's lstm's last hidden state); lean calls do the same
    def fn(x, w):
        h = torch.tanh(x @ w)
        return h.sum(), h.t()[0]
    compiled = framejit.compile(fn, backend="onnxrt")
    kinds = []
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        x, w = torch.randn(3, 4, generator=g, requires_grad=True), torch.randn(4, 2, generator=g, requires_grad=True)
        ex, ew = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        (total, row), (etotal, erow) = compiled(x, w), fn(ex, ew)
        kinds.append(type(row.grad_fn).__name__)
        torch.testing.assert_close(row, erow)
        (total + row.square().sum()).backward()
        (etotal + erow.square().sum()).backward()
        torch.testing.assert_close(x.grad, ex.grad)
        torch.testing.assert_close(w.grad, ew.grad)
    assert kinds[1:] == ["LeanJointBackward"] * 2, kinds
