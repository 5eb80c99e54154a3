"""`[...] + o` and `n * o` with a list-subclass object `o` from outside (NOTE [List objects as right
operands]): traced as CPython computes them, from list's own storage, with the class's reflected methods
looked up (and guarded) first."""
import torch

import framejit
from tests.helpers import CountingBackend


class Items(list):
    pass


class OwnIter(list):
    def __iter__(self):  # `+` reads list's storage, never this
        return iter([100])


def concat(x, o):
    both = [x] + o
    return torch.stack(both).sum(0), len([1, 2] + o)


def repeat(x, o):
    return x * len(2 * o), True * o, 0 * o


def _run(fn, make, calls=3):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=True)  # no break
    for i in range(calls):
        x = torch.randn(3)
        o1, o2 = make(i), make(i)
        want, got = fn(x, o1), compiled(x, o2)
        assert repr(want) == repr(got) if not isinstance(want[0], torch.Tensor) else \
            torch.allclose(want[0], got[0]) and repr(want[1:]) == repr(got[1:])
        assert list(o1) == list(o2) if not any(isinstance(v, torch.Tensor) for v in o1) else len(o1) == len(o2)
    return backend


def test_a_list_object_on_the_right_of_plus_is_traced():
    backend = _run(concat, lambda i: Items([torch.ones(3) * k for k in range(i + 1)]))
    assert backend.graph_count == 3  # one per length (the length is guarded), no break
    backend = _run(concat, lambda i: OwnIter([torch.ones(3)] * 2))
    assert backend.graph_count == 1


def test_an_int_times_a_list_object_is_traced():
    backend = _run(repeat, lambda i: Items([1, 2]))
    assert backend.graph_count == 1


def test_a_reflected_method_added_later_is_called():
    class Late(list):
        pass
    def f(x, o):
        return x + 1, [1] + o, 3 * o
    compiled = framejit.compile(f, backend="eager")
    for i in range(4):
        if i == 2:
            Late.__radd__ = lambda self, other: "radd"
            Late.__rmul__ = lambda self, other: "rmul"
        x = torch.randn(2)
        want, got = f(x, Late([i])), compiled(x, Late([i]))
        assert torch.equal(want[0], got[0]) and want[1:] == got[1:], (i, want, got)
    assert got[1:] == ("radd", "rmul")
