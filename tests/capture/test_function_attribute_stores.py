"""NOTE [Attributes stored on functions from outside] in framejit/capture/side_effects.py: a counter kept on a
function (`counter.calls += 1`) is replayed after the graph instead of breaking the graph (it was traced as a
head and a resume function per specialisation: 4 traces for 4 calls where stock torch.compile makes 2)."""
from __future__ import annotations

import pytest
import torch

import framejit


def scaled():
    return counter.calls * 10


def counter(x, log):
    counter.calls += 1
    counter.last = x * 2  # a tensor kept on the function
    log.append(counter.calls)
    return x + counter.calls + scaled()  # the inlined helper reads the stored value


def through_vars(x):
    d = vars(through_vars)  # the trace holds the function's __dict__: the store still breaks
    through_vars.n = through_vars.n + 1
    return x + d["n"]


def _run(fn, target, calls=4):
    """`calls` calls of `fn` (`target` itself or its compiled form): results, logs, and `target`'s attributes."""
    target.__dict__.update(calls=0, n=0)
    results = []
    for i in range(calls):
        x, log = torch.full((2,), float(i)), []
        out = fn(x, log) if target is counter else fn(x)
        results.append((out, log, dict(target.__dict__)))
    return results


@pytest.mark.parametrize("fn,backend", [(counter, "eager"), (counter, "onnxrt"), (through_vars, "eager")],
                         ids=["counter-eager", "counter-onnxrt", "through_vars-eager"])
def test_stores_on_a_function_as_in_eager(fn, backend):
    expected = _run(fn, fn)
    before = framejit.stats()["frames_traced"]
    actual = _run(framejit.compile(fn, backend=backend), fn)
    for (out, log, state), (out_e, log_e, state_e) in zip(actual, expected):
        torch.testing.assert_close(out, out_e)
        assert log == log_e
        assert state.keys() == state_e.keys()
        for key in state_e:
            if isinstance(state_e[key], torch.Tensor):
                torch.testing.assert_close(state[key], state_e[key])
            else:
                assert state[key] == state_e[key], key
    if fn is counter:  # a constant first, then symbolic: one frame, two traces (before: 4 with the resume)
        assert framejit.stats()["frames_traced"] - before == 2


class Scaled(torch.nn.Module):
    def forward(self, x):
        Scaled.forward.calls = getattr(Scaled.forward, "calls", 0) + 1  # reached through the class: no source
        return x * Scaled.forward.scale + Scaled.forward.calls


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
def test_attributes_of_a_function_reached_through_its_class(backend):
    """NOTE [Attributes of functions reached without a source]: `Scaled.forward.scale` was read unguarded (a
    later `Scaled.forward.scale = 5` kept computing with 2), and the counter's store was a graph break."""
    model, compiled = Scaled(), framejit.compile(Scaled(), backend=backend)
    vars(Scaled.forward).pop("calls", None)
    for scale in (2.0, 2.0, 5.0, 5.0, -1.0):
        Scaled.forward.scale = scale
        x = torch.randn(3)
        expected = model(x)
        calls = Scaled.forward.calls
        vars(Scaled.forward)["calls"] = calls - 1
        torch.testing.assert_close(compiled(x), expected)
        assert Scaled.forward.calls == calls
