"""Red team 23 (h12red): ordinary state changed between calls of a compiled function, as an outside user
would change it. Each test: eager vs compiled, several calls, state changed between calls."""
from __future__ import annotations

import contextlib
import io
import itertools

import numpy as np
import pytest
import torch

import framejit

from .test_redteam22 import _pair  # the same two seeded Sequential models


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


# ---- itertools objects answer their own type (NOTE [itertools objects of their own type])

_ITERTOOLS = {
    "chain": lambda l: itertools.chain(l, [4]),
    "chain_from_iterable": lambda l: itertools.chain.from_iterable([l, [4]]),
    "islice": lambda l: itertools.islice(l, 2),
    "repeat": lambda l: itertools.repeat(l[0], 3),
    "starmap": lambda l: itertools.starmap(pow, [(l[0], 2), (3, l[1])]),
    "zip_longest": lambda l: itertools.zip_longest(l, [1]),
    "pairwise": lambda l: itertools.pairwise(l),
    "product": lambda l: itertools.product(l, [1, 2]),
    "combinations": lambda l: itertools.combinations(l, 2),
    "permutations": lambda l: itertools.permutations(l, 2),
}


def _drawn(obj):
    return (type(obj), list(obj)) if hasattr(obj, "__next__") and not isinstance(obj, type) else obj


@pytest.mark.parametrize("name", sorted(_ITERTOOLS))
def test_itertools_objects_answer_their_own_type(name):
    # before: evaluated at once into a list_iterator, so type(itertools.chain(a, b)) was list_iterator and
    # isinstance(o, itertools.chain) False in a graph without a break (chain with one), and a returned one
    # (or one held across a break) came back as a list_iterator or a tuple_iterator
    make = _ITERTOOLS[name]
    reasons_before = len(framejit.stats()["eager_frame_reasons"])  # earlier tests' eager frames stay listed

    def in_trace(x, l):
        o = make(l)
        first = next(o)
        return x * len(type(o).__name__), isinstance(o, getattr(itertools, name.split("_from")[0])), first

    def returned(x, l):
        o = make(l)
        next(o)
        return x + 1, o

    def across_a_break(x, l):
        o = make(l)
        print("drawn", next(o))
        return x * 2, type(o), o

    for fn in (in_trace, returned, across_a_break):
        compiled = framejit.compile(fn, backend="eager")
        for k in (3, 5, 7):
            l = [1, 2, k]
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out):
                want = [_drawn(v) for v in fn(torch.ones(2), l)]
            with contextlib.redirect_stdout(err):
                got = [_drawn(v) for v in compiled(torch.ones(2), l)]
            assert out.getvalue() == err.getvalue()
            assert len(got) == len(want)
            for g, w in zip(got, want):
                if isinstance(w, torch.Tensor):
                    torch.testing.assert_close(g, w)
                else:
                    assert g == w, (fn.__name__, k)
    assert framejit.stats()["eager_frame_reasons"][reasons_before:] == []


# ---- the default dtype of an autocast block made inside (NOTE [Default autocast dtype])

def _default_autocast(x):
    with torch.autocast("cpu"):
        y = x @ x.T
    return y.dtype, y.float()


def _nested_default_autocast(x):
    with torch.autocast("cpu", dtype=torch.float16, enabled=False):
        with torch.autocast("cpu"):  # the outer block's dtype, whatever the caller's setting
            y = x @ x.T
    with torch.autocast(device_type="cpu"):
        z = x @ x.T
    return y.dtype, z.dtype, z.float()


@pytest.mark.parametrize("backend", ["eager", "onnxrt"])
@pytest.mark.parametrize("fn", [_default_autocast, _nested_default_autocast], ids=["plain", "nested"])
def test_autocast_without_a_dtype_follows_the_callers_setting(fn, backend):
    # before: torch.get_autocast_dtype("cpu") was read when tracing and not guarded (autocast off at entry),
    # so after torch.set_autocast_dtype("cpu", torch.float16) the entry kept computing in bfloat16
    compiled = framejit.compile(fn, backend=backend)
    before = torch.get_autocast_dtype("cpu")
    try:
        for step, dtype in enumerate([torch.bfloat16, torch.float16, torch.bfloat16, torch.float16]):
            torch.set_autocast_dtype("cpu", dtype)
            x = torch.randn(3, 4) + step
            want, got = fn(x), compiled(x)
            assert got[:-1] == want[:-1]
            torch.testing.assert_close(got[-1], want[-1])
    finally:
        torch.set_autocast_dtype("cpu", before)


class _Holder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("shift", torch.zeros(3))
        self.scale = torch.ones(3)  # a plain tensor attribute (frozen too)

    def forward(self, x):
        return self.lin(x) * self.scale + self.shift


_TEMPORARY_WRITES = {  # the array lives for the statement only
    "numpy_of_detach": lambda t, step: t.detach().numpy().__setitem__((0,) * t.dim(), 10.0 + step),
    "asarray": lambda t, step: np.add(np.asarray(t.detach()), 0.5 + step, out=np.asarray(t.detach())),
    "set_of_storage": lambda t, step: torch.empty(0).set_(t.untyped_storage(), t.storage_offset(), t.shape,
                                                          t.stride()).add_(1.0 + step),
    "set_of_detach": lambda t, step: torch.empty(0).set_(t.detach()).add_(2.0 + step),
    "from_dlpack": lambda t, step: torch.from_dlpack(t.detach()).add_(3.0 + step),
}


@pytest.mark.parametrize("backend", ["onnxrt", "triton"])
@pytest.mark.parametrize("target", ["weight", "buffer", "attribute"])
@pytest.mark.parametrize("write", sorted(_TEMPORARY_WRITES))
def test_writes_through_a_temporary_alias_reach_the_weights(backend, target, write):
    # NOTE [NumPy arrays count a use]: a NumPy array (or a `set_` alias) made and dropped between two calls
    # leaves no holder to count; onnxrt's frozen session served the old weights (framejit onnxrt before:
    # wrong from the 2nd call)
    torch.manual_seed(0)
    eager = _Holder()
    compiled = _Holder()
    compiled.load_state_dict(eager.state_dict())
    fast = framejit.compile(compiled, backend=backend)

    def tensor_of(m):
        return {"weight": m.lin.weight, "buffer": m.shift, "attribute": m.scale}[target]

    with torch.no_grad():
        for step in range(5):
            x = torch.randn(2, 4)
            torch.testing.assert_close(fast(x), eager(x))
            for m in (eager, compiled):
                _TEMPORARY_WRITES[write](tensor_of(m), step)
