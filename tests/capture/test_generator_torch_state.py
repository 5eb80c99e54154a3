"""A generator that yields inside a block changing torch state (grad mode, autocast) leaves that state set
while it is suspended; the consumer's code between its steps runs under it, compiled as in eager (NOTE
[Torch state across yields] in capture/handlers/blocks.py)."""
import pytest
import torch

import framejit
from tests.helpers import CountingBackend


def no_grad_steps(x):
    with torch.no_grad():
        yield x * 2
        yield x * 3


def grad_steps(x):
    with torch.enable_grad():
        yield x * 2


def autocast_steps(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        yield x


def consume_no_grad(x):
    out = []
    for v in no_grad_steps(x):
        w = v * x
        out.append((w, w.requires_grad, torch.is_grad_enabled()))
    return out, torch.is_grad_enabled()


def consume_grad(x):
    with torch.no_grad():
        out = [(v * x, torch.is_grad_enabled()) for v in grad_steps(x)]
    return [(w, w.requires_grad, mode) for w, mode in out], torch.is_grad_enabled()


def consume_autocast(x):
    return [((v @ v.t()).dtype, torch.is_autocast_enabled("cpu")) for v in autocast_steps(x)]


@pytest.mark.parametrize("fn", [consume_no_grad, consume_grad, consume_autocast])
def test_the_consumer_runs_under_the_state_the_generator_left(fn):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for n in (3, 3, 4):
        x = torch.arange(float(n)).reshape(1, n).requires_grad_(True)
        want, got = fn(x), compiled(x)
        assert repr(got) == repr(want)
    assert backend.graph_count >= 1


def dtype_steps(x):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield x
    finally:
        torch.set_default_dtype(previous)


def consume_dtype(x):
    return [(torch.ones(2).dtype, v * 2) for v in dtype_steps(x)], torch.get_default_dtype()


def restoring_steps(x):
    previous = torch.is_grad_enabled()
    torch.set_grad_enabled(previous)  # no change while tracing: still an effect eager runs at this step
    try:
        yield x
        yield x
    finally:
        torch.set_grad_enabled(previous)


def consume_restoring(x):
    out = []
    for v in restoring_steps(x):
        torch.set_grad_enabled(False)
        out.append(v + 1)
    return out, torch.is_grad_enabled()


@pytest.mark.parametrize("fn", [consume_dtype, consume_restoring])
def test_state_the_generator_sets_and_restores_is_set_in_eagers_order(fn):
    # review revT T1/T2: run ahead of its consumer, the generator's sets ran before the consumer's code
    compiled = framejit.compile(fn, backend="eager")
    for n in (3, 3, 4):
        x = torch.arange(float(n))
        torch.set_grad_enabled(True)
        want = fn(x)
        torch.set_grad_enabled(True)
        got = compiled(x)
        torch.set_grad_enabled(True)
        assert repr(got) == repr(want)
