"""transformers' neural audio codecs EncodecModel and MimiModel under framejit (issue 11, helper hderiv).

Their convs compute padding amounts from the input length by arithmetic on 0-d int64 buffers and read them
as Python ints (`max(pl, pr)`, `if length <= max_pad`, `F.pad(h, (pl, pr))`, `padded[..., :end]`). Each
read was a graph break, and the frames resumed inside the convs reached the recompile limit and ran wholly
eagerly (at 29c8602, 3 calls: Encodec 105 breaks and 2 eager frames, Mimi 89 breaks and 1). Now the values
are derived from sizes (NOTE [Ints of tensors computed from sizes]): one graph per shape regime, no break,
no eager frame. Eager and compiled models are the same object (tiny configs, random weights), compared on
fresh waveforms of two lengths and batch sizes.
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

_CODEC = dict(hidden_size=16, num_filters=4, num_residual_layers=1, upsampling_ratios=[4, 2], codebook_size=32,
              codebook_dim=16)
CONFIGS = {
    "EncodecModel": ("EncodecConfig", dict(_CODEC, num_lstm_layers=1, target_bandwidths=[1.5],
                                           sampling_rate=2400), 400),
    "MimiModel": ("MimiConfig", dict(_CODEC, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                                     head_dim=8, intermediate_size=32, num_quantizers=2, num_semantic_quantizers=1,
                                     frame_rate=25.0, sampling_rate=1600, sliding_window=16, use_cache=False,
                                     upsample_groups=16, vector_quantization_hidden_dimension=16), 512),
}


@pytest.fixture(autouse=True, scope="module")
def _quiet_transformers():
    harness.silence_transformers()


def _build(model_name: str) -> torch.nn.Module:
    import transformers
    config_name, kwargs, _ = CONFIGS[model_name]
    config = getattr(transformers, config_name)(**kwargs)
    torch.manual_seed(1234)
    return getattr(transformers, model_name)(config).eval()


@pytest.mark.parametrize("model_name", sorted(CONFIGS))
def test_codec_forward_has_no_break_and_no_eager_frame(model_name):
    model = _build(model_name)
    length = CONFIGS[model_name][2]
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    eager0 = harness.eager_frame_count()
    gen = torch.Generator().manual_seed(0)
    with logged_breaks() as breaks:
        for batch, size in ((2, length), (2, length), (1, 2 * length + 3)):
            kwargs = {"input_values": torch.randn(batch, 1, size, generator=gen)}
            want = harness.run(model, kwargs)  # first: Mimi's codebooks fill a cache (`_embed`) on their first call
            harness.assert_outputs_close(harness.run(compiled, kwargs), want)
    assert harness.eager_frame_count() == eager0
    assert breaks == []
    assert backend.graph_count == 2  # the first shape, then the sizes made symbolic
