"""LSTM layers in onnxrt training graphs stay whole torch ops (NOTE [LSTM layers in training graphs]).

Differential: an `nn.LSTM` model trained for 2 AdamW steps (new data each step) through
`framejit.compile(backend="onnxrt")` matches eager's losses, gradients and parameters, with the LSTM's input requiring grad (after an embedding) and not requiring grad (the LSTM is the first layer).
Structural: the forward program calls one `framejit::mkldnn_rnn_layer_train` per layer and direction in
torch, the backward program one `aten.mkldnn_rnn_layer_backward`, and neither has an unrolled recurrence
(a few dozen nodes in all, not hundreds of per-time-step cell ops); the rest ran in ORT.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import framejit
from framejit.backends.onnxrt.runtime import OrtPart
from tests.backends.test_training_backends import Recording

TOL = dict(atol=2e-4, rtol=2e-3)


class Tagger(nn.Module):
    def __init__(self, embed: bool):
        super().__init__()
        self.embedding = nn.Embedding(20, 6) if embed else None
        self.lstm = nn.LSTM(6, 5, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(10, 3)

    def forward(self, x):
        if self.embedding is not None:
            x = self.embedding(x)
        out, (h, c) = self.lstm(x)
        return self.head(out).square().mean() + h.sum() * 0.1 + c.mean()


def _inputs(embed: bool, batch: int, steps: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    if embed:
        return torch.randint(0, 20, (batch, steps), generator=g)
    return torch.randn(batch, steps, 6, generator=g)


def _program_nodes(half) -> tuple[list, int]:
    """(targets of the torch nodes of the half's program, how many aten nodes its ORT parts hold)."""
    (program,) = [p for p in half.programs.values() if p is not None]
    in_torch = [n.target for n in program.graph_module.graph.nodes if n.op == "call_function"]
    assert program.num_parts >= 1 and any(isinstance(m, OrtPart) for m in program.graph_module.children())
    return in_torch, program.ort_nodes


@pytest.mark.parametrize("embed", [True, False])
def test_lstm_training_onnxrt_keeps_layers_whole(embed):
    torch.manual_seed(0)
    model = Tagger(embed)
    fast_model = copy.deepcopy(model)
    recording = Recording("onnxrt")
    fast = framejit.compile(fast_model, backend=recording)
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2, eps=1e-6) for m in (model, fast_model)]
    for seed in range(2):
        batch, steps = (2, 5) if embed else (3, 4)
        x = _inputs(embed, batch, steps, seed)
        losses = []
        for run, m, opt in ((model, model, opts[0]), (fast, fast_model, opts[1])):
            loss = run(x)
            loss.backward()
            losses.append(loss.detach())
            grads = [p.grad.clone() for p in m.parameters()]
            opt.step()
            opt.zero_grad()
            m._grads = grads
        torch.testing.assert_close(losses[1], losses[0], **TOL)
        for g_fast, g_eager in zip(fast_model._grads, model._grads):
            torch.testing.assert_close(g_fast, g_eager, **TOL)
    for p_fast, p_eager in zip(fast_model.parameters(), model.parameters()):
        torch.testing.assert_close(p_fast, p_eager, **TOL)

    (joint,) = recording.joints()
    assert joint.stats["backward"] == 2
    layer = torch.ops.framejit.mkldnn_rnn_layer_train.default
    for forward, backward in zip(joint.compiled_forwards, joint.compiled_backwards, strict=True):
        fw_torch, fw_ort = _program_nodes(forward)
        bw_torch, bw_ort = _program_nodes(backward)
        assert fw_torch.count(layer) == 4  # 2 layers x 2 directions
        assert bw_torch.count(torch.ops.aten.mkldnn_rnn_layer_backward.default) == 4
        assert torch.ops.aten.sigmoid.default not in fw_torch
        # no unrolled recurrence: the zoo's lstm had 665 forward and 2027 backward ORT nodes
        assert fw_ort + bw_ort + len(fw_torch) + len(bw_torch) < 250
