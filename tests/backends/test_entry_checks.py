"""NOTE [Entry checks]: BatchNorm with `momentum=None` and a `num_batches_tracked` of -1 raises eager's
ZeroDivisionError on every backend (the graph checks the count before any write, a failing check reruns the
call eagerly), while the graph stays whole (one graph, no break) on the calls that pass.

Each test calls an eager model and a compiled twin from the same weights on the same data (changing batch
sizes where it costs little), and compares outputs, exceptions (type and text), buffers and gradients after every call.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import framejit
from framejit import config

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]
BACKENDS = ["eager", "onnxrt", "triton"]


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setattr(config, "cache_enabled", False)


def _outcome(fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # compared with eager's: type and text
        return (type(e), str(e))


def _close(got, want, what, rtol=1e-5, atol=1e-6):
    if isinstance(want, tuple):
        assert got == want, what
        return
    assert isinstance(got, torch.Tensor) and torch.allclose(got, want, rtol=rtol, atol=atol), f"{what}: {(got - want).abs().max()}"


def _same_buffers(twin, model, what):
    for (name, got), want in zip(twin.named_buffers(), model.buffers()):
        if name.endswith("num_batches_tracked"):
            assert int(got) == int(want), f"{what}: {name} {int(got)} != {int(want)}"
        else:
            _close(got, want, f"{what}: {name}")


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4, momentum=None), nn.ReLU(), nn.Linear(4, 2),
                         nn.BatchNorm1d(2, momentum=None))


@pytest.mark.parametrize("backend, which", [("eager", 1), ("eager", 4), ("onnxrt", 4), ("triton", 1)])
def test_a_count_of_minus_one_raises_as_eager_and_the_graph_stays_whole(backend, which):
    model = _model()
    twin = copy.deepcopy(model)
    fast = framejit.compile(twin, backend=backend)
    before = dict(framejit.stats())
    raised = 0
    for step in range(4):  # one size: one trace (a failed check retraces nothing)
        if step in (1, 2):  # two calls in a row with the count at -1: each raises, each leaves it 0
            model[which].num_batches_tracked.fill_(-1)
            twin[which].num_batches_tracked.fill_(-1)
        x = torch.randn(5, 3, generator=torch.Generator().manual_seed(step))
        want, got = _outcome(model, x), _outcome(fast, x)
        raised += isinstance(want, tuple)
        _close(got, want, f"step {step}")
        _same_buffers(twin, model, f"step {step}")
    assert raised == 2
    after = framejit.stats()
    assert after["frames_traced"] - before["frames_traced"] == 1
    assert after["graphs"] - before["graphs"] == 1  # no break
    assert after["eager_frames"] - before["eager_frames"] == 0


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
def test_training_steps_around_a_failed_count(backend):
    model = _model()
    twin = copy.deepcopy(model)
    fast = framejit.compile(twin, backend=backend)
    for step, rows in enumerate([5, 5, 6] if backend == "triton" else [5, 5, 5]):
        if step == 1:
            model[4].num_batches_tracked.fill_(-1)
            twin[4].num_batches_tracked.fill_(-1)
        x = torch.randn(rows, 3, generator=torch.Generator().manual_seed(step))
        want, got = _outcome(model, x), _outcome(fast, x)
        _close(got, want, f"step {step}")
        if not isinstance(want, tuple):
            want.square().mean().backward()
            got.square().mean().backward()
            for (name, g), p in zip(twin.named_parameters(), model.parameters()):
                # ORT's sums round otherwise, and batch norm's backward over 4-7 rows magnifies it
                _close(g.grad, p.grad, f"step {step}: grad of {name}", rtol=1e-3, atol=1e-5)
                g.grad, p.grad = None, None
        _same_buffers(twin, model, f"step {step}")


@pytest.mark.parametrize("backend", ["eager"])
def test_a_module_called_twice_checks_its_second_count_in_python(backend):
    """The second call's count was written by the first call in the same graph: no entry check is possible
    there, the original code runs (a break) and raises at the second call as eager does."""
    torch.manual_seed(0)
    norm = nn.BatchNorm1d(3, momentum=None)
    twin = copy.deepcopy(norm)

    def twice(bn, x):
        return bn(bn(x) * 2 + 1)

    fast = framejit.compile(twice, backend=backend)
    for step, (rows, count) in enumerate([(5, None), (4, -2), (6, None), (5, -1)]):
        if count is not None:
            norm.num_batches_tracked.fill_(count)
            twin.num_batches_tracked.fill_(count)
        x = torch.randn(rows, 3, generator=torch.Generator().manual_seed(step))
        want, got = _outcome(twice, norm, x), _outcome(fast, twin, x)
        _close(got, want, f"step {step}")
        _same_buffers(twin, norm, f"step {step}")


def test_the_entry_check_text_is_the_backends():
    from framejit.backends.checks import ENTRY_CHECK as backends_text
    from framejit.capture.entry_checks import ENTRY_CHECK as capture_text
    assert backends_text == capture_text
