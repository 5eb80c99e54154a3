"""The work of compiling a large model grows with the model, not with its square or with passes over a cache
it overflows: NOTE [Guard facts once per pass], [One explanation per miss] (guards/codegen.py) and
[Inputs of large graphs] (capture/graph_calls.py). EfficientNet-B7 (64 blocks) or 300 conv blocks guard
~22000 distinct expressions, more than `_facts` keeps: the cache is made small here so that a few blocks
show the same. Every test also compares the compiled model with eager, call after call."""
from __future__ import annotations

import functools

import torch
import torch.nn as nn

import framejit
from framejit.capture import convert
from framejit.capture.graph import OutputGraph
from framejit.guards import codegen
from framejit.guards.codegen import GuardFunction
from tests.helpers import CountingBackend


class Block(nn.Module):  # EfficientNet's idiom: conv, batch norm, activation, residual
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn, self.act = nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4), nn.SiLU()

    def forward(self, x):
        return x + self.act(self.bn(self.conv(x)))


def _model(blocks: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[Block() for _ in range(blocks)]).eval()


def _run(model, compiled, backend, batches):
    counts = []
    for i, batch in enumerate(batches):
        x = torch.randn(batch, 4, 3, 3, generator=torch.Generator().manual_seed(i))
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x))
        counts.append(backend.graph_count)
    return counts


def test_guard_facts_are_parsed_once_per_pass_when_the_cache_is_smaller(monkeypatch):
    small = functools.lru_cache(maxsize=64)(codegen._facts.__wrapped__)
    monkeypatch.setattr(codegen, "_facts", small)
    unique = []
    real = convert.compile_guards

    def counting(guards, *args, **kwargs):
        guards = list(guards)
        unique.append(len({g.expr for g in guards}))
        return real(guards, *args, **kwargs)
    monkeypatch.setattr(convert, "compile_guards", counting)
    model, backend = _model(6), CountingBackend()
    assert _run(model, framejit.compile(model, backend=backend), backend, [2, 2, 3, 5]) == [1, 1, 2, 2]
    assert len(unique) == 2 and min(unique) > 64  # two entries, each with more expressions than the cache
    # each compile reads each expression (and the remembered form of a tensor's checks) through one table,
    # the recompile's explanation each of the first entry's once; before: about 3 parses per expression
    assert small.cache_info().misses <= 2 * sum(unique) + unique[0], (small.cache_info(), unique)


def test_a_miss_explains_each_entry_once(monkeypatch):
    calls = []
    real = GuardFunction.miss_failures  # what a miss's explanation calls (all_failures of the miss)
    monkeypatch.setattr(GuardFunction, "miss_failures", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    scale = {"s": 0.5}

    def f(x, k):
        return x * k + scale["s"]

    backend = CountingBackend()
    cf = framejit.compile(f, backend=backend)
    for i, (n, k, s) in enumerate([(3, 1.5, 0.5), (3, 1.5, 0.5), (4, 2.5, 0.5), (4, 2.5, 1.5), (6, 3.5, 2.5)]):
        scale["s"] = s
        x = torch.randn(n, generator=torch.Generator().manual_seed(i))
        before = len(calls)
        torch.testing.assert_close(cf(x, k), f(x, k))
        if i == 2:  # the first miss: a size and a float changed, both explained by one pass over the guards
            assert len(calls) - before == 1
    assert backend.graph_count == 3  # size and k dynamic after call 2; the dict's float after call 3


def test_calls_that_write_nothing_compare_no_input_versions(monkeypatch):
    checked = []
    real = OutputGraph._check_input_mutation
    monkeypatch.setattr(OutputGraph, "_check_input_mutation", lambda self, *a: checked.append(a[0]) or real(self, *a))
    model, backend = _model(3), CountingBackend()
    assert _run(model, framejit.compile(model, backend=backend), backend, [2, 2, 3]) == [1, 1, 2]
    assert checked == []  # 12 calls per trace, none of them wrote a tensor


def _writes(a, b, c):
    a[0].add_(1)  # through a view: the view, not `a`, is the call's argument
    torch.mul(c, 2, out=b)
    return (a + b).sum() + c.mean()


def _write_fresh():
    a, b, c = torch.arange(6.0).view(2, 3), torch.zeros(2, 3), torch.ones(2, 3)
    return a, b, c


def test_writes_to_inputs_through_views_and_out_stay_checked():
    backend = CountingBackend()
    cf = framejit.compile(_writes, backend=backend)
    for i in range(4):
        a, b, c = _write_fresh()
        a2, b2, c2 = _write_fresh()
        if i == 2:  # `b` a view of `a`: written after `a` was, they share memory
            b, b2 = a[:, :], a2[:, :]
        if i == 3:  # `c` a view of `b`: out= writes what it reads
            c, c2 = b.view(2, 3), b2.view(2, 3)
        try:
            want = _writes(a2, b2, c2)
        except RuntimeError as e:
            want = e
        try:
            got = cf(a, b, c)
        except RuntimeError as e:
            got = e
        if isinstance(want, Exception):
            assert type(got) is type(want)
            continue
        torch.testing.assert_close(got, want)
        for x, y in zip((a, b, c), (a2, b2, c2)):
            torch.testing.assert_close(x, y)
