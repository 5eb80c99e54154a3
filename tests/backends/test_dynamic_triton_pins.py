"""Dynamic shapes on the triton backend (issue 13, h13dyn5): a frontend guard that holds at few sizes of its
symbols (a learned position table added to a patch sequence: `(h//2)*(w//2) + 1 == 17`) broke every probe,
so the graph compiled one module per shape, batch sizes included. Its symbols are now fixed at their example
values and one module serves every batch (NOTE [Symbols pinned by guards the probes miss],
triton/probe_relations.py). Values compared with eager, frontend graphs and generated modules counted."""
from __future__ import annotations


import pytest
import torch
from torch import nn

import framejit
from tests.helpers import RecordingBackend, assert_same




@pytest.fixture(autouse=True)
def _reset():
    framejit.reset()
    yield
    framejit.reset()


class Patches(nn.Module):
    """ViT's stem: a strided conv into patches, a class token, a learned position table of 17 rows."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Conv2d(3, 8, kernel_size=2, stride=2)
        self.cls = nn.Parameter(torch.randn(1, 1, 8))
        self.pos = nn.Parameter(torch.randn(1, 17, 8))

    def forward(self, x):
        x = self.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat((self.cls.expand(x.shape[0], -1, -1), x), dim=1)
        return (x + self.pos).relu().mean(1)


def test_a_position_table_pins_the_image_size_and_one_module_serves_every_batch(triton_modules):
    model = Patches()
    backend = RecordingBackend("triton")
    compiled = framejit.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for b in (2, 3, 5, 4, 7):
            x = torch.randn(b, 3, 8, 8)
            assert_same(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert len(backend.graphs) == 1
    assert [type(c).__name__ for c in backend.compiled] == ["DynamicGraph"]
    assert sum(triton_modules.values()) == 1  # before: 5, one per batch size


def test_another_image_size_the_table_allows_is_served_too(triton_modules):
    # 8x9 images also give 16 patches (9 // 2 == 4): another value of a fixed symbol, compiled for its
    # shape; the fixed module keeps serving 8x8 (values equal eager's throughout)
    model = Patches()
    backend = RecordingBackend("triton")
    compiled = framejit.compile(model, backend=backend, dynamic=True)
    with torch.no_grad():
        for b, w in ((2, 8), (3, 8), (2, 9), (4, 9), (5, 8)):
            x = torch.randn(b, 3, 8, w)
            assert_same(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert len(backend.graphs) == 1
    assert sum(triton_modules.values()) == 3  # the size-generic module, then one per 8x9 shape


def reshaped_in_threes(x):
    n = x.size(1)
    if n % 3 == 0:
        return x.view(x.size(0), n // 3, 3).sum(-1)
    return x * 2


def test_a_width_guarded_to_a_multiple_of_three_is_one_module(triton_modules):
    # the frontend guards Eq(b*n, 3*b*(n//3)) (the view's numel); probes are lowered to multiples of 3
    # (NOTE [Residues of probes]): one module for every multiple (before: 5 modules over 5 widths)
    backend = RecordingBackend("triton")
    compiled = framejit.compile(reshaped_in_threes, backend=backend, dynamic=True)
    for b, n in ((4, 6), (3, 9), (4, 12), (5, 15), (2, 21)):
        x = torch.randn(b, n)
        assert_same(compiled(x), reshaped_in_threes(x))
    assert len(backend.graphs) == 1
    assert sum(triton_modules.values()) == 1


def strided(x):
    return (x.t() * 2).sum(0), x[:, ::2].exp(), x.transpose(0, 1).contiguous().view(-1)


def test_pinning_reads_torchs_current_hint_table_without_a_deprecation_warning(recwarn):
    """hhuntD LOW-2: with torch's renamed hint table empty, the pinning read the deprecated `var_to_val`,
    which printed `FutureWarning: var_to_val is deprecated` on the user's stderr (strided views of
    changing size)."""
    compiled = framejit.compile(strided, backend="triton")
    for n in (3, 1025, 17, 1, 65, 0):
        x = torch.randn(n + 1, 5)[:, 1:]
        assert_same(compiled(x), strided(x))
    assert not [w for w in recwarn if "var_to_val" in str(w.message)]
