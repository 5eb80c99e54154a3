"""A function decorated with `@torch.autocast(...)` that breaks (a debug print) called from a compiled function:
the code around the call is captured (NOTE [Autocast objects open outside] in context.py).

torch's decorator wraps the function in `with autocast_instance: return func(*args, **kwargs)`, the instance a
cell of the wrapper. A break inside func is the plain break at the caller's call (no nested break inside a with
block), so the caller's graph and resume function hold nothing of that block; yet the caller ran wholly eagerly
(its `x.sin()` before the call and the ops after it in no graph). Now only the wrapper's own frame runs eagerly,
as the rule asks for a break inside the block of an object from outside, and func is traced through its hook.

Differential: eager vs framejit over several calls with changing sizes: values, dtypes inside and after the
call, autocast state after the call, printed output; graph contents counted.
"""
import torch

import framejit
from tests.helpers import CountingBackend, eager_frames

AC = torch.autocast("cpu", dtype=torch.bfloat16)


@torch.autocast("cpu", dtype=torch.bfloat16)
def project(h, w):
    y = h @ w
    print("projected", tuple(y.shape), y.dtype)
    return y @ w


def step(x, w):
    h = x.sin() * 2
    r = project(h, w)
    out = r.float().tanh() + 1
    return out, r.dtype, (h @ w).dtype, torch.is_autocast_enabled("cpu")


def _helper_with_global(h, w):
    with AC:
        y = h @ w
        print("inside", y.dtype)
        return y @ w


def step_global(x, w):
    h = x.cos()
    r = _helper_with_global(h, w)
    return r.float() - 1, r.dtype, (h @ w).dtype, torch.is_autocast_enabled("cpu")


def _open_ac():
    AC.__enter__()


def step_left_open(x, w):
    _open_ac()  # a callee opens the block and returns: it is open where the root breaks below
    a = x @ w
    print("open", a.dtype)
    b = x @ w
    AC.__exit__(None, None, None)
    return a.dtype, b.dtype, (x @ w).dtype, torch.is_autocast_enabled("cpu")


def _call(fn, n, seed):
    g = torch.Generator().manual_seed(seed)
    torch.set_autocast_enabled("cpu", False)
    try:
        r = fn(torch.randn(n, 4, generator=g), torch.randn(4, 4, generator=g))
        return r, torch.is_autocast_enabled("cpu")
    finally:
        torch.set_autocast_enabled("cpu", False)


def _same(a, b):
    (ra, sa), (rb, sb) = a, b
    assert sa == sb
    assert len(ra) == len(rb)
    for u, v in zip(ra, rb):
        if isinstance(u, torch.Tensor):
            assert u.dtype == v.dtype and torch.equal(u, v)
        else:
            assert u == v


def _differential(fn, capsys, backend):
    cf = framejit.compile(fn, backend=backend)
    for i, n in enumerate((2, 3, 2, 5)):
        expected = _call(fn, n, i)
        printed = capsys.readouterr().out
        _same(_call(cf, n, i), expected)
        assert capsys.readouterr().out == printed


def _ops(backend):
    return [sorted({getattr(n.target, "__name__", str(n.target)) for n in g.graph.nodes
                    if n.op in ("call_function", "call_method")}) for g in backend.graphs]


def test_code_around_an_autocast_decorated_call_that_breaks_is_captured(capsys):
    backend, before = CountingBackend(), eager_frames()
    _differential(step, capsys, backend)
    ops = _ops(backend)
    assert any("sin" in o for o in ops)  # the caller's code before the call: in a graph
    assert any("tanh" in o for o in ops)  # ... and after it
    assert sum("matmul" in o and "sin" not in o and "tanh" not in o for o in ops) >= 2  # project's halves
    assert eager_frames() - before <= 2  # only the decorator's wrapper (static, then symbolic sizes)


def test_helper_with_a_global_autocast_block_that_breaks(capsys):
    backend = CountingBackend()
    _differential(step_global, capsys, backend)
    assert any("cos" in o for o in _ops(backend))  # the caller's code before the call: in a graph
    # a block a callee opened and left open is open where the caller breaks: as eager's still
    _differential(step_left_open, capsys, CountingBackend())


class _Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)

    @torch.autocast("cpu", dtype=torch.bfloat16)
    def forward(self, x):
        y = self.proj(x)
        if y.abs().sum() > 30:  # a data-dependent branch: a break inside the decorated forward
            y = y * 0.5
        return self.proj(y)


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 4)
        self.head = _Head()

    def forward(self, x):
        return self.head(self.body(x).relu()).float().softmax(-1)


def test_a_model_whose_submodule_forward_is_autocast_decorated_and_breaks():
    torch.manual_seed(0)
    model = _Net()
    backend, before = CountingBackend(), eager_frames()
    compiled = framejit.compile(model, backend=backend)
    for i, n in enumerate((2, 3, 2, 6)):
        x = torch.randn(n, 4, generator=torch.Generator().manual_seed(i)) * (1 + 3 * (i % 2))  # both branches
        expected = model(x)
        actual = compiled(x)
        assert actual.dtype == expected.dtype and torch.equal(actual, expected)
        assert not torch.is_autocast_enabled("cpu")
    ops = _ops(backend)
    assert any("relu" in o for o in ops) and any("softmax" in o for o in ops)  # the model's own code in graphs
    assert eager_frames() - before <= 2  # only the decorator's wrapper (static, then symbolic sizes)
