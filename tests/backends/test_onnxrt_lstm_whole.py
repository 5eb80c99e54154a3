"""NOTE [LSTM kept whole] (backends/onnxrt/lstm_whole.py): an inference program's `aten.lstm` is one torch op,
not torch's decomposition into `mkldnn_rnn_layer` calls, stacks and copies; values equal eager's."""
from __future__ import annotations

import pytest
import torch

import framejit
from framejit.backends.onnxrt import lowering, translate

F32 = dict(rtol=1e-4, atol=1e-5)


class Tagger(torch.nn.Module):
    def __init__(self, bidirectional=True, layers=2, batch_first=True):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(30, 8)
        self.lstm = torch.nn.LSTM(8, 12, num_layers=layers, batch_first=batch_first, bidirectional=bidirectional)
        self.head = torch.nn.Linear(12 * (2 if bidirectional else 1), 5)

    def forward(self, tokens):
        out, (h, c) = self.lstm(self.embed(tokens))
        return self.head(out).log_softmax(-1), h.sum(0) * 2, c.tanh()


def _targets(model, tokens) -> list[str]:
    gm = torch.fx.symbolic_trace(model)
    lowered = lowering.lower(gm, [tokens], translate.translated_op_names())
    return [str(n.target) for n in lowered.graph_module.graph.nodes if n.op == "call_function"]


@pytest.mark.parametrize("bidirectional,layers", [(True, 2), (False, 1)])
def test_lowered_graph_keeps_lstm_whole(bidirectional, layers):
    model = Tagger(bidirectional, layers).eval()
    targets = _targets(model, torch.randint(0, 30, (3, 7)))
    assert sum("lstm" in t for t in targets) == 1, targets
    assert not any("mkldnn_rnn_layer" in t for t in targets), targets


@pytest.mark.parametrize("bidirectional,batch_first", [(True, True), (False, True), (True, False)])
def test_values_equal_eager_over_changing_sizes(bidirectional, batch_first):
    model = Tagger(bidirectional, 2, batch_first).eval()
    compiled = framejit.compile(model, backend="onnxrt")
    with torch.no_grad():
        for step, (b, s) in enumerate([(3, 7), (2, 11), (5, 4), (3, 7)]):
            torch.manual_seed(step)
            tokens = torch.randint(0, 30, (b, s))
            torch.testing.assert_close(compiled(tokens), model(tokens), **F32)
        model.lstm.weight_hh_l0.mul_(0.5)  # a weight update is seen by the next call
        tokens = torch.randint(0, 30, (4, 6))
        torch.testing.assert_close(compiled(tokens), model(tokens), **F32)


def test_given_initial_state_and_train_mode_dropout_zero():
    torch.manual_seed(3)
    lstm = torch.nn.LSTM(4, 6, num_layers=2)  # train mode, dropout 0: draws nothing, kept whole

    def fn(x, h0, c0):
        out, (h, c) = lstm(x, (h0, c0))
        return out * 2, h + c

    compiled = framejit.compile(fn, backend="onnxrt")
    with torch.no_grad():
        for s, b in [(5, 3), (8, 2), (5, 3)]:
            args = (torch.randn(s, b, 4), torch.randn(2, b, 6), torch.randn(2, b, 6))
            torch.testing.assert_close(compiled(*args), fn(*args), **F32)
