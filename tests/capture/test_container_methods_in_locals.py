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
