"""`framejit.compile(m).forward(x)` on a module with a `forward` set on the instance (NOTE [The forward of a
compiled module] in framejit/api.py; hhuntHF6 MED-2 and its LOW).

accelerate's add_hook_to_module sets `m.forward = partial(new_forward, m)`, new_forward calling the old bound
forward. The compiled module shares the instance dict, so `compiled.forward` found that partial and ran it
eagerly: 0 graphs and nothing logged, where stock `torch.compile(m).forward(x)` captures 1 graph. And
`m.forward = framejit.compile(m).forward; m(x)` traced framejit's own `inspect.getattr_static` call (6 breaks
inside inspect). Each case runs eagerly and compiled on fresh inputs of changing sizes.
"""
from __future__ import annotations

import functools
import inspect

import torch

import framejit
from tests.helpers import CountingBackend


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, scale=2.0):
        return torch.relu(self.lin(x)) * scale


def _hooked(module):
    """accelerate's pattern: the old bound forward kept, a partial of the new one set on the instance."""
    old = module.forward

    def new_forward(mod, *args, **kwargs):
        return old(*args, **kwargs) + 1
    module.forward = functools.partial(new_forward, module)
    return module


def _twins():
    torch.manual_seed(0)
    eager, twin = Net(), Net()
    twin.load_state_dict(eager.state_dict())
    return eager, twin


def _inputs():
    return [(torch.randn(n, 4), {"scale": s} if s else {}) for n, s in ((2, None), (3, 0.5), (5, None), (3, 4.0))]


class Parent(torch.nn.Module):
    def __init__(self, child) -> None:
        super().__init__()
        self.child = child

    def forward(self, x):
        return self.child.forward(x) * 3 + self.child(x)


def test_the_instance_forward_of_a_compiled_module_is_compiled():
    """Stock `torch.compile(m).forward` over these calls: 4 graphs (sizes, then `scale` given or not), the hook's
    `+ 1` in them; framejit ran the partial eagerly: 0 graphs."""
    framejit.reset()
    eager, twin = _twins()
    _hooked(eager)
    backend = CountingBackend()
    compiled = framejit.compile(_hooked(twin), backend=backend)
    for x, kwargs in _inputs():
        assert torch.equal(compiled.forward(x, **kwargs), eager.forward(x, **kwargs))
    assert backend.graph_count == 4
    for x, kwargs in _inputs():
        assert torch.equal(compiled(x, **kwargs), eager(x, **kwargs))
    graphs = backend.graph_count
    assert inspect.signature(compiled.forward) == inspect.signature(eager.forward)
    assert compiled.forward is compiled.forward  # one object per instance forward, as eager's attribute
    report = framejit.explain(compiled.forward)(torch.randn(2, 4))
    assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons
    assert any(n.target is torch.add or getattr(n.target, "__name__", "") in ("add", "iadd")
               for gm in backend.graphs for n in gm.graph.nodes), "the hook's + 1 is in a graph"
    compiled.forward = lambda x: x - 1  # set through the compiled module: the shared instance dict, as before
    eager.forward = lambda x: x - 1
    x = torch.randn(3, 4)
    assert torch.equal(compiled.forward(x), eager.forward(x)) and torch.equal(compiled(x), eager(x))
    del compiled.forward
    del eager.forward
    assert "forward" not in twin.__dict__
    for x, kwargs in _inputs()[:2]:
        assert torch.equal(compiled.forward(x, **kwargs), eager.forward(x, **kwargs))
    assert backend.graph_count > graphs
    # traced code reading `compiled_child.forward` gets the class's forward, inlined; once an instance forward is
    # set (a guarded change: the entry recompiles) the read is a break (revAP H2: eager reads the compiled wrapper)
    framejit.reset()
    eager, twin = _twins()
    backend = CountingBackend()
    compiled = framejit.compile(Parent(framejit.compile(twin)), backend=backend)
    plain = Parent(eager)
    for step, (x, _) in enumerate(_inputs()):
        if step == 2:
            _hooked(eager), _hooked(twin)
        assert torch.equal(compiled(x), plain(x)), step
    assert backend.graph_count == 4  # stock: 3; the instance forward read through the compiled child is a break
    report = framejit.explain(compiled)(torch.randn(2, 4))
    assert report.graph_break_count == 1 and "instance forward" in str(report.break_reasons), report.break_reasons


def test_a_compiled_forward_set_as_the_instance_forward_traces_no_framejit_code():
    """`m.forward = framejit.compile(m).forward; m(x)`: module_forward finds the class's forward without tracing
    inspect (6 breaks in inspect's descriptor machinery before); 4 graphs, as the compiled module's own call
    over these calls (stock torch.compile recurses on this program)."""
    framejit.reset()
    eager, twin = _twins()
    backend = CountingBackend()
    twin.forward = framejit.compile(twin, backend=backend).forward
    for x, kwargs in _inputs():
        assert torch.equal(twin(x, **kwargs), eager(x, **kwargs))
    assert backend.graph_count == 4
    report = framejit.explain(twin.forward)(torch.randn(2, 4))
    assert (report.graph_count, report.graph_break_count) == (1, 0), report.break_reasons


class _Scaled:
    """A callable object set as the instance forward, with its own state."""

    def __init__(self, module, k):
        self.module, self.k = module, k

    def __call__(self, x):
        return self.module.lin(x) * self.k


def test_the_instance_forward_read_through_the_compiled_module_is_the_instance_forwards_state():
    """revAP H3/L1: `compiled.forward` was a copy of the instance forward's attributes made once: `c.forward.k = 5`
    set the copy, the calls kept k=2; `.func`/`==` differed from eager's. Now its attributes are the instance
    forward's own, and it compares equal to it."""
    eager, twin = _twins()
    eager.forward, twin.forward = _Scaled(eager, 2.0), _Scaled(twin, 2.0)
    compiled = framejit.compile(twin, backend=CountingBackend())
    for k, n in ((3.0, 2), (5.0, 3), (7.0, 3)):
        x = torch.randn(n, 4)
        eager.forward.k = k
        compiled.forward.k = k
        torch.testing.assert_close(compiled.forward(x), eager.forward(x))
        assert compiled.forward.k == twin.forward.k == k and compiled.forward == twin.forward


def _probe(module):
    f = module.forward
    return f == module.__dict__["forward"], hasattr(f, "func"), getattr(f, "keywords", None)


def test_traced_code_reads_the_compiled_modules_instance_forward_as_eager():
    """revAP H2: traced code read `compiled.forward` as the instance dict's partial, eager as the compiled
    wrapper: `f is m.forward`-style probes differed. The read is now a break, the step reading it as eager."""
    eager, twin = _twins()
    compiled = framejit.compile(twin, backend="eager")
    twin.forward = functools.partial(Net.forward, twin, scale=2.0)
    probe = framejit.compile(_probe, backend="eager")
    for _ in range(3):
        assert probe(compiled) == _probe(compiled) == (True, True, {"scale": 2.0})
