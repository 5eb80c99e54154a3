"""NOTE [Signal handlers during compilation]: an exception raised by the user's signal handler while a frame
is compiled reaches the caller, as in eager, and leaves the frame to be compiled on its next call."""
import signal

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, eager_frames


def _long_trace(x):
    for i in range(30):  # unrolled: a trace of some tens of milliseconds
        x = x * 1.01 + i
    return x


def _timeout(signum, frame):
    raise TimeoutError("the call took too long")


def test_timeout_during_compilation_reaches_the_caller():
    framejit.compile(lambda x: x + 1, backend=CountingBackend())(torch.ones(2))  # what a first trace imports
    backend = CountingBackend()
    compiled = framejit.compile(_long_trace, backend=backend)
    before, eager = signal.signal(signal.SIGALRM, _timeout), eager_frames()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.005)  # fires while the first call compiles
        with pytest.raises(TimeoutError):
            compiled(torch.ones(3))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    assert signal.getsignal(signal.SIGALRM) is before
    for k in (1, 2):
        torch.testing.assert_close(compiled(torch.full((3,), float(k))), _long_trace(torch.full((3,), float(k))))
    # the interrupted compilation may have reached the backend already (its entry was dropped): then 2 graphs
    assert backend.graph_count in (1, 2) and eager_frames() == eager  # before: 0 graphs, the frame ran eagerly
