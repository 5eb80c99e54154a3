"""Endless generators under zip, enumerate, map and itertools.islice (NOTE [Combinators over endless generators]
in capture/values/containers.py): the combinator's drain of a lazy generator has the run-ahead budget, and zip
and islice draw only what CPython's would, so `zip(gen(), rows)` is unrolled into one graph and none of them
traces 100,000 instructions on its first call."""
from __future__ import annotations

import itertools

import pytest
import torch

import framejit
from framejit.capture import translator
from tests.helpers import CountingBackend, assert_same


def counting(log):
    i = 0
    while True:
        log.append(i)
        yield i
        i += 1


def zipped_first(x, rows):
    log = []
    out = x
    for i, t in zip(counting(log), rows):
        out = out + i * t
    return out, log


def zipped_second(x, rows):
    log = []
    out = x
    for t, i, j in zip(rows, counting(log), range(5)):
        out = out * t + i - j
    return out, log


def sliced(x):
    log = []
    out = x
    for v in itertools.islice(counting(log), 1, 4):
        out = out + v
    return out, log


def enumerated(x):
    log = []
    out = x
    for k, v in enumerate(counting(log)):
        if k > 3:
            break
        out = out + v
    return out, log


def mapped(x):
    log = []
    out = x
    for v in map(lambda a: a * 2, counting(log)):
        if v > 6:
            break
        out = out + v
    return out, log


def zipped_strict(x, rows):
    out = x
    for t, i in zip(rows, counting([]), strict=True):
        out = out + i * t
    return out


@pytest.fixture
def traced_steps(monkeypatch):
    """The instructions traced, counted at Translator.step (every traced instruction passes there)."""
    count = [0]
    step = translator.Translator.step

    def counted(self, inst):
        count[0] += 1
        return step(self, inst)
    monkeypatch.setattr(translator.Translator, "step", counted)
    return count


def _run(fn, make_args, traced_steps):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    traced = framejit.stats()["frames_traced"]
    for seed in range(3):
        args = make_args(seed)
        assert_same(fn(*args), compiled(*args))
    return backend, framejit.stats()["frames_traced"] - traced, traced_steps[0]


def _rows(seed, n=3):
    return torch.randn(3) + seed, [torch.randn(3) for _ in range(n + seed % 2)]


@pytest.mark.parametrize("fn", [zipped_first, zipped_second])
def test_an_endless_generator_zipped_with_a_list_is_unrolled(fn, traced_steps):
    # before: the zip drained the generator for 100,000 instructions, then broke before its call and stepped as
    # Python (6 frames traced); now it is drawn as CPython's zip draws it (the log shows how far)
    backend, frames, steps = _run(fn, _rows, traced_steps)
    assert frames == 2 and backend.graph_count == 2  # one per length of the list (3 and 4 rows)
    assert steps < 2 * (translator.RUN_AHEAD_STEPS + 2_000)


def test_an_endless_generator_sliced(traced_steps):
    backend, frames, steps = _run(sliced, lambda seed: (torch.randn(3) + seed,), traced_steps)
    assert frames == 1 and backend.graph_count == 1
    assert steps < translator.RUN_AHEAD_STEPS + 2_000


@pytest.mark.parametrize("fn", [enumerated, mapped])
def test_an_endless_generator_enumerated_or_mapped_keeps_the_budget(fn, traced_steps):
    # no bound: the drain reaches the run-ahead budget (not 100,000 instructions) and the loop steps as Python
    _, _, steps = _run(fn, lambda seed: (torch.randn(3) + seed,), traced_steps)
    assert steps < 3 * translator.RUN_AHEAD_STEPS + 5_000


def test_zip_strict_over_an_endless_generator_raises_as_eager(traced_steps):
    compiled = framejit.compile(zipped_strict, backend=CountingBackend())
    for seed in range(2):
        x, rows = _rows(seed)
        with pytest.raises(ValueError, match="longer"):
            zipped_strict(x, rows)
        with pytest.raises(ValueError, match="longer"):
            compiled(x, rows)
    assert traced_steps[0] < 4 * translator.RUN_AHEAD_STEPS + 5_000
