"""NOTE [Closures made per call share a hook through their cells] (issue 11, h11llava): nested decorator wrappers of one code.

transformers decorates both a model's forward and its inner model's forward with the same decorators
(`can_return_tuple`, `deprecate_kwarg`), so at a graph break (with a76a769's shared hooks, removed since) the outer wrapper ran through the shared hook of
that code while the inner wrapper, another closure of the same code, is called from inside it. The inner call
ran as plain Python: its function's tensor work was in no graph and no eager frame was counted
(Gemma3ForConditionalGeneration: 1 graph of 2 ops per call instead of 4 graphs).
"""
from __future__ import annotations

import functools

import torch

import framejit
from tests.helpers import CountingBackend
from tests.models.hf import harness


def deco(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


@deco
def inner(x, log):
    y = x.sin()
    log.append("inner")
    print("inner", tuple(y.shape))
    return y.cos()


@deco
def outer(x, log):
    return inner(x * 2, log) + 1


def f(x, log):
    print("start")
    return outer(x, log) * 3


def _captured(backend, name: str) -> bool:
    return any(getattr(n.target, "__name__", str(n.target)) == name
               for gm in backend.graphs for n in gm.graph.nodes if n.op in ("call_function", "call_method"))


def test_an_inner_wrapper_of_the_same_code_is_captured_too(capsys):
    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = harness.eager_frame_count()
    for n in (3, 3, 5):
        x = torch.randn(n)
        got_log, want_log = [], []
        got = compiled(x, got_log)
        out_got = capsys.readouterr().out
        want = f(x, want_log)
        assert capsys.readouterr().out == out_got
        torch.testing.assert_close(got, want)
        assert got_log == want_log
    assert harness.eager_frame_count() == eager_before
    assert _captured(backend, "sin") and _captured(backend, "cos")  # inner's work is in the graphs
