"""GPT-style decoder for the zoo: token + position embeddings, causal self-attention, pre-LN blocks.

Role: exercises what language-model code does in forward: a config @dataclass read through
`self.config`, an output @dataclass (`logits`, `loss=None`), a causal mask built in forward from the
sequence length, helper functions for splitting/merging heads, `math.sqrt` scaling, `masked_fill`
with `-inf`, weight tying (the LM head shares the token embedding), `nn.ModuleDict` + `nn.ModuleList`,
an `assert` on a Python value, and an optional `targets` argument that turns on a cross-entropy loss.

Two cases share the model: "gpt" (`forward(idx)`, loss is None) and "gpt_loss" (`forward(idx, targets)`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from tests.models._case import Case, build_seeded, check_size, default_tolerance, generator, randint


@dataclasses.dataclass
class GPTConfig:
    vocab_size: int = 64
    block_size: int = 16
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    dropout: float = 0.1
    bias: bool = True
    mlp_ratio: int = 4


@dataclasses.dataclass
class GPTOutput:
    logits: torch.Tensor
    loss: Optional[torch.Tensor] = None


def tanh_gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU, tanh approximation, written out as model code often does."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def causal_mask(length: int, device: torch.device) -> torch.Tensor:
    """Boolean (1, 1, T, T) mask, True where a query may attend to a key."""
    ones = torch.ones(length, length, dtype=torch.bool, device=device)
    return torch.tril(ones).view(1, 1, length, length)


def split_heads(x: torch.Tensor, n_head: int) -> torch.Tensor:
    batch, length, width = x.size()
    return x.view(batch, length, n_head, width // n_head).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    batch, n_head, length, head_dim = x.shape
    return x.transpose(1, 2).contiguous().view(batch, length, n_head * head_dim)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (split_heads(t, self.n_head) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = causal_mask(x.size(1), x.device)
        scores = scores.masked_fill(~mask, float("-inf"))
        probs = F.softmax(scores, dim=-1)
        if self.training:
            probs = self.attn_dropout(probs)
        y = merge_heads(probs @ v)
        return self.resid_dropout(self.c_proj(y))


class FeedForward(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        hidden = config.mlp_ratio * config.n_embd
        self.c_fc = nn.Linear(config.n_embd, hidden, bias=config.bias)
        self.c_proj = nn.Linear(hidden, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(tanh_gelu(self.c_fc(x))))


class DecoderBlock(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = FeedForward(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict({
            "wte": nn.Embedding(config.vocab_size, config.n_embd),
            "wpe": nn.Embedding(config.block_size, config.n_embd),
            "drop": nn.Dropout(config.dropout),
            "h": nn.ModuleList(DecoderBlock(config) for _ in range(config.n_layer)),
            "ln_f": nn.LayerNorm(config.n_embd, bias=config.bias),
        })
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):  # scaled init of residual projections
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.uniform_(module.bias, -0.02, 0.02)

    def forward(self, idx: torch.Tensor, targets: Optional[torch.Tensor] = None) -> GPTOutput:
        _, length = idx.size()
        assert length <= self.config.block_size, f"sequence of {length} exceeds block size"
        pos = torch.arange(0, length, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return GPTOutput(logits=logits, loss=loss)


_SIZES = {
    # batch, sequence length, config
    "small": (2, 8, GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, n_embd=32)),
    "bench": (4, 128, GPTConfig(vocab_size=1024, block_size=256, n_layer=4, n_head=4, n_embd=256)),
}


def _build(name: str, size: str, with_targets: bool) -> Case:
    check_size(size)
    batch, length, config = _SIZES[size]
    config = dataclasses.replace(config)  # each model owns its config object
    model = build_seeded(lambda: GPT(config))

    def make_inputs(seed: int) -> tuple:
        gen = generator(seed)
        idx = randint(gen, config.vocab_size, batch, length)
        if not with_targets:
            return (idx,)
        return (idx, randint(gen, config.vocab_size, batch, length))

    kind = "forward(idx, targets): logits and cross-entropy loss" if with_targets else "forward(idx)"
    # symbolic_trace fails on the `assert` over a traced length and on the dataclass output.
    return Case(name, size, model, make_inputs, fx_traceable=False, dynamo_fullgraph=True,
                tolerance=default_tolerance(size),
                description=f"GPT decoder, causal attention, tied LM head; {kind}")


def build_gpt(size: str) -> Case:
    return _build("gpt", size, with_targets=False)


def build_gpt_loss(size: str) -> Case:
    return _build("gpt_loss", size, with_targets=True)
