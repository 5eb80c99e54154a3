"""NOTE [Compile-aware paths that change results]: library code that takes a different-valued path when
`torch.compiler.is_compiling()` answers True runs its eager path instead (the query answers False there,
eager's answer)."""
import warnings

import pytest
import torch

import framejit


def _inputs(length: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, length, 16, generator=g)
    mask = torch.zeros(2, length, dtype=torch.bool)
    mask[0, -2:] = True  # left-aligned padding: eager takes the nested-tensor fast path
    return x, mask, torch.randn(2, 3, 16, generator=g)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the nested-tensor prototype warning, eager's own
        yield


def test_transformer_encoder_padding_fast_path_matches_eager_everywhere():
    torch.manual_seed(0)
    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2).eval()
    compiled = framejit.compile(enc)
    for length, seed in ((5, 1), (5, 2), (7, 3)):
        x, mask, _ = _inputs(length, seed)
        with torch.no_grad():
            expected = enc(x, src_key_padding_mask=mask)
            got = compiled(x, src_key_padding_mask=mask)
        assert (expected[0, -2:] == 0).all()  # eager's fast path: zeros at padded positions
        torch.testing.assert_close(got, expected)


def test_transformer_without_memory_mask_matches_eager():
    torch.manual_seed(0)
    model = torch.nn.Transformer(16, 2, 1, 1, 32, batch_first=True).eval()
    compiled = framejit.compile(model)
    for length, seed in ((5, 4), (6, 5)):
        x, mask, tgt = _inputs(length, seed)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x, tgt, src_key_padding_mask=mask),
                                       model(x, tgt, src_key_padding_mask=mask))


def test_encoder_paths_eager_does_not_fast_path_stay_one_graph():
    torch.manual_seed(0)
    enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2)
    x, mask, _ = _inputs(5, 6)
    for train in (True, False):  # training mode, or no padding mask: the query is never asked
        enc.train(train)
        kwargs = {"src_key_padding_mask": mask} if train else {}
        report = framejit.explain(enc)(x, **kwargs)
        assert (report.graph_count, report.graph_break_count, len(report.eager_frames)) == (1, 0, 0)
        torch.manual_seed(1)
        got = framejit.compile(enc)(x, **kwargs)
        torch.manual_seed(1)
        torch.testing.assert_close(got, enc(x, **kwargs))
