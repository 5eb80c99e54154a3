"""Library idioms that transformers 5.25 brought into model code (issue 11, helper h11hf25), each reduced to
a small program. Differential: eager vs compiled on fresh inputs over several calls, with graph and break
counts where capturing whole is the point, and no frame run wholly eagerly.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, eager_frames


# ---- a frame with a parameter called `locals` ------------------------------------------------------------

def _scaled_sum(x, scale, locals=None, globals=2):
    """inspect's `_signature_from_callable(..., globals=None, locals=None, ...)` has such parameters: framejit
    resumes it once `inspect.signature` breaks inside it."""
    return x * scale + globals


def test_frame_with_a_parameter_named_locals_recompiles():
    backend = CountingBackend()
    compiled = framejit.compile(_scaled_sum, backend=backend)
    before = eager_frames()
    for scale in (2.0, 3.0, 4.0):  # the second call misses the first entry: its guards bind the frame
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x, scale), _scaled_sum(x, scale))
    torch.testing.assert_close(compiled(x, 5.0, None, 7), _scaled_sum(x, 5.0, None, 7))
    assert eager_frames() == before
