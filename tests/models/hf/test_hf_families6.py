"""transformers families outside the catalogs under framejit (issue 11, sweep h11hf6): time-series heads.

Found by sweeping tiny configs of detection, segmentation, video, time-series, audio and multimodal families
(eager vs stock torch.compile vs framejit). TimeSeriesTransformer, Informer and Autoformer forecast through
a `TransformedDistribution` whose `log_prob` reads `torch.distributions.constraints.real` (a plain object
a library module holds): every read was a graph break, 8 graphs per forward where stock torch.compile has 1
(NOTE [Objects held by library modules]; the pure-torch reproduction is
tests/capture/test_library_module_objects.py). Each test runs eager and compiled on identically built
models over fresh inputs and checks values (losses and every gradient in training), graph and break counts
and that no frame ran wholly eagerly.
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

_TINY_SERIES = dict(prediction_length=4, context_length=8, lags_sequence=[1, 2, 3], num_time_features=2, d_model=16,
                    encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                    encoder_ffn_dim=32, decoder_ffn_dim=32, dropout=0.0, attention_dropout=0.0,
                    activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0)


@pytest.fixture(autouse=True, scope="module")
def _quiet_transformers():
    harness.silence_transformers()


def _series_inputs(seed: int, batch: int = 3) -> dict:
    """Past values over context_length + the largest lag, their time features, and the future to score."""
    gen = torch.Generator().manual_seed(seed)
    past = 8 + 3
    return {"past_values": torch.randn(batch, past, generator=gen),
            "past_time_features": torch.randn(batch, past, 2, generator=gen),
            "past_observed_mask": torch.ones(batch, past),
            "future_values": torch.randn(batch, 4, generator=gen),
            "future_time_features": torch.randn(batch, 4, 2, generator=gen)}


def _build(config_name: str, model_name: str, train: bool):
    import transformers
    extra = dict(label_length=4) if config_name == "AutoformerConfig" else {}  # its decoder's start window
    config = getattr(transformers, config_name)(**_TINY_SERIES, **extra)
    torch.manual_seed(1234)
    model = getattr(transformers, model_name)(config)
    return model.train() if train else model.eval()


@pytest.mark.parametrize("config_name,model_name", [
    ("TimeSeriesTransformerConfig", "TimeSeriesTransformerForPrediction"),
    ("AutoformerConfig", "AutoformerForPrediction"),
])
def test_likelihood_forward_is_one_graph(config_name, model_name):
    """Forward with future_values: the negative log-likelihood loss under the distribution head (stock
    torch.compile: 1 graph, 0 breaks for these two calls). Autoformer's also needed NOTE [Random ops by name]:
    its `permute` counted as a random op, so the distribution's argument check after it broke 4 times."""
    model = _build(config_name, model_name, train=False)
    backend = CountingBackend()
    compiled = framejit.compile(model, backend=backend)
    eager0 = harness.eager_frame_count()
    with logged_breaks() as breaks:
        for seed in (0, 1):
            kwargs = _series_inputs(seed)
            want, got = harness.run(model, kwargs), harness.run(compiled, kwargs)
            harness.assert_outputs_close(got, want)
    assert breaks == []
    assert backend.graph_count == 1
    assert harness.eager_frame_count() == eager0

