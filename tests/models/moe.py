"""Mixture-of-experts zoo model: top-k routing and a Python loop over SwiGLU experts.

Role: exercises MoE idioms while staying capturable as one graph.

# NOTE [Dense MoE routing]
# Routing is written without data-dependent Python control flow: `topk` picks the experts, `scatter`
# writes their renormalised weights into a dense (tokens, experts) matrix that is zero elsewhere, and
# every expert runs on every token, its output scaled by its column of that matrix. The result equals a
# sparse dispatch (unselected experts get weight 0); the loop over experts is a Python loop over an
# `nn.ModuleList` of fixed length, so a tracer unrolls it. The load-balancing loss uses
# `F.one_hot(..., num_classes=E)` so its shape does not depend on the data either.

`forward(hidden_states)` returns a `MoEOutput` namedtuple: `(hidden_states, router_logits, aux_loss)`,
with `router_logits` a tuple holding one (tokens, experts) tensor per layer.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from tests.models._case import Case, build_seeded, check_size, default_tolerance, generator, randn


@dataclasses.dataclass
class MoEConfig:
    hidden_size: int = 16
    expert_hidden: int = 32
    num_experts: int = 4
    top_k: int = 2
    num_layers: int = 2
    router_jitter: float = 0.01
    aux_loss_coef: float = 0.01
    output_aux_loss: bool = True


class MoEOutput(NamedTuple):
    hidden_states: torch.Tensor
    router_logits: tuple
    aux_loss: Optional[torch.Tensor]


def top_k_gating(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense (tokens, experts) combine weights, non-zero only at each token's top-k experts."""
    top_logits, top_idx = torch.topk(logits, k, dim=-1)
    top_weights = F.softmax(top_logits, dim=-1, dtype=torch.float32).to(logits.dtype)
    combine = torch.zeros_like(logits).scatter(-1, top_idx, top_weights)
    return combine, top_idx


def load_balancing_loss(router_logits: tuple, top_k: int, num_experts: int) -> torch.Tensor:
    """Switch-style auxiliary loss: experts x sum(fraction of routed tokens * mean router probability)."""
    logits = torch.cat(router_logits, dim=0)
    probs = logits.softmax(dim=-1)
    _, selected = torch.topk(logits, top_k, dim=-1)
    routed = F.one_hot(selected, num_classes=num_experts).sum(dim=1).float()
    tokens_per_expert = routed.mean(dim=0) / top_k
    return num_experts * torch.sum(tokens_per_expert * probs.mean(dim=0))


class SwiGLUExpert(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.w_gate = nn.Linear(dim, hidden, bias=False)
        self.w_up = nn.Linear(dim, hidden, bias=False)
        self.w_down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


class SparseMoE(nn.Module):
    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        self.top_k = config.top_k
        self.jitter = config.router_jitter
        self.router = nn.Linear(config.hidden_size, config.num_experts, bias=False)
        self.experts = nn.ModuleList(
            SwiGLUExpert(config.hidden_size, config.expert_hidden) for _ in range(config.num_experts))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        batch, length, dim = x.shape
        tokens = x.reshape(-1, dim)
        if self.training and self.jitter > 0:
            tokens = tokens * torch.empty_like(tokens).uniform_(1.0 - self.jitter, 1.0 + self.jitter)
        router_logits = self.router(tokens)
        combine, _ = top_k_gating(router_logits, self.top_k)
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            out = out + combine[:, e].unsqueeze(-1) * expert(tokens)
        return out.view(batch, length, dim), router_logits


class MoEBlock(nn.Module):
    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(config.hidden_size)
        self.moe = SparseMoE(config)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        moe_out, router_logits = self.moe(self.norm(x))
        return x + moe_out, router_logits


class MoEModel(nn.Module):
    def __init__(self, config: MoEConfig) -> None:
        super().__init__()
        self.config = config
        self.layers = nn.ModuleList(MoEBlock(config) for _ in range(config.num_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size)

    def forward(self, hidden_states: torch.Tensor) -> MoEOutput:
        all_router_logits = ()
        for layer in self.layers:
            hidden_states, router_logits = layer(hidden_states)
            all_router_logits += (router_logits,)
        aux_loss = None
        if self.config.output_aux_loss:
            balance = load_balancing_loss(all_router_logits, self.config.top_k, self.config.num_experts)
            aux_loss = self.config.aux_loss_coef * balance
        return MoEOutput(self.final_norm(hidden_states), all_router_logits, aux_loss)


_SIZES = {
    # batch, sequence length, config
    "small": (2, 8, MoEConfig()),
    "bench": (8, 128, MoEConfig(hidden_size=256, expert_hidden=512, num_experts=8, top_k=2,
                                num_layers=2)),
}


def build_moe(size: str) -> Case:
    check_size(size)
    batch, length, config = _SIZES[size]
    config = dataclasses.replace(config)
    model = build_seeded(lambda: MoEModel(config))

    def make_inputs(seed: int) -> tuple:
        return (randn(generator(seed), batch, length, config.hidden_size),)

    return Case("moe", size, model, make_inputs, fx_traceable=True, dynamo_fullgraph=True,
                tolerance=default_tolerance(size),
                description="2 MoE layers, top-2 of 4/8 SwiGLU experts, dense routing, aux loss")
