"""More transformers families under framejit (issue 11): training steps as HF users write them.

Found by `tools/hf_triage.py --train --extra --resize` (catalog_extra.py holds the families the main
catalog lacks). Each test runs eager and compiled on identically built models over fresh inputs, at two
shapes, and checks values (losses and every gradient), graph and break counts and that no frame ran
wholly eagerly.

- Classification heads in training (`labels=`): the loss function stores `config.problem_type` on the
  first call, and every attribute read of a transformers 5.x config reads the config's own `__dict__`
  as a dict (HeterogeneousConfigMixin.__getattribute__). The store now shows through that dict value
  (NOTE [Stores under a dict the trace holds]); it was a graph break in every image- and
  sequence-classification training step (ViT, DeiT, BEiT, DINOv2, Swin, ConvNeXt, ResNet: 3 graphs and
  4 breaks where stock torch.compile has 2 graphs).
"""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import framejit  # noqa: E402
from tests.helpers import CountingBackend, logged_breaks  # noqa: E402
from tests.models.hf import catalog, harness  # noqa: E402
from tests.models.hf.training import assert_steps_close, train_step, training_variant  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning:torch._dynamo"),
              pytest.mark.filterwarnings("ignore::FutureWarning:transformers"),
              pytest.mark.filterwarnings("ignore::UserWarning:transformers")]


@pytest.fixture(autouse=True, scope="module")
def _quiet_transformers():
    harness.silence_transformers()


def _counting_breaks(run):
    """(run()'s result, the graph breaks framejit logged during it)."""
    with logged_breaks() as breaks:
        result = run()
    return result, breaks


# ---- NOTE [Stores under a dict the trace holds]: a config's store seen through its own __dict__ ------------

class _Config:
    """A transformers 5.x config in miniature: every attribute read looks at the instance dict first."""

    def __init__(self):
        self.problem_type = None
        self.scale = 2.0

    def __getattribute__(self, key):
        spec = super().__getattribute__("__dict__").get("_spec")
        if spec is not None and key in spec:
            raise AttributeError(key)
        return super().__getattribute__(key)

    def __setattr__(self, key, value):
        super().__setattr__(key, value)


def _loss(x, config):
    if config.problem_type is None:
        config.problem_type = "single" if x.shape[0] > 1 else "regression"
    config.seen = x.shape[0]  # a new attribute: appended to the dict, after the others
    y = x * config.scale
    return y.sum() if config.problem_type == "single" else y.mean(), list(config.__dict__), len(config.__dict__)


def _store_then_read_dict(x, config):
    config.first = 1  # recorded before the dict is first wrapped
    return x + len(config.__dict__), sorted(config.__dict__)


def test_stores_show_through_a_dict_the_trace_holds():
    for fn in (_loss, _store_then_read_dict):
        backend = CountingBackend()
        compiled = framejit.compile(fn, backend=backend)
        eager_config, compiled_config = _Config(), _Config()
        for size in (3, 3, 1, 5):
            x = torch.randn(size, 2)
            expected = fn(x, eager_config)
            before = harness.eager_frame_count()
            got, breaks = _counting_breaks(lambda: compiled(x, compiled_config))  # noqa: B023
            assert harness.eager_frame_count() == before
            assert not breaks, breaks
            torch.testing.assert_close(got[0], expected[0])
            assert got[1:] == expected[1:]
            assert vars(compiled_config) == vars(eager_config) and list(vars(compiled_config)) == \
                list(vars(eager_config))
        assert backend.graph_count >= 1


# ---- classification heads in training ---------------------------------------------------------------------

_TINY_VIT = dict(image_size=16, patch_size=8, num_channels=3, hidden_size=16, num_hidden_layers=1,
                 num_attention_heads=2, intermediate_size=32)


@pytest.mark.parametrize("name", ["vit", "bert"])
def test_classification_head_training_step(name):
    """A training step of an image / sequence classification head with labels: losses and gradients equal
    eager's over two calls and a resized one, no graph break, no eager frame (stock torch.compile: 2
    graphs over the first two calls, a recompile when the loss function set problem_type)."""
    import dataclasses
    arch = catalog.get(name)
    if name == "vit":
        arch = dataclasses.replace(arch, config_kwargs=_TINY_VIT,
                                   input_maker=lambda seed, batch, seq: {
                                       "pixel_values": torch.randn(batch, 3, 16, 16,
                                                                   generator=torch.Generator().manual_seed(seed))})
    else:
        arch = dataclasses.replace(arch, config_kwargs=dict(catalog._TEXT, hidden_size=16, num_hidden_layers=1,
                                                            intermediate_size=32),
                                   model="BertForSequenceClassification")
    build, make_inputs, head = training_variant(arch)
    assert head is not None and head.endswith("Classification")
    calls = [make_inputs(0), make_inputs(1), make_inputs(2, batch=1, seq=catalog.SEQ_ALT)]
    eager_model = build()
    expected = [train_step(eager_model, kwargs, i) for i, kwargs in enumerate(calls)]
    backend = CountingBackend()
    model = build()
    compiled = framejit.compile(model, backend=backend)
    before = harness.eager_frame_count()
    got, breaks = _counting_breaks(lambda: [train_step(compiled, kw, i) for i, kw in enumerate(calls)])
    assert harness.eager_frame_count() == before, harness.eager_frame_reasons()
    assert not breaks, breaks
    for g, w in zip(got, expected):
        assert_steps_close(g, w)
    assert model.config.problem_type == eager_model.config.problem_type is not None
    assert 1 <= backend.graph_count <= 3, backend.graph_count
