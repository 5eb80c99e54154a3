"""NOTE [LSTM kept whole] (backends/onnxrt/lstm_whole.py): an inference program's `aten.lstm` is one op (ORT's LSTM),
not torch's decomposition into `mkldnn_rnn_layer` calls, stacks and copies; values equal eager's."""
from __future__ import annotations

import pytest
import torch

import framejit
from framejit.backends.onnxrt import lowering, translate
from tests.helpers import OnnxrtRecorder

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


def _only_free_ops_in_torch(rows) -> None:
    assert rows and all(not row["eager_graph"] and row["parts"] == 1 for row in rows), rows
    left = [(n, r) for row in rows for n, r in row["eager_nodes"].items() if "free op" not in r]
    assert not left, left


@pytest.mark.parametrize("dynamic", [None, False, True])
@pytest.mark.parametrize("bidirectional,batch_first", [(True, True), (False, False)])
def test_inference_lstm_runs_as_one_ort_part(dynamic, bidirectional, batch_first):
    """NOTE [LSTM kept whole]: embedding, LSTM and head are one ORT program with no eager node (ORT's LSTM
    op), equal to eager over changing batch and sequence lengths and after a weight update."""
    model = Tagger(bidirectional, 2, batch_first).eval()
    recorder = OnnxrtRecorder()
    compiled = framejit.compile(model, backend=recorder, dynamic=dynamic)
    with torch.no_grad():
        for step, (b, s) in enumerate([(3, 7), (2, 11), (5, 4), (3, 7)]):
            torch.manual_seed(10 + step)
            tokens = torch.randint(0, 30, (b, s) if batch_first else (s, b))
            torch.testing.assert_close(compiled(tokens), model(tokens), **F32)
        model.lstm.weight_ih_l1.mul_(-0.5)  # frozen weights: the next call sees the update
        model.lstm.bias_hh_l0.add_(0.25)
        tokens = torch.randint(0, 30, (4, 6))
        torch.testing.assert_close(compiled(tokens), model(tokens), **F32)
    _only_free_ops_in_torch(recorder.rows())


def test_given_states_run_in_ort_and_float64_projections_stay_in_torch():
    """Initial states given by the caller go into ORT's LSTM; what ONNX's LSTM cannot compute as eager does
    (float64, proj_size) stays the torch op, with values equal to eager's either way."""
    torch.manual_seed(4)
    plain = torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True).eval()
    double = torch.nn.LSTM(4, 6).double().eval()
    projected = torch.nn.LSTM(4, 6, proj_size=3).eval()

    def fn(x, h0, c0):
        out, (h, c) = plain(x, (h0, c0))
        return out * 2, h + c, double(x.double())[0], projected(x)[0]

    recorder = OnnxrtRecorder()
    compiled = framejit.compile(fn, backend=recorder)
    with torch.no_grad():
        for s, b in [(5, 3), (8, 2), (5, 3)]:
            args = (torch.randn(s, b, 4), torch.randn(4, b, 6), torch.randn(4, b, 6))
            torch.testing.assert_close(compiled(*args), fn(*args), **F32)
    rows = recorder.rows()
    in_torch = [r for row in rows for r in row["eager_nodes"].values() if r.startswith("lstm:")]
    assert rows and sorted(set(in_torch)) == ["lstm: ONNX Runtime's CPU LSTM runs float32 only",
                                              "lstm: projections (proj_size) have no ONNX LSTM form"], rows
    assert all(sum(r.startswith("lstm:") for r in row["eager_nodes"].values()) == 2 for row in rows), rows


def _poisoned(shape, step):
    x = torch.randn(shape)
    flat = x.view(-1)
    flat[(7 * step + 3) % flat.numel()] = (float("nan"), float("inf"), -float("inf"))[step % 3]
    return x


@pytest.mark.parametrize("dynamic", [None, True])
def test_non_finite_inputs_states_and_weights_give_eagers_values(dynamic):
    """NOTE [ORT's LSTM eats NaN]: ORT's LSTM op turned NaN inputs into finite outputs; the guarded program
    gives eager's NaN (and inf) pattern, still as one ORT part."""
    torch.manual_seed(5)
    bi = torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True).eval()
    uni = torch.nn.LSTM(3, 4, num_layers=2).eval()

    def fn(x, h0, c0):
        return bi(x)[0], bi(x)[1][1], uni(x.transpose(0, 1), (h0, c0))

    recorder = OnnxrtRecorder()
    compiled = framejit.compile(fn, backend=recorder, dynamic=dynamic)
    nan_close = dict(F32, equal_nan=True)
    with torch.no_grad():
        for step, (b, s) in enumerate([(3, 6), (2, 9), (3, 6), (4, 5), (2, 9), (3, 6)]):
            x, h0, c0 = torch.randn(b, s, 3), torch.randn(2, b, 4), torch.randn(2, b, 4)
            poisoned = (x, h0, c0)[step % 3]
            poisoned.copy_(_poisoned(poisoned.shape, step))
            torch.testing.assert_close(compiled(x, h0, c0), fn(x, h0, c0), **nan_close)
        clean = (torch.randn(3, 6, 3), torch.randn(2, 3, 4), torch.randn(2, 3, 4))
        torch.testing.assert_close(compiled(*clean), fn(*clean), **nan_close)
        uni.weight_hh_l1[2, 1] = float("nan")  # a weight: the program is rebuilt, the guard still holds
        torch.testing.assert_close(compiled(*clean), fn(*clean), **nan_close)
    _only_free_ops_in_torch(recorder.rows())
