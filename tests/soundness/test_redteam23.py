"""Red team 23 (h12red): ordinary state changed between calls of a compiled function, as an outside user
would change it. Each test: eager vs compiled, several calls, state changed between calls."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import framejit


def _pair():
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    torch.manual_seed(0)
    compiled = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    return eager, compiled


def _set_alias(w):
    return torch.empty(0).set_(w.detach())


def _set_alias_of_the_parameter(w):
    return torch.empty(0).set_(w)


_HOLDERS = {  # an alias of a weight with a version counter of its own, made after the first calls
    "set_": _set_alias,
    "set_of_the_parameter": _set_alias_of_the_parameter,
    "numpy": lambda w: w.detach().numpy(),
    "from_numpy": lambda w: torch.from_numpy(w.detach().numpy()),
    "frombuffer": lambda w: torch.frombuffer(w.detach().numpy(), dtype=torch.float32),
    "from_dlpack": lambda w: torch.from_dlpack(w.detach()),
    "memoryview": lambda w: np.asarray(memoryview(w.detach().numpy())),
}


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
@pytest.mark.parametrize("name", sorted(_HOLDERS))
def test_writes_through_an_alias_made_after_the_freeze_reach_the_weights(backend, name):
    # onnxrt freezes weights into its session under no_grad and looked for other holders of a weight's
    # storage only when it made the session: an alias made after that (`h.set_(w)`, a NumPy array) writes
    # the weight's memory with a version counter of its own, and the session kept serving the old weights
    # (framejit onnxrt before: the unchanged model's outputs from the 3rd call on; triton reads per call).
    eager, compiled = _pair()
    fast = framejit.compile(compiled, backend=backend)
    held = {}
    with torch.no_grad():
        for step in range(6):
            x = torch.randn(2 + step % 2, 4)
            torch.testing.assert_close(fast(x), eager(x))
            if step == 1:
                held["eager"] = _HOLDERS[name](eager[0].weight)
                held["compiled"] = _HOLDERS[name](compiled[0].weight)
            elif step > 1:
                for alias in held.values():
                    alias[step % 3] *= 0.5
                    alias[0] += 1
