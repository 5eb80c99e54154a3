"""framejit's counting descriptors on torch.Tensor (NOTE [NumPy arrays count a use] in tensor_watch.py) stay
transparent to the user's program: torch.Tensor.numpy and set_ keep torch's name and doc, and stock
torch.compile (the reference, used here by the test only) traces a tensor's .numpy() as before while a frozen
onnxrt weight is watched (before: Dynamo traced framejit's counting wrapper and failed at its dict lookup)."""
from __future__ import annotations

import warnings

import torch

import framejit
from framejit import tensor_watch


def test_counting_methods_keep_torchs_name_and_doc():
    tensor_watch.install()
    watched = torch.ones(3)
    tensor_watch.watch(watched)  # while a storage is watched, t.numpy is framejit's counting wrapper
    try:
        t = torch.ones(2)
        for name in ("numpy", "set_"):
            method = getattr(t, name)
            original = getattr(torch._C.TensorBase, name)
            assert method.__name__ == original.__name__
            assert method.__doc__ == original.__doc__
    finally:
        tensor_watch.unwatch_all()


def test_stock_compile_of_numpy_while_a_weight_is_watched():
    model = torch.nn.Linear(3, 2)
    compiled = framejit.compile(model, backend="onnxrt")
    with torch.no_grad():
        x = torch.randn(4, 3)
        torch.testing.assert_close(compiled(x), model(x))  # frozen: model.weight's storage is watched now
    assert tensor_watch._USES

    def f(x):
        return torch.from_numpy(x.numpy()) + 1

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stock = torch.compile(f, backend="eager", fullgraph=True)
        for n in (2, 5):
            x = torch.randn(n)
            torch.testing.assert_close(stock(x), f(x))
    with torch.no_grad():  # and the watch still sees a write through a NumPy array of the weight
        model.weight.detach().numpy()[0, 0] += 1.0
        x = torch.randn(4, 3)
        torch.testing.assert_close(compiled(x), model(x))
