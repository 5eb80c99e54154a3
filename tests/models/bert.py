"""BERT-style encoder for the zoo: embeddings (word, position, token type), post-LN layers, pooler.

Role: exercises encoder idioms: an attention-mask argument turned into an additive "extended" mask
with `torch.finfo(dtype).min`, a position-id buffer sliced by sequence length, shape tuples built with
`x.size()[:-1] + (...)`, `permute`/`contiguous`/`view`, optional arguments defaulting to None, a
`self.training` check, a tuple of all hidden states collected in a list, and a dict return value.

`forward(input_ids, attention_mask, token_type_ids)` returns
`{"last_hidden_state", "pooler_output", "hidden_states"}` (hidden_states is a tuple of tensors).
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
class BertConfig:
    vocab_size: int = 64
    hidden_size: int = 32
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    intermediate_size: int = 64
    max_position_embeddings: int = 16
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    initializer_range: float = 0.02


def extended_attention_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(B, S) 1/0 mask -> (B, 1, 1, S) additive mask: 0 where attended, a large negative elsewhere."""
    extended = mask[:, None, None, :].to(dtype=dtype)
    return (1.0 - extended) * torch.finfo(dtype).min


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        positions = torch.arange(config.max_position_embeddings).expand((1, -1))
        self.register_buffer("position_ids", positions, persistent=False)

    def forward(self, input_ids: torch.Tensor, token_type_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        seq_length = input_ids.shape[1]
        position_ids = self.position_ids.narrow(1, 0, seq_length)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        embeddings = (self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
                      + self.token_type_embeddings(token_type_ids))
        return self.dropout(self.LayerNorm(embeddings))


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_attention_heads = config.num_attention_heads
        self.attention_head_size = config.hidden_size // config.num_attention_heads
        self.all_head_size = self.num_attention_heads * self.attention_head_size
        self.query = nn.Linear(config.hidden_size, self.all_head_size)
        self.key = nn.Linear(config.hidden_size, self.all_head_size)
        self.value = nn.Linear(config.hidden_size, self.all_head_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        new_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states: torch.Tensor,
                attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        query = self.transpose_for_scores(self.query(hidden_states))
        key = self.transpose_for_scores(self.key(hidden_states))
        value = self.transpose_for_scores(self.value(hidden_states))
        scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            scores = scores + attention_mask
        probs = nn.functional.softmax(scores, dim=-1)
        probs = self.dropout(probs)
        context = torch.matmul(probs, value).permute(0, 2, 1, 3).contiguous()
        return context.view(context.size()[:-2] + (self.all_head_size,))


class BertLayer(nn.Module):
    """Self-attention and feed-forward sub-layers, each followed by residual add and LayerNorm."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertSelfAttention(config)
        self.attention_output = nn.Linear(config.hidden_size, config.hidden_size)
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.intermediate = nn.Linear(config.hidden_size, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, config.hidden_size)
        self.output_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout_prob = config.hidden_dropout_prob

    def _dropout(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(x, p=self.dropout_prob, training=self.training)

    def forward(self, hidden_states: torch.Tensor,
                attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        attended = self._dropout(self.attention_output(self.attention(hidden_states, attention_mask)))
        hidden_states = self.attention_norm(attended + hidden_states)
        intermediate = F.gelu(self.intermediate(hidden_states))
        output = self._dropout(self.output(intermediate))
        return self.output_norm(output + hidden_states)


class BertPooler(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = nn.Tanh()

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        first_token = hidden_states[:, 0]
        return self.activation(self.dense(first_token))


class BertModel(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.layers = nn.ModuleList([BertLayer(config) for _ in range(config.num_hidden_layers)])
        self.pooler = BertPooler(config)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
        if isinstance(module, nn.Linear):
            module.bias.data.uniform_(-0.02, 0.02)

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def forward(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                token_type_ids: Optional[torch.Tensor] = None) -> dict:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.embeddings(input_ids, token_type_ids=token_type_ids)
        mask = extended_attention_mask(attention_mask, self.dtype)
        all_hidden = [hidden]
        for layer in self.layers:
            hidden = layer(hidden, mask)
            all_hidden.append(hidden)
        return {
            "last_hidden_state": hidden,
            "pooler_output": self.pooler(hidden),
            "hidden_states": tuple(all_hidden),
        }


_SIZES = {
    # batch, sequence length, config
    "small": (2, 8, BertConfig()),
    "bench": (8, 128, BertConfig(vocab_size=1024, hidden_size=256, num_hidden_layers=4,
                                 num_attention_heads=4, intermediate_size=1024,
                                 max_position_embeddings=256)),
}


def build_bert(size: str) -> Case:
    check_size(size)
    batch, length, config = _SIZES[size]
    config = dataclasses.replace(config)
    model = build_seeded(lambda: BertModel(config))

    def make_inputs(seed: int) -> tuple:
        gen = generator(seed)
        input_ids = randint(gen, config.vocab_size, batch, length)
        # Padding: each row keeps a random prefix of at least half the sequence.
        lengths = torch.randint(length // 2, length + 1, (batch,), generator=gen)
        attention_mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
        # Two segments, as for sentence pairs: the split point is random per row.
        splits = torch.randint(1, length, (batch,), generator=gen)
        token_type_ids = (torch.arange(length)[None, :] >= splits[:, None]).long()
        return (input_ids, attention_mask, token_type_ids)

    return Case("bert", size, model, make_inputs, fx_traceable=True, dynamo_fullgraph=True,
                tolerance=default_tolerance(size),
                description="BERT encoder with padding mask, token types, pooler; dict output")
