"""A bare `raise` where no exception is being handled raises CPython's RuntimeError("No active exception to
reraise") in the trace (NOTE [Bare raise with no exception handled] in framejit/capture/handlers/blocks.py). Before,
it was a break (fullgraph=True raised "bare `raise` re-raises an exception being handled"). Called from inside a
caller's `except`, the bare raise re-raises the caller's exception: the entry guard fails and the retrace keeps the
break, so that case matches eager too. Differential: eager vs compiled, fresh inputs.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend, assert_same, run_differential


def reraise_nothing(t):
    try:
        raise  # noqa: PLE0704
    except RuntimeError as e:
        return t + 1, str(e)


def reraise_after_handled(t):
    try:
        raise ValueError("handled")
    except ValueError:
        t = t * 2
    try:
        raise  # noqa: PLE0704 - the ValueError is no longer being handled
    except RuntimeError as e:
        return t - 1, str(e)


def test_bare_raise_with_nothing_handled_is_traced():
    for fn in (reraise_nothing, reraise_after_handled):
        run_differential(fn, lambda seed: (torch.randn(2 + seed),), seeds=(0, 1, 1))  # fullgraph: no break
    _check_inside_a_callers_except()


def bare_raise(t):
    t = t + 1
    raise  # noqa: PLE0704


def _check_inside_a_callers_except():
    compiled = framejit.compile(bare_raise, backend=CountingBackend())
    for n in (2, 3):
        results = []
        for call in (bare_raise, compiled, bare_raise):  # eager, compiled (from an except), eager
            t = torch.randn(n)
            try:
                try:
                    raise KeyError(n)
                except KeyError:
                    call(t)
            except KeyError as e:
                results.append(("key", e.args))
            except RuntimeError as e:
                results.append(("runtime", str(e)))
        assert results[1] == results[0] == results[2] == ("key", (n,))
        with_nothing = []
        for call in (bare_raise, compiled):
            try:
                call(torch.randn(n))
            except RuntimeError as e:
                with_nothing.append(str(e))
        assert_same(with_nothing[1], with_nothing[0])
