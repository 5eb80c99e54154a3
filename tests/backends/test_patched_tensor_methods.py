"""A program that patched a torch.Tensor method (`torch.Tensor.add = f`) gets eager's results on every
backend (NOTE [Patched tensor methods] in capture/attributes.py, NOTE [Patched Tensor methods while
lowering] in backends/torch_methods.py): `x.add(1)` runs f, `a + b` stays an addition."""
from __future__ import annotations

import pytest
import torch

import framejit

BACKENDS = ["eager", "onnxrt", "triton"]


def _program():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)

    def f(x):
        return lin(x) + x.add(1) * 2

    return lin, f


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_patched_tensor_add_is_called_where_the_program_calls_it(monkeypatch, backend, grad):
    if backend == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(torch.Tensor, "add", lambda self, other: self - other, raising=True)
    lin, f = _program()
    compiled = framejit.compile(f, backend=backend)
    for rows in (2, 3):
        x = torch.arange(4.0 * rows).reshape(rows, 4)
        with torch.set_grad_enabled(grad):
            want, got = f(x), compiled(x)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        if grad:
            got.sum().backward()
            got_grad, lin.weight.grad = lin.weight.grad, None
            f(x).sum().backward()
            torch.testing.assert_close(got_grad, lin.weight.grad)
            lin.weight.grad = None
    assert vars(torch.Tensor)["add"](torch.ones(1), 1).item() == 0.0  # the patch is still in place
