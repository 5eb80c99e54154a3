"""Factory calls that name `generator=None` with a symbolic size (issue 11, h11hf2 sweep: UnivNet).

`torch.randn(shape, generator=None, dtype=..., device=...)` selects the randn.generator overload, whose size
is int[]: with a symbolic size (after a call at another length) the fake call raised "SymIntArrayRef expected
to contain only concrete integers", which framejit took for the traced code's own error, so the whole frame ran
eagerly (UnivNetModel's third call; stock torch.compile raises there). NOTE [Symbolic sizes an op refuses]:
the call is recorded without `generator=None` (the default generator either way: the same draws).
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend


class Vocoder(torch.nn.Module):
    """UnivNet's noise: a randn of the input's length, drawn with an explicit (None) generator."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    def forward(self, features, generator=None):
        batch, length, _ = features.shape
        noise = torch.randn((batch, length, 4), generator=generator, dtype=features.dtype, device=features.device)
        ones = torch.ones((batch, length, 1), dtype=features.dtype)
        return self.proj(features + noise) * ones


def test_a_factory_call_with_a_none_generator_takes_symbolic_sizes():
    """Lengths 5, 5, 7, 6: equal to eager under the same seed, no frame run eagerly, 2 graphs (the third
    call makes the length symbolic and the fourth reuses that graph)."""
    torch.manual_seed(0)
    model = Vocoder()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    before = framejit.stats()["eager_frames"]
    for seed, (batch, length) in enumerate([(2, 5), (2, 5), (1, 7), (1, 6)]):
        x = torch.randn(batch, length, 4, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            torch.manual_seed(100 + seed)
            want = model(x)
            torch.manual_seed(100 + seed)
            got = compiled(x)
        torch.testing.assert_close(got, want)
    assert framejit.stats()["eager_frames"] == before, framejit.stats()["eager_frame_reasons"][before:]
    assert backend.graph_count == 2, backend.graph_count
    assert all(any(n.target is torch.randn for n in gm.graph.nodes) for gm in backend.graphs)
