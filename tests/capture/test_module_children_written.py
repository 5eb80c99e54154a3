"""A module container's children changed inside the compiled frame (`ml.append(m)`, `ml.insert`, `ml.extend`,
`del seq[i]`, `seq._modules[k] = m`, `mdict[k] = m`) are seen by the frame's later iteration, `len()`, indexing,
`in` and module walks, as in eager (NOTE [Child tables written in the frame] in module_protocol.py).

Before, those reads used the real `_modules` dict, which the trace only writes when its side effects are
replayed after the graph: `ml.append(nn.Tanh()); for c in ml: x = c(x)` skipped the new child and `len(ml)`
was the old length; `seq._modules["1"] = nn.Tanh(); seq(x)` ran the old ReLU (review revAJ HIGH).
Each test runs eager and compiled on their own copies of the same containers for several calls; the
containers persist across calls, so they grow (or change) between calls as the program changes them.
"""
from __future__ import annotations

import torch
from torch import nn

import framejit
from tests.helpers import CountingBackend


def _layout(m: nn.Module) -> list:
    return [(name, type(child).__name__) for name, child in m.named_modules()]


def _same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.allclose(a, b), (a, b)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            _same(x, y)
    else:
        assert a == b, (a, b)


def _check(fn, make, calls: int = 3, fresh: bool = False) -> CountingBackend:
    """eager and compiled on equal containers (kept across calls unless `fresh`), inputs changing per call:
    results and the containers' layout after every call must match."""
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    torch.manual_seed(0)
    eager_m = make()
    torch.manual_seed(0)
    jit_m = make()
    for i in range(calls):
        if fresh:
            torch.manual_seed(i)
            eager_m = make()
            torch.manual_seed(i)
            jit_m = make()
        x = torch.randn(2) * (i + 1)
        _same(compiled(jit_m, x), fn(eager_m, x))
        assert _layout(jit_m) == _layout(eager_m), i
    return backend


def _list():
    return nn.ModuleList([nn.Linear(2, 2), nn.ReLU()])


def _seq():
    return nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 2))


def test_an_appended_child_is_iterated_counted_and_indexed():
    def f(ml, x):
        ml.append(nn.Tanh())
        for c in ml:
            x = c(x)
        return x, len(ml), ml[-1](x), [type(c).__name__ for c in ml]

    _check(f, _list)
    _check(f, _list, fresh=True)


def test_insert_and_extend_are_seen_by_indexing_and_iteration():
    def f(ml, x):
        ml.insert(0, nn.Tanh())
        ml.extend([nn.Sigmoid()])
        return ml[0](x), ml[-1](x), len(ml), [type(c).__name__ for c in ml[1:]]

    _check(f, _list)


def test_two_appends_number_the_second_after_the_first():
    def f(ml, x):
        ml.append(nn.Tanh())
        ml.append(nn.Sigmoid())
        return [type(c).__name__ for c in ml], ml[len(ml) - 1](x)

    _check(f, _list)


def test_a_sequential_child_replaced_through_modules_runs_in_forward():
    def replace(seq, x):
        seq._modules["1"] = nn.Tanh()
        return seq(x)

    def add(seq, x):
        seq._modules[str(len(seq))] = nn.Tanh()
        return seq(x), len(seq)

    def remove(seq, x):
        seq._modules.pop("1")
        return seq(x), len(seq)

    _check(replace, _seq, fresh=True)
    _check(add, lambda: nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
    _check(remove, _seq, fresh=True)


def test_del_then_add_module_and_the_table_passed_beside_the_module():
    def f(seq, x):
        del seq[1]
        seq.add_module("1", nn.Tanh())
        return seq(x), len(seq), [type(c).__name__ for c in seq]

    def g(seq, x, table):  # the module's own `_modules` passed as an argument
        table["1"] = nn.Tanh()
        return seq(x)

    _check(f, _seq, fresh=True)
    _check(lambda seq, x: g(seq, x, seq._modules), _seq, fresh=True)


def test_a_module_dict_entry_added_is_iterated_and_contained():
    def f(md, x):
        md._modules[f"t{len(md)}"] = nn.Tanh()
        return [k for k in md], len(md), "t2" in md, md["t1"](x)

    def g(md, x):
        md[f"t{len(md)}"] = nn.Tanh()
        return [k for k in md], len(md), "t2" in md, md["t1"](x)

    _check(f, lambda: nn.ModuleDict({"r": nn.ReLU()}))
    _check(g, lambda: nn.ModuleDict({"r": nn.ReLU()}))


def test_module_walks_after_a_write_see_the_new_children():
    def f(ml, x):
        ml.append(nn.Tanh())
        return [type(c).__name__ for c in ml.children()], [n for n, _ in ml.named_modules()], x + 1

    _check(f, _list)


def test_unchanged_containers_still_trace_whole():
    def f(ml, seq, x):
        for c in ml:
            x = c(x)
        return seq(x) + ml[-1](x) * len(ml), [n for n, _ in seq.named_modules()]

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend, fullgraph=True)
    torch.manual_seed(0)
    ml, seq = _list(), _seq()
    for i in range(3):
        x = torch.randn(2) * (i + 1)
        _same(compiled(ml, seq, x), f(ml, seq, x))
    assert backend.graph_count == 1
