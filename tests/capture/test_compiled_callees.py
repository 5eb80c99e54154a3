"""Compiled functions and modules called by compiled code, a compiled module's `forward`, and both under FX
symbolic tracing (NOTE [Compiled callables called while tracing] in capture/compiled_callees.py, NOTE [The
forward of a compiled module] in api.py, NOTE [Compiled callables under FX tracing] in capture/breaks.py).
Every result is compared with the same program run eagerly."""
from __future__ import annotations

import inspect

import torch

import framejit
from tests.helpers import run_program


class Counter:
    def __init__(self) -> None:
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.tanh(self.lin(x))


def _close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_a_compiled_function_called_by_compiled_code_joins_its_graph():
    def scale(x):
        return x.sin() * 2

    def shift(x):
        return x.cos() - 3

    inner = {"f": framejit.compile(scale)}

    def outer(x):
        return inner["f"](x) + 1

    cnt = Counter()
    compiled = framejit.compile(outer, backend=cnt)
    for n in (3, 3, 5):
        x = torch.randn(n)
        _close(compiled(x), outer(x))
    report = framejit.explain(outer)(torch.randn(3))
    assert report.graph_break_count == 0 and report.graph_count == 1
    graphs_before = len(cnt.graphs)
    inner["f"] = framejit.compile(shift)  # another compiled function: the guards on its code fail
    x = torch.randn(3)
    _close(compiled(x), outer(x))
    inner["f"] = shift  # the plain function
    _close(compiled(x), outer(x))
    assert len(cnt.graphs) > graphs_before


def test_a_compiled_module_called_by_a_compiled_parent_runs_its_hooks_and_sees_new_weights():
    torch.manual_seed(0)
    block = Block()
    child = framejit.compile(block)

    class Parent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.child = child

        def forward(self, x):
            return self.child(x) * 2 + self.child.forward(x)

    parent = Parent()
    cnt = Counter()
    compiled = framejit.compile(parent, backend=cnt)
    for step in range(3):
        with torch.no_grad():
            block.lin.weight.add_(0.25)  # state changed between calls
        x = torch.randn(2 + step, 4)
        _close(compiled(x), parent(x))
    handle = block.register_forward_hook(lambda mod, args, out: out + 100)  # runs on child(x), not on forward
    x = torch.randn(3, 4)
    _close(compiled(x), parent(x))
    handle.remove()
    _close(compiled(x), parent(x))
    report = framejit.explain(parent)(x)
    assert report.graph_break_count == 0 and report.graph_count == 1


