"""A training step as HuggingFace users write it, for catalog architectures (issue 11).

Role: tools/hf_triage.py --train and tests/models/hf/test_hf_families2.py share this, so that both
measure the same thing: `training_variant(arch)` gives (build, make_inputs, head) for a catalog Arch:
the model in train mode with a head that takes `labels` (a causal LM: the ids; an encoder-decoder: the
decoder ids; encoders, vision and audio: a masked-LM, image- or sequence-classification or CTC head of the
same family); `train_step(model, kwargs, seed)` runs `out = model(**kwargs)`, `out.loss.backward()` and
returns the loss and every parameter's gradient (clearing them); `assert_steps_close(got, want)` compares
two such results (1e-4).
"""
from __future__ import annotations

import re

import torch

from tests.models.hf import catalog


# NOTE [HF training step]
# A training step as HF users write it: `out = model(**batch, labels=...)`, `out.loss.backward()`. Every
# source of randomness a training forward has besides the weights (dropout, layer drop, SpecAugment masks,
# router jitter) is switched off in the config, and torch's RNG is seeded before each call (ViTMAE's
# masking noise), so eager, stock and framejit runs of identically built models are comparable. The step's
# result is the loss and every parameter's gradient (then cleared, so steps do not accumulate).
_RANDOM_CONFIG = re.compile(r"(dropout|drop_rate|drop_path|pdrop|layerdrop|mask_time_prob|mask_feature_prob|jitter)")
_LOSS_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration", "MTModel", "ForCTC", "Classification",
               "ForMaskedLM")
_HEADS = {"encoder": ("ForMaskedLM", "ForSequenceClassification"), "vision": ("ForImageClassification",),
          "audio": ("ForCTC", "ForSequenceClassification"), "decoder": ("ForCausalLM",), "moe": ("ForCausalLM",),
          "seq2seq": ("ForConditionalGeneration",)}


def _zero_randomness(config) -> None:
    for key, value in list(vars(config).items()):
        if _RANDOM_CONFIG.search(key) and isinstance(value, (int, float)) and not isinstance(value, bool):
            setattr(config, key, 0.0)
        elif _RANDOM_CONFIG.search(key) and isinstance(value, list):
            setattr(config, key, [0.0] * len(value))
        elif hasattr(value, "to_dict") and hasattr(value, "model_type"):  # a nested config (vision_config...)
            _zero_randomness(value)


def training_variant(arch):
    """(build, make_inputs, head): the arch's model with a head that takes `labels`, or the arch's own model
    (head None) when its family has none; see NOTE [HF training step]."""
    import transformers
    head = arch.model if arch.model.endswith(_LOSS_HEADS) and not arch.submodule else None
    if head is None and not arch.submodule:
        stem = arch.model[:-len("Model")] if arch.model.endswith("Model") else None
        for suffix in _HEADS.get(arch.family, ()) if stem else ():
            if hasattr(transformers, stem + suffix):
                head = stem + suffix
                break

    def build():
        config = getattr(transformers, arch.config)(**arch.config_kwargs)
        _zero_randomness(config)
        if head and head.endswith("Classification"):
            config.num_labels = 2
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(catalog.WEIGHT_SEED)
            model = getattr(transformers, head or arch.model)(config)
        if arch.submodule:
            model = getattr(model, arch.submodule)()
        return model.train()

    def make_inputs(seed, batch=catalog.BATCH, seq=catalog.SEQ):
        kwargs = arch.make_inputs(seed, batch, seq)
        if head is None or "labels" in kwargs:
            return kwargs
        gen = torch.Generator().manual_seed(seed + 31)
        if head.endswith("Classification"):
            kwargs["labels"] = torch.randint(0, 2, (next(iter(kwargs.values())).shape[0],), generator=gen)
        elif "decoder_input_ids" in kwargs:
            kwargs["labels"] = kwargs.pop("decoder_input_ids")
        elif head.endswith("ForCTC"):
            kwargs["labels"] = torch.randint(3, 100, (kwargs["input_values"].shape[0], 3), generator=gen)
        else:
            kwargs["labels"] = kwargs["input_ids"].clone()
        return kwargs

    return build, make_inputs, head


def train_step(target, kwargs: dict, seed: int):
    model = target.__self__ if hasattr(target, "__self__") else target
    module = getattr(model, "_orig_mod", None) or getattr(model, "module", None) or model
    if not isinstance(module, torch.nn.Module):
        module = model
    torch.manual_seed(seed)
    out = target(**kwargs)
    loss = out.loss if getattr(out, "loss", None) is not None else sum(
        t.float().mean() for t in _float_tensors(out))
    loss.backward()
    params = dict(module.named_parameters())
    grads = {n: p.grad.clone() for n, p in params.items() if p.grad is not None}
    for p in params.values():
        p.grad = None
    return {"loss": loss.detach(), "grads": grads}


def _float_tensors(value):
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and value.requires_grad:
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _float_tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _float_tensors(v)


def assert_steps_close(got, want) -> None:
    """Two results of train_step: equal losses, the same parameters with gradients, equal gradients."""
    torch.testing.assert_close(got["loss"], want["loss"], atol=1e-4, rtol=1e-4, msg=lambda m: f"loss: {m}")
    assert sorted(got["grads"]) == sorted(want["grads"]), \
        f"gradients of {sorted(set(got['grads']) ^ set(want['grads']))[:5]} differ in presence"
    for name, grad in want["grads"].items():
        torch.testing.assert_close(got["grads"][name], grad, atol=1e-4, rtol=1e-4, msg=lambda m: f"grad {name}: {m}")


__all__ = ["assert_steps_close", "train_step", "training_variant"]
