"""A list, dict or set method bound before a graph break and called after it (`add = seen.add`, the
stdlib's idiom), or passed in as an argument (`f(x, out.append)`): called in the trace on its container
(NOTE [Container methods from outside]), with the container's contents equal to eager's after each call."""
import torch

import framejit
from tests.helpers import CountingBackend


def bound_before_a_break(x):
    seen, table, out = set(), {}, []
    add, get, append = seen.add, table.get, out.append
    print("break")
    for i in range(3):
        add(i % 2)
        table[i] = get(i - 1, 0) + i
        append(x * i)
    return torch.stack(out).sum(0) + len(seen) + table[2], sorted(seen), table


def passed_in(x, append, items, get):
    append(x + 1)
    append(x * len(items))
    return x * get("k", 5), len(items)


def test_methods_bound_before_a_break_are_called_in_the_trace(capsys):
    backend = CountingBackend()
    compiled = framejit.compile(bound_before_a_break, backend=backend)
    for n in (3, 3, 3):
        x = torch.randn(n)
        want, got = bound_before_a_break(x), compiled(x)
        assert torch.allclose(want[0], got[0]) and want[1:] == got[1:]
    assert backend.graph_count == 1  # the resume function after the print, traced once, with no break


def test_methods_passed_in_mutate_their_own_container():
    backend = CountingBackend()
    compiled = framejit.compile(passed_in, backend=backend, fullgraph=True)
    for i in range(4):
        x = torch.randn(3)
        want_items, got_items = [0] * i, [0] * i
        want = passed_in(x, want_items.append, want_items, {"k": i}.get)
        got = compiled(x, got_items.append, got_items, {"k": i}.get)
        assert torch.allclose(want[0], got[0]) and want[1] == got[1]
        assert len(want_items) == len(got_items) and all(
            torch.allclose(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(want_items, got_items))


class _Thing:
    def meth(self):
        return 1


def one_method_two_names(x, o, d, lock):
    a = o.meth
    a2, b = a, d.get
    b2, c = b, lock.locked
    c2, box = c, [b]
    print("break")
    return x + 1, a is a2, b is b2, c is c2, box[0] is b2, id(a) == id(a2), len({b, b2}), a == a2


def test_a_bound_method_is_one_object_after_a_break():
    # NOTE [One object per value] (capture/codegen.py): each name was rebuilt as `o.meth` read again, a new
    # bound method object per name (eager: the same object)
    import threading
    compiled = framejit.compile(one_method_two_names, backend="eager")
    for i in range(3):
        x = torch.randn(2)
        args = (_Thing(), {"k": i}, threading.Lock())
        want, got = one_method_two_names(x, *args), compiled(x, *args)
        assert torch.equal(want[0], got[0]) and want[1:] == got[1:], (want, got)
