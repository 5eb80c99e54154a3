"""Recurrent zoo models: an `nn.LSTM` text classifier and a `nn.GRUCell` forecaster unrolled in Python.

Role: two ways real code writes recurrences.
- "lstm": token embedding -> 2-layer bidirectional `nn.LSTM` (batch_first) -> the last layer's final
  forward/backward states concatenated -> classifier. Returns `(logits, per_step_outputs)`; unpacks the
  nested `out, (h_n, c_n)` tuple the module returns.
- "gru_cell": stacked `nn.GRUCell`s driven by a Python `for t in range(T)` loop over time steps, with
  the hidden states kept in a Python list (built by a comprehension, updated by index), per-step
  outputs appended to a list and `torch.stack`ed. Returns `(predictions, final_hidden)`.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from tests.models._case import (Case, build_seeded, check_size, default_tolerance, generator, randint,
                                randn)


class LSTMClassifier(nn.Module):
    def __init__(self, vocab_size: int, embed_dim: int, hidden_size: int, num_layers: int,
                 num_classes: int, bidirectional: bool = True, dropout: float = 0.2) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden_size, num_layers=num_layers, batch_first=True,
                            bidirectional=bidirectional, dropout=dropout)
        self.num_directions = 2 if bidirectional else 1
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size * self.num_directions, num_classes)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        embedded = self.dropout(self.embedding(tokens))
        outputs, (h_n, c_n) = self.lstm(embedded)
        if self.num_directions == 2:
            final = torch.cat((h_n[-2], h_n[-1]), dim=-1)
        else:
            final = h_n[-1]
        return self.classifier(self.dropout(final)), outputs


class GRUCellForecaster(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, num_layers: int, output_size: int) -> None:
        super().__init__()
        sizes = [input_size] + [hidden_size] * num_layers
        self.cells = nn.ModuleList(nn.GRUCell(sizes[i], sizes[i + 1]) for i in range(num_layers))
        self.hidden_size = hidden_size
        self.norm = nn.LayerNorm(hidden_size)
        self.head = nn.Linear(hidden_size, output_size)

    def init_hidden(self, batch: int, like: torch.Tensor) -> list[torch.Tensor]:
        return [like.new_zeros(batch, self.hidden_size) for _ in self.cells]

    def forward(self, x: torch.Tensor,
                h0: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        batch, steps, _ = x.shape
        hidden = self.init_hidden(batch, x) if h0 is None else list(h0.unbind(0))
        predictions = []
        for t in range(steps):
            inp = x[:, t, :]
            for i, cell in enumerate(self.cells):
                hidden[i] = cell(inp, hidden[i])
                inp = hidden[i]
            predictions.append(self.head(self.norm(inp)))
        return torch.stack(predictions, dim=1), torch.stack(hidden)


_LSTM_SIZES = {
    # batch, sequence length, vocab, embed dim, hidden, layers, classes
    "small": (2, 8, 32, 16, 16, 2, 4),
    "bench": (16, 64, 1000, 128, 256, 2, 10),
}


def build_lstm(size: str) -> Case:
    check_size(size)
    batch, length, vocab, embed, hidden, layers, classes = _LSTM_SIZES[size]
    model = build_seeded(lambda: LSTMClassifier(vocab, embed, hidden, layers, classes))

    def make_inputs(seed: int) -> tuple:
        return (randint(generator(seed), vocab, batch, length),)

    # Stock dynamo breaks the graph at nn.LSTM (torch._dynamo.config.allow_rnn defaults to False).
    return Case("lstm", size, model, make_inputs, fx_traceable=True, dynamo_fullgraph=False,
                tolerance=default_tolerance(size),
                description="embedding + 2-layer bidirectional nn.LSTM + classifier")


_GRU_SIZES = {
    # batch, time steps, input features, hidden, layers, outputs
    "small": (2, 8, 4, 16, 2, 3),
    "bench": (16, 32, 32, 128, 2, 8),
}


def build_gru_cell(size: str) -> Case:
    check_size(size)
    batch, steps, features, hidden, layers, outputs = _GRU_SIZES[size]
    model = build_seeded(lambda: GRUCellForecaster(features, hidden, layers, outputs))

    def make_inputs(seed: int) -> tuple:
        return (randn(generator(seed), batch, steps, features),)

    # symbolic_trace cannot run `range()` over a traced sequence length.
    return Case("gru_cell", size, model, make_inputs, fx_traceable=False, dynamo_fullgraph=True,
                tolerance=default_tolerance(size),
                description="stacked nn.GRUCell unrolled by a Python loop over time steps")
