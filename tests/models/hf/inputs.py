"""Seeded keyword inputs for the HuggingFace catalog, shaped the way users pass them.

Role: each maker takes `(seed, batch, seq)` and returns a fresh dict of keyword arguments (token ids with
an attention mask whose second row is right-padded, pixel values, log-mel features, raw audio). Values
come from a private `torch.Generator`, so the global RNG is never touched; equal arguments give equal
values, and shapes depend only on `batch` and `seq`, never on the seed.
"""
from __future__ import annotations

import torch

VOCAB = 100
FIRST_TOKEN = 3  # ids 0..2 are the special tokens (pad, bos/eos) of the tiny configs


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _ids(gen: torch.Generator, batch: int, seq: int) -> torch.Tensor:
    return torch.randint(FIRST_TOKEN, VOCAB, (batch, seq), generator=gen)


def _padded_mask(batch: int, seq: int) -> torch.Tensor:
    """Ones, with the last two positions of the second row padded (a batch of unequal lengths)."""
    mask = torch.ones(batch, seq, dtype=torch.long)
    if batch > 1:
        mask[1, -2:] = 0
    return mask


def text(seed: int, batch: int, seq: int) -> dict:
    gen = _gen(seed)
    return {"input_ids": _ids(gen, batch, seq), "attention_mask": _padded_mask(batch, seq)}


def ids_only(seed: int, batch: int, seq: int) -> dict:
    """Token ids alone, for models that take no attention mask (FNet)."""
    return {"input_ids": _ids(_gen(seed), batch, seq)}


def text_with_types(seed: int, batch: int, seq: int) -> dict:
    inputs = text(seed, batch, seq)
    types = torch.zeros(batch, seq, dtype=torch.long)
    types[:, seq // 2:] = 1
    inputs["token_type_ids"] = types
    return inputs


def text_with_eos(seed: int, batch: int, seq: int) -> dict:
    """Token ids that end each sequence with eos id 2 (CLIP text pools at the eos token)."""
    inputs = text(seed, batch, seq)
    inputs["input_ids"][:, -1] = 2
    inputs["attention_mask"] = torch.ones(batch, seq, dtype=torch.long)
    return inputs


def seq2seq(seed: int, batch: int, seq: int) -> dict:
    inputs = text(seed, batch, seq)
    decoder = _ids(_gen(seed + 7919), batch, max(2, seq // 2))
    decoder[:, 0] = 0  # the decoder start token
    inputs["decoder_input_ids"] = decoder
    return inputs


def pixels(seed: int, batch: int, seq: int, size: int = 32) -> dict:
    del seq  # images have a fixed size
    return {"pixel_values": torch.randn(batch, 3, size, size, generator=_gen(seed))}


def pixels_224(seed: int, batch: int, seq: int) -> dict:
    return pixels(seed, batch, seq, size=224)


def mel(seed: int, batch: int, seq: int, bins: int = 16, frames: int = 32) -> dict:
    del seq  # Whisper pads features to a fixed number of frames
    return {"input_features": torch.randn(batch, bins, frames, generator=_gen(seed))}


def mel_seq2seq(seed: int, batch: int, seq: int) -> dict:
    inputs = mel(seed, batch, seq)
    decoder = _ids(_gen(seed + 7919), batch, max(2, seq // 2))
    decoder[:, 0] = 1  # the decoder start token of the tiny Whisper config
    inputs["decoder_input_ids"] = decoder
    return inputs


def spectrogram(seed: int, batch: int, seq: int, frames: int = 32, bins: int = 16) -> dict:
    """Log-mel frames by bins, as the Audio Spectrogram Transformer takes them (a fixed number of frames)."""
    del seq
    return {"input_values": torch.randn(batch, frames, bins, generator=_gen(seed))}


def waveform(seed: int, batch: int, seq: int) -> dict:
    """Raw audio: `seq` * 40 samples per row (the tiny feature encoder strides by 5 * 2)."""
    return {"input_values": torch.randn(batch, seq * 40, generator=_gen(seed))}


def waveform_with_labels(seed: int, batch: int, seq: int) -> dict:
    """Raw audio and CTC labels: `seq` // 2 token ids per row, the second row's last one padded (-100)."""
    inputs = waveform(seed, batch, seq)
    labels = _ids(_gen(seed + 104729), batch, max(2, seq // 2))
    if batch > 1:
        labels[1, -1] = -100
    inputs["labels"] = labels
    return inputs
