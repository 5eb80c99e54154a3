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
