"""A call of a user object whose class defines `__call__` in Python, taken at a graph break, runs that
`__call__` through a frame hook, so its code is captured (NOTE [Callable objects at breaks] in
capture/break_callees.py). Before, the object was called directly there and its whole body ran eagerly
without an eager-frame record: a compiled callable instance, a callable object called in a loop, a training
step object around an optimizer. Every result is compared with the same program run eagerly."""
from __future__ import annotations

import pytest
import torch

import framejit


class Counter:
    def __init__(self) -> None:
        self.ops = []

    def __call__(self, gm, example_inputs):
        self.ops.append({str(n.target) for n in gm.graph.nodes if n.op in ("call_function", "call_method")})
        return gm.forward


class Scale:
    def __init__(self, k: float) -> None:
        self.k = k
        self.seen = []

    def __call__(self, x):
        y = x.sin() * self.k
        self.seen.append(tuple(y.shape))
        print("scale", self.k)
        return y.cos() + 1


def _captured(cnt: Counter, name: str) -> bool:
    return any(name in ops for ops in cnt.ops)


def test_a_compiled_callable_object_captures_its_call(capsys):
    eager_obj, obj = Scale(2.0), Scale(2.0)
    cnt = Counter()
    compiled = framejit.compile(obj, backend=cnt)
    for n in (3, 3, 5):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), eager_obj(x))
    assert obj.seen == eager_obj.seen
    assert capsys.readouterr().out == "scale 2.0\n" * 6
    assert _captured(cnt, "sin") and _captured(cnt, "cos")  # the parent compiled no graph at all


def test_a_callable_object_called_in_a_loop_captures_its_call(capsys):
    objs = [Scale(2.0), Scale(3.0)]

    def f(x):
        for o in objs:
            x = o(x)
        return x * 2

    cnt = Counter()
    compiled = framejit.compile(f, backend=cnt)
    for n in (4, 4, 6):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), f(x))
    assert capsys.readouterr().out == "scale 2.0\nscale 3.0\n" * 6
    assert _captured(cnt, "sin") and _captured(cnt, "cos")  # the parent captured only `x * 2`


def test_a_new_call_on_the_class_is_seen():
    class Shift:
        def __call__(self, x):
            print("shift")
            return x + 1

    def g(x):
        return x.exp() * 3

    obj = Shift()
    compiled = framejit.compile(obj, backend=Counter())
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x + 1)
    Shift.__call__ = lambda self, x: g(x)
    torch.testing.assert_close(compiled(x), g(x))
    del Shift.__call__
    try:
        compiled(x)
    except TypeError as e:
        assert "not callable" in str(e)
    else:
        raise AssertionError("a Shift without __call__ was called")


class Step:
    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def __call__(self, x, y):
        self.opt.zero_grad()  # torch.compiler.disable'd in torch: a break
        loss = torch.nn.functional.mse_loss(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss.detach()


def test_a_training_step_object_captures_its_forward():
    eager, step = Step(), Step()
    cnt = Counter()
    compiled = framejit.compile(step, backend=cnt)
    torch.manual_seed(1)
    for n in (4, 4, 6):
        x, y = torch.randn(n, 4), torch.randn(n, 2)
        torch.testing.assert_close(compiled(x, y), eager(x, y))
    for p, q in zip(step.model.parameters(), eager.model.parameters()):
        torch.testing.assert_close(p, q)
    assert _captured(cnt, "<built-in function linear>")  # the forward: the parent compiled no graph at all


def test_a_compiled_function_called_by_a_compiled_frame_never_traces_framejits_own_code():
    """NOTE [Callable objects at breaks]: a framejit.compile'd function is an object whose class has a Python
    __call__ (FrameHook); called where the outer frame breaks (a change of dtype, an argument its guards refuse),
    it is called directly, never hooked (revBI MED-1: framejit traced its own guard and miss code, 3 eager frames)."""
    def g(x, k):
        return x.sin() * k
    inner = framejit.compile(g, backend="eager")

    def f(x, k):
        return inner(x * 2, k) + 1
    compiled = framejit.compile(f, backend="eager")
    before = framejit.stats()["eager_frames"]
    for x, k in [(torch.ones(2), 2), (torch.ones(3), 3), (torch.ones(2, dtype=torch.float64), 2.5)]:
        torch.testing.assert_close(compiled(x, k), f(x, k))
    for fn in (f, compiled):  # a list k: the multiplication raises inside inner, where the outer frame breaks
        with pytest.raises(TypeError, match="only integer tensors"):
            fn(torch.ones(4), [1])
    assert framejit.stats()["eager_frames"] == before, framejit.stats()["eager_frame_reasons"][before:]
