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


class _SignalledBackend(CountingBackend):
    """Runs each graph as Python; with `fire` set, SIGUSR1 arrives while the graph runs (a handler's timeout)."""
    fire = False

    def __call__(self, gm, example_inputs):
        forward = super().__call__(gm, example_inputs)

        def run(*args):
            if self.fire:
                signal.raise_signal(signal.SIGUSR1)  # the handler runs here, inside the graph's call
            return forward(*args)
        return run


def _two_ops(x):
    return torch.tanh(x @ x) + 1


def test_timeout_while_the_graph_or_its_guards_run_reaches_the_caller():
    # NOTE [Signal handlers while a compiled frame runs]. Before: the graph's TimeoutError reran the call eagerly
    # (it returned normally); the guard's was a failed guard (a miss, a second graph, and the call returned)
    backend = _SignalledBackend()
    compiled = framejit.compile(_two_ops, backend=backend)
    before, eager = signal.signal(signal.SIGUSR1, _timeout), eager_frames()
    try:
        for k in (1, 2, 3):
            x = torch.full((2, 2), 0.1 * k)
            torch.testing.assert_close(compiled(x), _two_ops(x))
            backend.fire = True
            with pytest.raises(TimeoutError):
                compiled(x)
            backend.fire = False
        entry = compiled.entries[0]
        check = entry.guard.check

        def signalled_check(*args, **kwargs):
            signal.raise_signal(signal.SIGUSR1)
            return check(*args, **kwargs)
        entry.guard.check = signalled_check
        with pytest.raises(TimeoutError):
            compiled(torch.ones(2, 2))
        entry.guard.check = check
        torch.testing.assert_close(compiled(torch.ones(2, 2)), _two_ops(torch.ones(2, 2)))
    finally:
        signal.signal(signal.SIGUSR1, before)
    assert backend.graph_count == 1 and eager_frames() == eager


def _key_or_minus_one(x, d):
    return x + d["k"] if "k" in d else x - 1


def _weight_or_x(x, o):
    return x * o.w if hasattr(o, "w") else x


def test_a_compiled_function_installed_as_a_handler_leaves_other_failures_alone():
    # NOTE [Compiled handlers] (review revQ HIGH-1 of the signal-handler check): with a compiled function
    # installed as a handler (never fired), a guard raising KeyError/AttributeError for a missing key or
    # attribute reached the user instead of counting as a miss
    before = signal.signal(signal.SIGUSR2, framejit.compile(lambda signum, frame: None))
    try:
        f = framejit.compile(_key_or_minus_one, backend=CountingBackend())
        for d in ({"k": 1}, {"k": 2}, {}, {"j": 3}):
            torch.testing.assert_close(f(torch.ones(2), d), _key_or_minus_one(torch.ones(2), d))

        class O:
            w = None
        o = O()
        o.w = 2.0
        g = framejit.compile(_weight_or_x, backend=CountingBackend())
        for k in range(3):
            if k == 2:
                del o.w
                del O.w
            torch.testing.assert_close(g(torch.ones(2), o), _weight_or_x(torch.ones(2), o))
    finally:
        signal.signal(signal.SIGUSR2, before)
