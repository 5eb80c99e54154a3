"""A dynamic float to a constant fractional power guards the base's sign, not its value (NOTE [Float bases to
fractional powers] in framejit/capture/float_powers.py)."""
import pytest
import torch

import framejit
from tests.helpers import CountingBackend, eager_frames, run_differential


def _train_step(model, opt, sched, x):
    loss = model(x).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
    sched.step()
    return loss


def _setup():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    return model, opt, torch.optim.lr_scheduler.PolynomialLR(opt, total_iters=8, power=0.5)


def test_polynomial_lr_half_power_in_a_compiled_train_step():
    eager, compiled_state = _setup(), _setup()
    backend = CountingBackend()
    step = framejit.compile(_train_step, backend=backend)
    before = eager_frames()
    for i in range(12):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(i))
        expected, actual = _train_step(*eager, x), step(*compiled_state, x)
        assert torch.equal(expected, actual), i
        assert eager[1].param_groups[0]["lr"] == compiled_state[1].param_groups[0]["lr"], i  # bit for bit
        for p, q in zip(eager[0].parameters(), compiled_state[0].parameters()):
            assert torch.equal(p, q), i
    assert eager_frames() == before
    # the base was specialised per epoch before: 11 graphs and the recompile limit (an eager frame)
    assert backend.graph_count <= 6, backend.graph_count


def _decay(x, e):
    return x * (1.0 - e / 8) ** 0.5


def _inverse(x, e):
    return x * (1.0 - e / 8) ** -0.5


@pytest.mark.parametrize("fn", [_decay, _inverse])
def test_fractional_power_of_a_changing_float(fn):
    # e = 8 makes the base 0.0 (ZeroDivisionError for the negative power), e = 10 negative (a complex in eager)
    epochs = (1, 2, 3, 4, 5, 6, 8, 10, 7)
    backend = run_differential(fn, lambda s: (torch.ones(3), epochs[s]), seeds=tuple(range(len(epochs))),
                               fullgraph=False)
    assert backend.graph_count <= 5, backend.graph_count


def test_fractional_power_keeps_one_graph_for_positive_bases():
    backend = CountingBackend()
    compiled = framejit.compile(_decay, backend=backend)
    for e in range(1, 8):
        x = torch.randn(3, generator=torch.Generator().manual_seed(e))
        assert torch.equal(compiled(x, e), _decay(x, e))
    assert backend.graph_count <= 2, backend.graph_count


def _setup_inverse_sqrt():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    return model, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda e: (1 + e) ** -0.5)


def test_inverse_sqrt_warmup_of_an_int_epoch_in_a_compiled_train_step():
    """NOTE [Int bases to fractional and negative powers] (review revAD MED-2): the int epoch specialised, 10
    graphs and 1 eager frame over 14 steps before."""
    eager, compiled_state = _setup_inverse_sqrt(), _setup_inverse_sqrt()
    backend = CountingBackend()
    step = framejit.compile(_train_step, backend=backend)
    before = eager_frames()
    for i in range(14):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(i))
        expected, actual = _train_step(*eager, x), step(*compiled_state, x)
        assert torch.equal(expected, actual), i
        assert eager[1].param_groups[0]["lr"] == compiled_state[1].param_groups[0]["lr"], i  # bit for bit
        for p, q in zip(eager[0].parameters(), compiled_state[0].parameters()):
            assert torch.equal(p, q), i
    assert eager_frames() == before
    assert backend.graph_count <= 5, backend.graph_count


_INT_POWERS = (-0.5, 0.5, 1.5, -1, -2.0)


def _int_power(p):
    def fn(x, n):
        r = (n - 2) ** p  # an int base: a float, ZeroDivisionError at n = 2 for p < 0, complex for n < 2
        return (x * r.real, r.imag) if isinstance(r, complex) else (x * r, r)
    return fn


@pytest.mark.parametrize("p", _INT_POWERS)
def test_power_of_a_changing_int(p):
    ns = (5, 6, 9, 3, 2, 0, 11, 10**18, 4, 7)
    backend = run_differential(_int_power(p), lambda s: (torch.ones(2), ns[s]), seeds=tuple(range(len(ns))),
                               fullgraph=False)
    assert backend.graph_count <= 6, backend.graph_count


@pytest.mark.parametrize("p", _INT_POWERS)
def test_power_of_a_positive_int_keeps_one_graph(p):
    fn, backend = _int_power(p), CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for n in range(3, 11):
        x = torch.randn(2, generator=torch.Generator().manual_seed(n))
        expected, actual = fn(x, n), compiled(x, n)
        assert torch.equal(expected[0], actual[0]) and type(actual[1]) is float and actual[1] == expected[1], n
    assert backend.graph_count <= 2, backend.graph_count
