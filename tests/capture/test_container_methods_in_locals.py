"""A bound method held under two names before a graph break is one object after it (NOTE [One object per
value] in capture/codegen.py). A list/dict/set method held in a local before a break (`add = seen.add`) is
called in the trace after it (NOTE [Container methods from outside] in capture/values/builder.py), with its
attributes (NOTE [Attributes of bound C methods]) and its use as a key (NOTE [Bound C methods as keys]) as in
eager."""
import torch

import framejit
from tests.helpers import CountingBackend


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


def str_method_two_names(x, s):
    e = s.upper
    e2 = e
    print("break")
    return x + 1, e is e2, e2(), id(e) == id(e2)


def test_a_method_of_a_str_is_one_object_after_a_break():
    # NOTE [One object per value] (capture/codegen.py): `s.upper` of a str from outside was rebuilt per name
    compiled = framejit.compile(str_method_two_names, backend="eager")
    for i, s in enumerate(("ab", "ab", "cd")):
        x = torch.randn(2) + i
        want, got = str_method_two_names(x, s), compiled(x, s)
        assert torch.equal(want[0], got[0]) and want[1:] == got[1:] == (True, s.upper(), True), (want, got)


def dedup_after_a_break(x, xs, log):
    seen, table = set(), {}
    add, get, push = seen.add, table.get, log.append
    print("break")
    for v in xs:
        if v not in seen:
            add(v)
            push(v)
        table[v] = get(v, 0) + 1
    facts = (add.__self__ is seen, push.__self__ is log, hasattr(add, "__func__"), add.__name__, add.__qualname__,
             add.__module__, type(push).__name__)
    try:
        push.__func__
    except AttributeError as e:
        facts += (str(e),)
    return x * len(seen), facts, table


def methods_as_keys(x, log):
    seen = set()
    add, push = seen.add, log.append
    print("break")
    keys = {add: "add", (push, 2): "push"}  # NOTE [Bound C methods as keys]: the frame ran eagerly (revR R1)
    return x + 1, keys.get(seen.add), keys[(log.append, 2)], keys.get(set().add, "none"), (log.append, 2) in keys


def test_container_methods_held_in_locals_are_called_in_the_trace(capsys):
    backend = CountingBackend()
    compiled = framejit.compile(dedup_after_a_break, backend=backend)
    eager_before = framejit.stats()["eager_frames"]
    want_log, got_log = [], []
    for xs in ([1, 2, 1, 3], [1, 2, 1, 3], [1, 2, 1, 3]):
        want_log.append("from outside")  # the list passed in changes between calls
        got_log.append("from outside")
        x = torch.randn(3)
        want, got = dedup_after_a_break(x, xs, want_log), compiled(x, xs, got_log)
        assert torch.equal(want[0], got[0]) and want[1:] == got[1:], (want, got)
        assert want_log == got_log
    assert backend.graph_count == 1  # the resume function after the print, traced once, with no break
    keyed = framejit.compile(methods_as_keys, backend="eager")
    for log in (want_log, [], want_log):
        x = torch.randn(2)
        want, got = methods_as_keys(x, log), keyed(x, log)
        assert torch.equal(want[0], got[0]) and want[1:] == got[1:], (want, got)
    assert framejit.stats()["eager_frames"] == eager_before
