"""Instances of one module class sharing a compiled onnxrt program (NOTE [A session per set of weights]).

Each instance is `framejit.compile`d on its own; their calls pass the same guards and run one ORT part, which
is fed each instance's weights in turn. The part keeps a frozen session per instance (made once each) rather
than rebuilding at every switch and then feeding every weight; every result equals eager's, on fresh inputs,
also after a weight of an instance whose session is kept aside changed.
"""
from __future__ import annotations

import gc

import pytest
import torch

import framejit
from framejit.backends.onnxrt import runtime

F32 = dict(rtol=1e-4, atol=1e-5)


def _x(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _mlp(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 4)).eval()


def _parts(before=()):
    """The ORT parts alive now that are not in `before` (parts of earlier tests may still be alive)."""
    gc.collect()
    return [o for o in gc.get_objects() if type(o) is runtime.OrtPart and not any(o is b for b in before)]


def _alternate(models, compiled, seeds, shape=(5, 6)):
    with torch.no_grad():
        for seed in seeds:
            for k, (model, fn) in enumerate(zip(models, compiled)):
                x = _x(100 * seed + k, *shape)
                torch.testing.assert_close(fn(x), model(x), **F32)


@pytest.mark.parametrize("count", [2, 3])
def test_instances_called_in_turn_keep_one_frozen_session_each(count, sessions):
    before = _parts()
    models = [_mlp(seed) for seed in range(count)]
    compiled = [framejit.compile(m, backend="onnxrt") for m in models]
    _alternate(models, compiled, range(5))
    assert len(sessions) == count and all(sessions)  # one per instance, each with frozen weights
    parts = _parts(before)
    assert len(parts) == 1 and parts[0].frozen_positions and parts[0].refreezes == count - 1


@pytest.mark.parametrize("change", ["copy_", "data_write", "load_state_dict", "assign"])
def test_a_kept_session_sees_its_weights_change(change, sessions):
    models = [_mlp(0), _mlp(1)]
    compiled = [framejit.compile(m, backend="onnxrt") for m in models]
    _alternate(models, compiled, range(2))
    made = len(sessions)
    first = models[0]  # its session is kept aside while the second instance runs
    with torch.no_grad():
        if change == "copy_":
            first[0].weight.copy_(_x(7, 8, 6))
        elif change == "data_write":
            first[2].weight.data.mul_(-2.0)
        elif change == "load_state_dict":
            first.load_state_dict(_mlp(5).state_dict())
        else:
            first[2].bias = torch.nn.Parameter(_x(8, 4))
    _alternate(models, compiled, range(2, 5))
    assert len(sessions) == made + 1  # the changed instance's session was made again, once


def test_lstm_instances_called_in_turn(sessions):
    before = _parts()
    def lstm(seed):
        torch.manual_seed(seed)
        return torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True, batch_first=True, dropout=0.3).eval()

    models = [lstm(0), lstm(1)]
    compiled = [framejit.compile(m, backend="onnxrt") for m in models]
    with torch.no_grad():
        for seed, length in enumerate([5, 7, 5, 7]):
            for k, (model, fn) in enumerate(zip(models, compiled)):
                x = _x(10 * seed + k, 2, length, 4)
                (out, (h, c)), (want, (wh, wc)) = fn(x), model(x)
                for got, expected in ((out, want), (h, wh), (c, wc)):
                    torch.testing.assert_close(got, expected, **F32)
    assert sessions and all(sessions)  # every session froze the weights: none stopped freezing
    parts = _parts(before)
    assert parts and all(p.frozen_positions for p in parts)
