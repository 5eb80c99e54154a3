"""Library idioms that transformers 5.25 brought into model code (issue 11, helper h11hf25), each reduced to
a small program. Differential: eager vs compiled on fresh inputs over several calls, with graph and break
counts where capturing whole is the point, and no frame run wholly eagerly.
"""
from __future__ import annotations

import functools
import inspect

import torch

import framejit
from tests.helpers import CountingBackend


def _eager_frames() -> int:
    return framejit.stats()["eager_frames"]


# ---- a wrapper that states its own __signature__ ---------------------------------------------------------

def _deprecate_kwarg(old: str):
    """transformers 5.25's `deprecate_kwarg(old, ..., expose_in_signature=True)` reduced: the wrapper drops the
    old keyword and shows it in its signature, so callers that filter their kwargs with `inspect.signature`
    keep passing it."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            kwargs.pop(old, None)
            return fn(*args, **kwargs)
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())
        params.append(inspect.Parameter(old, inspect.Parameter.KEYWORD_ONLY, default=None))
        wrapped.__signature__ = sig.replace(parameters=params)
        return wrapped
    return deco


@_deprecate_kwarg("past_key_values")
def _make_mask(x, scale=2.0):
    return x * scale


def _filtered_call(x):
    params = inspect.signature(_make_mask).parameters
    extra = {"past_key_values": None} if "past_key_values" in params else {}
    return _make_mask(x + 1, **extra) + len(params)


def test_signature_stated_by_the_wrapper_is_answered_and_guarded():
    backend = CountingBackend()
    compiled = framejit.compile(_filtered_call, backend=backend)
    before = _eager_frames()
    original = _make_mask.__signature__
    try:
        for _ in range(2):
            x = torch.randn(4)
            torch.testing.assert_close(compiled(x), _filtered_call(x))
        assert backend.graph_count == 1
        graphs = backend.graph_count
        # A new stated signature (one parameter fewer) changes the answer: the guard on its identity fails.
        _make_mask.__signature__ = inspect.Signature(list(original.parameters.values())[:2])
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x), _filtered_call(x))
        assert backend.graph_count == graphs + 1
        # None: inspect describes the wrapper's own code, (*args, **kwargs), and stops unwrapping there.
        _make_mask.__signature__ = None
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x), _filtered_call(x))
        assert backend.graph_count == graphs + 2
        assert framejit.explain(_filtered_call)(torch.randn(4)).graph_break_count == 0
    finally:
        _make_mask.__signature__ = original
    assert _eager_frames() == before


# ---- a frame with a parameter called `locals` ------------------------------------------------------------

def _scaled_sum(x, scale, locals=None, globals=2):
    """inspect's `_signature_from_callable(..., globals=None, locals=None, ...)` has such parameters: framejit
    resumes it once `inspect.signature` breaks inside it."""
    return x * scale + globals


def test_frame_with_a_parameter_named_locals_recompiles():
    backend = CountingBackend()
    compiled = framejit.compile(_scaled_sum, backend=backend)
    before = _eager_frames()
    for scale in (2.0, 3.0, 4.0):  # the second call misses the first entry: its guards bind the frame
        x = torch.randn(4)
        torch.testing.assert_close(compiled(x, scale), _scaled_sum(x, scale))
    torch.testing.assert_close(compiled(x, 5.0, None, 7), _scaled_sum(x, 5.0, None, 7))
    assert _eager_frames() == before
