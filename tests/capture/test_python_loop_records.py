"""A for loop that compiled code runs as Python (its body's own operations outside any graph) is never silent:
logged on `eager_fallback` and counted in framejit.stats() (NOTE [Loop bodies run outside graphs] in
framejit/capture/python_loop_records.py; hhuntHF4 MED-1). Differential: eager vs compiled on changing lengths."""
import inspect
import logging

import torch

import framejit
from tests.helpers import CountingBackend, eager_frames


def _scan(x, w):
    n = x.shape[1] // 4  # chunks of 4 steps
    x = x[:, :n * 4].reshape(x.shape[0], n, 4, -1)
    state = torch.zeros(x.shape[0], x.shape[-1], x.shape[-1])
    out = torch.zeros_like(x)
    for i in range(n):  # the loop recorded
        out[:, i] = x[:, i] @ state + x[:, i] @ w
        state = state * 0.9 + x[:, i].transpose(-1, -2) @ x[:, i]
    return out.reshape(x.shape[0], -1, x.shape[-1]), state


_LOOP_LINE = inspect.getsourcelines(_scan)[1] + inspect.getsource(_scan).splitlines().index(
    "    for i in range(n):  # the loop recorded")


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        if record.name.endswith("eager_fallback"):
            self.messages.append(record.getMessage())


def test_scan_over_a_symbolic_range_is_counted_and_logged():
    torch.manual_seed(0)
    backend = CountingBackend()
    compiled = framejit.compile(_scan, backend=backend)
    before = framejit.stats()
    before_frames = eager_frames()
    handler = _Records()
    logger = logging.getLogger("framejit")
    logger.addHandler(handler)
    framejit.set_logs("eager_fallback")
    try:
        for t in (8, 12, 20, 12):  # the length is symbolic from the second call on
            x, w = torch.randn(2, t, 3), torch.randn(3, 3)
            for got, expected in zip(compiled(x, w), _scan(x, w)):
                torch.testing.assert_close(got, expected)
    finally:
        framejit.set_logs("")
        logger.removeHandler(handler)
    after = framejit.stats()
    assert eager_frames() == before_frames
    location = f"{__file__}:{_LOOP_LINE}"
    new = after["python_loop_reasons"][len(before["python_loop_reasons"]):]
    assert [r["location"] for r in new] == [location]  # once, for every length that runs it
    assert after["python_loops"] == before["python_loops"] + 1
    assert "symbolic" in new[0]["reason"] and new[0]["function"] == "_scan"
    assert len([m for m in handler.messages if location in m]) == 1


def _rows(x):
    acc = x[0] * 0
    for i in range(x.shape[0]):
        acc = acc * 0.5 + x[i]
    return acc


def test_loop_unrolled_for_a_static_length_is_not_recorded():
    compiled = framejit.compile(_rows, backend="eager", dynamic=False)
    before = framejit.stats()["python_loops"]
    for t in (3, 5, 3):
        x = torch.randn(t, 2)
        torch.testing.assert_close(compiled(x), _rows(x))
    assert framejit.stats()["python_loops"] == before
    dynamic = framejit.compile(_rows, backend="eager", dynamic=True)  # the same loop, now run as Python
    for t in (3, 5, 4):
        x = torch.randn(t, 2)
        torch.testing.assert_close(dynamic(x), _rows(x))
    assert framejit.stats()["python_loops"] == before + 1
