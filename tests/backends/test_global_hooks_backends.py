"""Global module hooks with the onnxrt and triton backends in training (issue 12).

`torch.nn.modules.module.register_module_forward_pre_hook` / `register_module_forward_hook` run for every
module call of the process. The user's modules are captured with their hooks inlined; framejit's own
GraphModules must never reach them: a training graph's output checks (backends/joint_outputs.py) called the
flattened graph through `torch.func.functional_call`, i.e. `module(...)`, so the user's hook saw (and could
change the inputs of) a GraphModule eager never calls. NOTE [Graph modules called through forward].
"""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.nn.modules import module as torch_module

import framejit


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.b = nn.Linear(8, 2)

    def forward(self, x):
        return self.b(self.a(x).relu()).sum()


def _run(model, xs, seen):
    losses, grads = [], []
    for x in xs:
        seen.append("step")
        loss = model(x)
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
        model.zero_grad()
    return losses, grads


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_global_hooks_see_only_the_users_modules_in_training(backend):
    seen: list = []

    def pre(m, args):
        seen.append(("pre", type(m).__name__))

    def post(m, args, out):
        seen.append(("post", type(m).__name__))

    torch.manual_seed(0)
    eager_model = Net()
    compiled_model = Net()
    compiled_model.load_state_dict(eager_model.state_dict())
    compiled = framejit.compile(compiled_model, backend=backend)
    handles = [torch_module.register_module_forward_pre_hook(pre), torch_module.register_module_forward_hook(post)]
    try:
        xs = [torch.randn(3, 4, generator=torch.Generator().manual_seed(s)) for s in (1, 2, 3)]
        expected_losses, expected_grads = _run(eager_model, xs, seen)
        expected_seen, seen[:] = list(seen), []
        losses, grads = _run(compiled, xs, seen)
    finally:
        for h in handles:
            h.remove()
    assert seen == expected_seen  # no ("pre", "GraphModule") among them
    for got, want in zip(losses, expected_losses):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    for got, want in zip(grads, expected_grads):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-4)
