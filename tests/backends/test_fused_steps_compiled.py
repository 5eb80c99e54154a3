"""Fused optimizer steps inside compiled code: the torch.ops.aten forms are not dropped (NOTE [Writes that
bump no version]) and an onnxrt-compiled AdamW(fused=True) step lets onnxrt's frozen weights see its writes
(NOTE [Counting wrappers run in Python]). Differential: eager vs framejit over several steps."""
import pytest
import torch

import framejit

_ADAMW = dict(lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False)
_SGD = dict(weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0, nesterov=False, maximize=False,
            is_first_step=True)


def _direct(kind):
    def f(ps, gs, ms, vs, steps):
        a = ps[0] * 2
        if kind == "packet":
            torch.ops.aten._fused_adamw_(ps, gs, ms, vs, [], steps, **_ADAMW)
        elif kind == "overload":
            torch.ops.aten._fused_adamw_.default(ps, gs, ms, vs, [], steps, **_ADAMW)
        else:
            torch.ops.aten._fused_sgd_(ps, gs, [], **_SGD)
        return a + ps[0]
    return f


def _run_direct(kind, compiled):
    torch.manual_seed(0)
    ps = [torch.randn(4), torch.randn(3)]
    ms = [torch.zeros(4), torch.zeros(3)]
    vs = [torch.zeros(4), torch.zeros(3)]
    steps = [torch.zeros(()), torch.zeros(())]
    f = framejit.compile(_direct(kind), backend="eager") if compiled else _direct(kind)
    outs = []
    for i in range(4):
        g = torch.Generator().manual_seed(i)
        gs = [torch.randn(4, generator=g), torch.randn(3, generator=g)]
        for s in steps:
            s += 1
        outs.append(f(ps, gs, ms, vs, steps).clone())
        outs.extend(t.clone() for t in ps + ms + vs)
    return outs


@pytest.mark.parametrize("kind", ["packet", "overload", "sgd_packet"])
def test_aten_op_forms_write_their_lists(kind):
    framejit.reset()
    expected = _run_direct(kind, False)
    got = _run_direct(kind, True)
    assert not torch.equal(expected[1], expected[1 + 7])  # eager's step moves the parameters
    for e, c in zip(expected, got):
        assert torch.equal(e, c)


def _train_and_eval(compiled):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    opt = torch.optim.AdamW(m.parameters(), lr=0.05, fused=True)

    def step(x):
        loss = m(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss.detach()
    f = framejit.compile(step, backend="onnxrt") if compiled else step
    ev = framejit.compile(m, backend="onnxrt") if compiled else m
    losses, evals = [], []
    for i, b in enumerate([5, 3, 7, 1, 4]):
        g = torch.Generator().manual_seed(i)
        losses.append(f(torch.randn(b, 6, generator=g)))
        with torch.no_grad():
            evals.append(ev(torch.randn(b + 1, 6, generator=g)))
    return losses, evals


def test_fused_adamw_step_compiled_on_onnxrt_updates_frozen_weights():
    framejit.reset()
    e_losses, e_evals = _train_and_eval(False)
    c_losses, c_evals = _train_and_eval(True)
    for e, c in zip(e_losses, c_losses):
        torch.testing.assert_close(c, e, rtol=0, atol=1e-5)
    for e, c in zip(e_evals, c_evals):
        assert c.shape == e.shape
        torch.testing.assert_close(c, e, rtol=0, atol=1e-5)


def _storage_copy_then_eval(compiled):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).eval()

    def update(src):
        m[2].bias.untyped_storage().copy_(src.untyped_storage())
        return src * 2
    f = framejit.compile(update, backend="onnxrt") if compiled else update
    ev = framejit.compile(m, backend="onnxrt") if compiled else m
    outs = []
    with torch.no_grad():
        for i, b in enumerate([5, 3, 7, 1]):
            g = torch.Generator().manual_seed(i)
            outs.append(ev(torch.randn(b, 6, generator=g)))
            outs.append(f(torch.randn(4, generator=g)))
    return outs


def test_storage_write_compiled_on_onnxrt_updates_frozen_weights():
    """The same for tensor_watch's storage writers (NOTE [Storage writes count a use]) called in a compiled
    frame: the eval after the write saw the old bias (1.73 off eager's)."""
    framejit.reset()
    expected, got = _storage_copy_then_eval(False), _storage_copy_then_eval(True)
    assert not torch.equal(expected[0][:1], expected[2][:1])  # eager's bias changes
    for e, c in zip(expected, got):
        assert c.shape == e.shape
        torch.testing.assert_close(c, e, rtol=0, atol=1e-5)
