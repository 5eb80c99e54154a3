"""A tensor subclass's own __torch_function__ inlined (NOTE [Inlined __torch_function__] in
framejit/capture/torch_function_inline.py).

Differential (the helpers of test_tensor_subclasses): each function runs eagerly and compiled on the same
fresh inputs over several calls (changing shapes, state changed between calls), comparing values, exact
types, the tensors' own attributes, exception types and what the __torch_function__ records. Stock
torch.compile inlines such a __torch_function__ and makes one graph; so does framejit now, where before
every op on such a tensor was a graph break (0 graphs).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

import framejit
from tests.capture.test_tensor_subclasses import differential, make
from tests.helpers import eager_frames, logged_breaks

LOG: list = []


class Logged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        LOG.append((func.__name__, tuple(t.__name__ for t in types), len(args), sorted(kwargs or {})))
        return super().__torch_function__(func, types, args, kwargs)


class Counted(torch.Tensor):
    calls = [0]

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        cls.calls[0] += 1
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


class Flagged(torch.Tensor):
    scale = False

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs)
        if cls.scale and func is torch.Tensor.add:
            LOG.append("scaled")
            return out * 10
        return out


class Dispatching(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.mul:
            LOG.append("mul as add")
            return torch.Tensor.__torch_function__(torch.Tensor.add, (), args, kwargs)
        if func in {torch.sum, torch.Tensor.sum}:
            LOG.append(func.__name__)
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {})) + 1000
        return super().__torch_function__(func, types, args, kwargs)


class Raising(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.sum:
            raise RuntimeError("no sum")
        return super().__torch_function__(func, types, args, kwargs)


class Unwrapping(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs)
        return out.as_subclass(torch.Tensor) if func.__name__ == "sum" else out


def _log():
    return list(LOG)


def _args(cls, plain=True):
    def make_args(i):
        LOG.clear()
        n = 3 + i % 2
        x = make(cls, n, 4)
        return (x, torch.randn(n, 4)) if plain else (x,)
    return make_args


def test_logging_subclass_is_one_graph_with_eager_log_and_types():
    # before: 0 graphs, a break at each of the 12 ops; stock torch.compile: 1 graph
    def f(x, y):
        a = x * 2 + y
        b = torch.relu(a).sum(0)
        c = F.gelu(x.add(1)).mul_(2)
        return a, b, x.shape, 2 - x, x.T, -x, x[0], x > 0, c, torch.cat([y, x]), x.dim(), x.size(1)

    before = eager_frames()
    with logged_breaks() as breaks:
        backend = differential(f, _args(Logged), range(4), state=_log)
    assert breaks == [] and eager_frames() == before
    assert backend.graph_count == 2  # shapes 3x4 and 4x4


def test_plain_first_operand_and_in_place_ops():
    def f(x, y):
        z = y + x
        w = y.clone()
        w.add_(x)
        x2 = x.clone()
        x2 += 1
        v, i = x.max(0)
        return z, w, x2, v, i, torch.split(x, 1), x.unbind(0)

    with logged_breaks() as breaks:
        backend = differential(f, _args(Logged), range(3), state=_log)
    assert backend.graph_count == 2 and breaks == []


def test_counter_under_disable_torch_function_subclass():
    def f(x, y):
        return (x * y).sum(1) + x.shape[0], x.clone().relu_()

    backend = differential(f, lambda i: (Counted.calls.__setitem__(0, 0), *_args(Counted)(i))[1:], range(3),
                           state=lambda: Counted.calls[0])
    assert backend.graph_count == 2


def test_class_flag_toggled_between_calls():
    def f(x, y):
        return x.add(y) * 2, x + 1

    def make_args(i):
        Flagged.scale = i % 2 == 1
        return _args(Flagged)(0)

    try:
        backend = differential(f, make_args, range(4), state=_log)
    finally:
        Flagged.scale = False
    assert backend.graph_count == 2  # one per flag value, then hits


def test_dispatch_on_func_identity():
    def f(x, y):
        return x * y, x.sum(), torch.sum(x, 1), x - y

    with logged_breaks() as breaks:
        backend = differential(f, _args(Dispatching), range(3), state=_log)
    assert backend.graph_count == 2 and breaks == []


def test_torch_function_that_raises_for_some_funcs():
    def f(x):
        y = x * 2
        return y.sum()

    def g(x):
        y = x * 2
        try:
            return y.sum()
        except RuntimeError:
            return y.mean()

    differential(f, _args(Raising, plain=False), range(3))
    backend = differential(g, _args(Raising, plain=False), range(3))
    assert backend.graph_count >= 1


def test_result_unwrapped_by_the_torch_function():
    def f(x, y):
        s = (x + y).sum()
        return s, s * 2, x.mean()

    backend = differential(f, _args(Unwrapping), range(3))
    assert backend.graph_count == 2


def test_new_class_and_changed_torch_function_between_calls():
    classes = []

    def make_args(i):
        LOG.clear()
        if len(classes) <= i // 2:  # a new class every second call (made once: make_args runs twice a call)
            class Fresh(torch.Tensor):
                tag = i // 2

                @classmethod
                def __torch_function__(cls, func, types, args=(), kwargs=None):
                    LOG.append((cls.tag, func.__name__))
                    return super().__torch_function__(func, types, args, kwargs)
            classes.append(Fresh)
        return (make(classes[-1], 3), torch.randn(3))

    def f(x, y):
        return x * y + 1, type(x).tag

    backend = differential(f, make_args, range(4), state=_log)
    assert backend.graph_count == 2  # one per class


def test_subclasses_of_two_classes_and_plain_inputs_mixed():
    def f(x, y):
        return x * y + 1

    def make_args(i):
        LOG.clear()
        kinds = [(Logged, torch.Tensor), (torch.Tensor, Logged), (Logged, Counted), (Logged, Logged)]
        a, b = kinds[i % 4]
        return make(a, 3), make(b, 3)

    differential(f, make_args, range(5), state=_log)


def test_guards_and_traces_run_no_user_torch_function():
    calls = []

    class Quiet(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            calls.append(func.__name__)
            return super().__torch_function__(func, types, args, kwargs)

    def f(x):
        return x * 2

    compiled = framejit.compile(f)
    for n in (3, 3, 5, 6, 5):
        x = make(Quiet, n)
        calls.clear()
        compiled(x)
        assert calls == ["mul"]
