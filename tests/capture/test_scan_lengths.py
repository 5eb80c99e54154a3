"""torch's associative_scan when the scanned length is a symbolic size (issue 11, h11hf2 sweep: Jamba).

transformers' Mamba-style mixers (Jamba, Mamba, FalconMamba, Zamba) call
`torch._higher_order_ops.associative_scan(..., dim=2, combine_mode="generic")` over the sequence on their
compile path. framejit traces it as its sequence of steps (NOTE [Associative scan]), which specialises the
length. Once a call at another sequence length made the sizes symbolic, the substitute's loop was a loop over
a symbolic range, which runs as Python (NOTE [Loops over symbolic ranges]): a graph break in the mixer, with
the scan and the layer code around it outside the graphs (Jamba's third call held 428 of stock torch.compile's
592 ops). The substitute now iterates a list of the positions, so the length is specialised as the NOTE says:
no break, one graph per length, each holding the whole scan.
"""
from __future__ import annotations


import torch

import framejit
from tests.helpers import CountingBackend, logged_breaks


def _combine(left, right):
    a_left, b_left = left
    a_right, b_right = right
    return a_left * a_right, a_right * b_left + b_right


def _selective_scan(dt, u, reverse):
    from torch._higher_order_ops.associative_scan import associative_scan
    discrete_a = torch.exp(-dt)
    _, states = associative_scan(_combine, (discrete_a, dt * u), dim=2, reverse=reverse, combine_mode="generic")
    return states


class Mixer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, x, reverse=False):
        dt = torch.nn.functional.softplus(self.proj(x)).transpose(1, 2).unsqueeze(-1)  # (batch, 4, seq, 1)
        states = _selective_scan(dt, x.transpose(1, 2).unsqueeze(-1), reverse)
        return self.proj(states.squeeze(-1).transpose(1, 2)).tanh()


def _stack_count(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.stack)


def test_a_scan_over_a_symbolic_length_is_captured_whole():
    """Sequence lengths 5, 5, 7, 6, 7 (the third call makes the sizes symbolic): values equal eager's, no
    graph break, one graph per length, each with the scan's stack in it."""
    for reverse in (False, True):
        torch.manual_seed(0)
        model = Mixer()
        backend = CountingBackend()
        compiled = framejit.compile(model, backend=backend)
        before = framejit.stats()["eager_frames"]
        with logged_breaks() as breaks:
            for seed, (batch, seq) in enumerate([(2, 5), (2, 5), (1, 7), (1, 6), (1, 7)]):
                x = torch.randn(batch, seq, 4, generator=torch.Generator().manual_seed(seed))
                with torch.no_grad():
                    torch.testing.assert_close(compiled(x, reverse), model(x, reverse))
        assert not breaks, breaks
        assert framejit.stats()["eager_frames"] == before
        assert backend.graph_count == 3, backend.graph_count
        assert all(_stack_count(gm) >= 1 for gm in backend.graphs)
