"""Gemma3ForConditionalGeneration under framejit (issue 11, h11llava): its attention mask is built by
transformers' sdpa_mask under `with TransformGetItemToIndex():` (token_type_ids make an or-mask function, so the
vmap path runs). That block was a graph break and the frame after it ran eagerly: 8 graphs per call and an
eager frame where stock torch.compile makes 4 (NOTE [Getitem-to-index blocks]; the pure-torch reproduction is
tests/capture/test_getitem_to_index_blocks.py). It also checks that the model's work is in the graphs: nested
transformers wrappers of one code ran the inner model as plain Python, uncounted (NOTE [Closures made per call
share one hook]). One text layer and one vision layer keep it to a few seconds.
"""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import framejit  # noqa: E402
from tests.helpers import CountingBackend, logged_breaks  # noqa: E402
from tests.models.hf import harness  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning:torch._dynamo"),
              pytest.mark.filterwarnings("ignore::FutureWarning:transformers"),
              pytest.mark.filterwarnings("ignore::UserWarning:transformers")]


def _model():
    import transformers
    vision = dict(model_type="siglip_vision_model", image_size=32, patch_size=8, num_channels=3, hidden_size=32,
                  num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    text = dict(model_type="gemma3_text", vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=64, num_key_value_heads=2, head_dim=16, pad_token_id=0,
                sliding_window=8)
    config = transformers.Gemma3Config(vision_config=vision, text_config=text, mm_tokens_per_image=4,
                                       image_token_index=99, boi_token_index=97, eoi_token_index=96)
    torch.manual_seed(0)
    return transformers.Gemma3ForConditionalGeneration(config).eval()


def _inputs(seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    ids = torch.cat([torch.full((2, 4), 99), torch.randint(3, 90, (2, 6), generator=gen)], 1)
    mask = torch.ones_like(ids)
    mask[1, -seed - 1:] = 0  # padding that changes between calls
    return dict(input_ids=ids, attention_mask=mask, pixel_values=torch.randn(2, 3, 32, 32, generator=gen),
                token_type_ids=(ids == 99).long())


def test_gemma3_mask_block_is_captured_with_no_eager_frame():
    harness.silence_transformers()
    model = _model()
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    eager_before = harness.eager_frame_count()
    with logged_breaks() as breaks, torch.no_grad():
        for seed in (0, 1):
            kw = _inputs(seed)
            torch.testing.assert_close(compiled(**kw).logits, model(**kw).logits)
    assert harness.eager_frame_count() == eager_before
    assert not [b for b in breaks if "TransformGetItemToIndex" in b or "TorchFunctionMode" in b], breaks
    assert backend.graph_count <= 4  # stock torch.compile: 4 over these two calls (measured, 3.11)
    # the work is in those graphs: stock's hold 294 tensor ops over these calls, framejit's 253; when the
    # inner Gemma3Model ran as plain Python behind a shared closure hook (a76a769), 1 graph of 2 ops per call
    assert harness.op_count(backend) >= 200