def test_gradients_flow_through_a_compiled_child():
    torch.manual_seed(0)

    class Parent(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.child = framejit.compile(Block())

        def forward(self, x):
            return self.child(x).square().sum()

    parent = Parent()
    compiled = framejit.compile(parent)
    for n in (2, 3):
        x = torch.randn(n, 4)
        compiled(x).backward()
        got = parent.child.lin.weight.grad.clone()
        parent.zero_grad()
        parent(x).backward()
        _close(got, parent.child.lin.weight.grad)
        parent.zero_grad()


def test_the_forward_of_a_compiled_module_is_compiled_and_runs_no_hooks():
    torch.manual_seed(0)
    block = Block()
    cnt = Counter()
    compiled = framejit.compile(block, backend=cnt, fullgraph=True)
    assert str(inspect.signature(compiled.forward)) == str(inspect.signature(block.forward))
    for n in (2, 2, 3):
        x = torch.randn(n, 4)
        _close(compiled.forward(x), block.forward(x))
    assert len(cnt.graphs) >= 1
    handle = block.register_forward_hook(lambda mod, args, out: out * 0)
    x = torch.randn(2, 4)
    _close(compiled.forward(x), block.forward(x))  # eager's forward() skips the hooks
    _close(compiled(x), block(x))  # the call runs them
    handle.remove()
    block.forward = lambda x: x + 42  # a forward set on the instance wins, as on the original
    _close(compiled.forward(x), block.forward(x))
    _close(compiled(x), block(x))


def test_a_list_argument_mutated_through_forward_in_one_graph():
    class Fill(torch.nn.Module):
        def forward(self, items):
            out = items[3:5]
            for _ in range(4):
                out[0] = torch.abs(items[0]) + 1
            return out

    cnt = Counter()
    compiled = framejit.compile(Fill(), backend=cnt, fullgraph=True)
    for n in (10, 10, 7):
        items = [torch.randn(3) for _ in range(n)]
        got, want = compiled.forward(list(items)), Fill().forward(list(items))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _close(a, b)
    assert 1 <= len(cnt.graphs) <= 2


def test_fx_symbolic_trace_of_compiled_callables_records_their_operations():
    def inner(x):
        return x.sin() + 1

    compiled_inner = framejit.compile(inner)

    class UsesCompiled(torch.nn.Module):
        def forward(self, x):
            return compiled_inner(x) * 2

    block = Block()
    for root, eager in ((UsesCompiled(), UsesCompiled()), (framejit.compile(block), block)):
        gm = torch.fx.symbolic_trace(root)
        for n in (2, 3):
            x = torch.randn(n, 4)
            _close(gm(x), eager(x))


def test_a_forward_set_on_the_instance_that_wraps_the_old_one():
    # accelerate's add_hook_to_module: `m._old_forward = m.forward; m.forward = partial(new_forward, m)`, with
    # new_forward calling the old bound forward (review revO O6: RecursionError when the module was compiled)
    import functools

    def wrap(module):
        module._old_forward = module.forward

        def new_forward(mod, x):
            return mod._old_forward(x) * 2 + 1
        module.forward = functools.partial(new_forward, module)
        return module

    torch.manual_seed(0)
    eager = torch.nn.Linear(3, 3)
    twin = torch.nn.Linear(3, 3)
    twin.load_state_dict(eager.state_dict())
    compiled = wrap(framejit.compile(twin, backend="eager"))
    wrap(eager)
    for n in (1, 2, 2):
        x = torch.randn(n, 3)
        _close(compiled(x), eager(x))
        _close(compiled.forward(x), eager.forward(x))


def test_forward_of_a_compiled_module_whose_forward_is_a_static_or_class_method():
    # review revO O11: module_forward passed the module to an unbound staticmethod/classmethod
    def fwd(x):
        return x * 3

    class Static(torch.nn.Module):
        forward = staticmethod(fwd)

    class Klass(torch.nn.Module):
        @classmethod
        def forward(cls, x):
            return x * 4

    for cls in (Static, Klass):
        eager, compiled = cls(), framejit.compile(cls(), backend="eager")
        for n in (2, 3):
            x = torch.randn(n)
            _close(compiled.forward(x), eager.forward(x))
            _close(compiled(x), eager(x))
        compiled.forward = lambda x: x - 1  # an instance forward wins over the class's
        eager.forward = lambda x: x - 1
        x = torch.randn(2)
        _close(compiled(x), eager(x))
        _close(compiled.forward(x), eager.forward(x))


_STRICT_PROGRAM = """
import torch
import framejit


def branches_on_data(t):
    if t.sum() > 4:
        return t + 1
    return t - 1


def branches_on_data_too(t):  # its own code: torch caches per code object
    if t.sum() > 4:
        return t + 1
    return t - 1


strict = torch.compile(branches_on_data, backend="eager", fullgraph=True)
plain = torch.compile(branches_on_data_too, backend="eager")


def calls_strict(x):
    return strict(x) * 2


def calls_plain(x):
    return plain(x) * 2


compiled_strict = framejit.compile(calls_strict, backend="eager")
compiled_plain = framejit.compile(calls_plain, backend="eager")
for n in (3, 3, 5):
    x = torch.arange(float(n))
    outcomes = []
    for fn in (calls_strict, compiled_strict):
        try:
            outcomes.append(("value", fn(x)))
        except Exception as error:  # torch's own Unsupported
            outcomes.append(("raises", type(error).__name__, str(error).splitlines()[0]))
    assert outcomes[0][0] == "raises" and outcomes[1] == outcomes[0], outcomes
    torch.testing.assert_close(compiled_plain(x), calls_plain(x))
print("OK")
"""


def test_a_strict_torch_compiled_callee_raises_where_torch_does(tmp_path):
    """revAQ MED-1: a torch.compile(fullgraph=True) function called from a framejit frame was inlined as its
    original, so a data-dependent branch that torch refuses (eager raises Unsupported) returned a value. A strict
    wrapper now runs as Python (torch compiles it, raising as eager); a plain wrapper is still inlined. In a
    process of its own: after a failed fullgraph compile, torch keeps the locals of later frames alive longer
    (test_graph_breaks_more's finalizer-order test failed after this one in the fresh-clone CI)."""
    script = tmp_path / "strict.py"
    script.write_text(_STRICT_PROGRAM)
    rc, out, err = run_program(tmp_path, script)
    assert rc == 0 and out.strip().endswith("OK"), err
