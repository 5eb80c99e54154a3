"""An nn.Module passed beside one of its own tables (`m._buffers`, `m._modules`, a submodule's `_parameters`, a
hook dict, `_non_persistent_buffers_set`) on some calls and beside an unrelated dict or set on others
(NOTE [Module tables beside the trace's dicts] in namespace_owners.py).

The trace reads a module's entries through its tables (`m._buffers['buf']`), or through the dict it holds
when that dict is the table at trace time. Before, nothing pinned that relation on later calls: a trace made
with an unrelated dict served a call passing `m._buffers`, so `bufs["buf"] = 2 * x; return m.buf + 1` read
the old buffer (eager 7, framejit 1), and a trace made while `hooks` was `m.lin._forward_hooks` ran the hook
it put in on a call where `hooks` was another dict.
"""
from __future__ import annotations

import torch

import framejit
from tests.helpers import CountingBackend


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(2))
        self.register_buffer("scratch", torch.ones(2), persistent=False)
        self.lin = torch.nn.Linear(2, 2)


def _run(fn, owner, table, calls=5):
    """eager and compiled on fresh modules; the table on even calls, a new empty one of its type on odd ones."""
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    for i in range(calls):
        results = []
        for call in (fn, compiled):
            torch.manual_seed(0)
            m = _Net()
            real = getattr(m.get_submodule(owner), table)
            out = call(torch.full((2,), float(i + 1)), m, real if i % 2 == 0 else type(real)())
            bias = getattr(m.lin, "bias", None)
            results.append((out.tolist(), m.buf.tolist(), type(m.lin).__name__, bias is not None and bias.tolist()))
        assert results[0] == results[1], (i, results)
    return backend


def test_a_buffer_written_through_the_module_buffers_dict():
    def f(x, m, bufs):
        bufs["buf"] = x * 2
        return m.buf + 1

    def g(x, m, bufs):  # the buffer read before and after the write
        y = m.buf + 1
        bufs["buf"] = x * 2
        return y + m.buf

    assert _run(f, "", "_buffers").graph_count == 2  # one trace per relation, each reused
    _run(g, "", "_buffers")


def test_a_child_replaced_through_the_modules_dict():
    def f(x, m, mods):
        mods["lin"] = torch.nn.Identity()
        return m.lin(x)

    _run(f, "", "_modules")


def test_a_parameter_replaced_through_a_submodules_parameters_dict():
    def f(x, m, params):
        params["bias"] = torch.nn.Parameter(torch.ones(2) * 7)
        return m.lin(x)

    _run(f, "lin", "_parameters")


def test_a_hook_put_in_through_the_forward_hooks_dict():
    def f(x, m, hooks):
        hooks[987654] = lambda mod, inp, out: out * 100
        out = m.lin(x)
        hooks.pop(987654)
        return out

    _run(f, "lin", "_forward_hooks")


def test_the_non_persistent_buffer_set():
    def f(x, m, names):
        names.discard("scratch")
        return x + len(m.state_dict())

    _run(f, "", "_non_persistent_buffers_set")


def test_the_module_called_with_its_own_buffers_dict():
    class Writer(_Net):
        def forward(self, x, d):
            d["buf"] = x * 5
            return self.buf + x

    compiled = framejit.compile(lambda x, m, d: m(x, d))
    for i in range(4):
        outs = []
        for call in (lambda x, m, d: m(x, d), compiled):
            m = Writer()
            outs.append(call(torch.full((2,), float(i)), m, m._buffers if i % 2 else {}).tolist())
        assert outs[0] == outs[1], (i, outs)


def test_an_unrelated_dict_written_beside_a_model_keeps_one_graph():
    def f(x, m, stats):  # the guard holds on every call: no recompile
        stats["last"] = x.sum()
        stats.setdefault("first", x.sum())
        return m.lin(x) + m.buf

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    m, stats, expected = _Net(), {}, {}
    for i in range(5):
        x = torch.randn(2)
        assert torch.equal(f(x, m, expected), compiled(x, m, stats))
        assert stats.keys() == expected.keys() and all(torch.equal(stats[k], expected[k]) for k in stats)
    assert backend.graph_count == 2  # the first call (no "first" yet), then every later call


def test_a_global_forward_hook_put_in_through_the_global_hooks_dict():
    from torch.nn.modules import module as nn_module
    shared = nn_module._global_forward_hooks

    def f(x, m, hooks):
        hooks[987654] = lambda mod, inp, out: out * 100
        out = m(x)
        hooks.pop(987654)
        return out

    compiled = framejit.compile(f)
    try:
        for i in range(4):
            outs = []
            for call in (f, compiled):
                torch.manual_seed(0)
                m = torch.nn.Linear(2, 2)
                outs.append(call(torch.full((2,), float(i + 1)), m, shared if i % 2 == 0 else type(shared)()).tolist())
            assert outs[0] == outs[1], (i, outs)
    finally:
        shared.pop(987654, None)
