"""Explaining a miss calls no user code the guard function did not call (hunt hhuntG2 MED-1;
NOTE [Explanations run each check once], NOTE [No user code past a failed pin] in guards/outcomes.py).
Each program runs eagerly and compiled on equal state and compares results and the user calls logged."""
from __future__ import annotations

import torch

import framejit
from framejit.guards.codegen import compile_guards
from framejit.guards.guard import Guard


def _run(make, inputs):
    """[(result, calls logged during the call)] for each input, eager and compiled, on separate state."""
    runs = []
    for compiled in (False, True):
        fn, log = make()
        g = framejit.compile(fn, backend="eager") if compiled else fn
        out = []
        for args in inputs(log):
            log.clear()
            out.append((g(*args).tolist(), list(log)))
        runs.append(out)
    return runs


def test_a_list_subclass_len_runs_as_often_as_eager():
    # before: the miss with a logging list subclass ran its __len__ 2 times more on the first miss and 4 more
    # on the next ("len", "len", "gi", "len"): guards past the failed type guard and the failing one again
    def make():
        log = []

        class Logged(list):
            def __len__(self):
                log.append("len")
                return super().__len__()

            def __getitem__(self, i):
                log.append("gi")
                return super().__getitem__(i)
        make.Logged = Logged

        def f(x, seq):
            return x + seq[0] + len(seq)
        return f, log

    def inputs(log):
        L = make.Logged
        return [(torch.ones(2), v) for v in ([1, 2], L([1, 2]), L([4]), [3], L([5, 6]), (7, 8))]
    eager, compiled = _run(make, inputs)
    assert compiled == eager


def test_a_user_eq_runs_as_often_as_eager():
    # before: `v == 3` guarded an int; an object with a logging __eq__ had it called twice (eager: once)
    def make():
        log = []

        class Eq:
            def __eq__(self, other):
                log.append("eq")
                return other == 3
            __hash__ = object.__hash__
        make.Eq = Eq

        def f(x, v):
            if v == 3:
                return x + 1
            return x - 1
        return f, log

    def inputs(log):
        return [(torch.ones(2), v) for v in (3, make.Eq(), make.Eq(), 4, 2.5, make.Eq())]
    eager, compiled = _run(make, inputs)
    assert compiled == eager


def _guards():
    pin = Guard("___type(v) is ___int", "TYPE_MATCH", "L['v']", actual="___type(v)")
    value = Guard("v == 3", "CONSTANT_MATCH", "L['v']", expected="3", actual="v")
    length = Guard("___len(s) == 2", "LENGTH", "L['s']", expected="2", actual="___len(s)")
    spin = Guard("___type(s) is ___list", "TYPE_MATCH", "L['s']", actual="___type(s)")
    return [pin, spin, value, length]


def test_explanations_still_name_values_of_builtin_types():
    # the values past a failed pin are still reported where reading them runs no user code: a float for an
    # int, a tuple's length for a list's
    guard = compile_guards(_guards(), "v, s", {"___int": int, "___list": list})
    failures = [(f.guard.kind, f.actual) for f in guard.all_failures(2.5, (1, 2, 3))]
    assert failures == [("TYPE_MATCH", "<class 'float'>"), ("TYPE_MATCH", "<class 'tuple'>"),
                        ("CONSTANT_MATCH", "2.5"), ("LENGTH", "3")]
    assert str(guard.first_failure(3, [1])).startswith("LENGTH on L['s']: expected 2, got 1")


def test_the_failure_text_still_says_what_raised():
    class Raising:
        def __eq__(self, other):
            raise ValueError("no")
    g = Guard("v == 3", "CONSTANT_MATCH", "L['v']", expected="3", actual="v")
    guard = compile_guards([g], "v", {})
    text = str(guard.first_failure(Raising()))
    assert "(the check raised ValueError: no)" in text and "Raising object at" in text


def _cached_guards(log):
    def answers(n, value):  # a CACHED_CALL check: calls the user's cached function
        log.append(n)
        return n * 2 == value
    guards = [Guard("___type(v) is ___int", "TYPE_MATCH", "L['v']", actual="___type(v)")]
    guards += [Guard(f"___answers({n}, {n * 2 if n != bad else -1})", "CACHED_CALL", f"G['h']({n})",
                     expected="the cached answer", actual=f"___answers({n}, {n * 2 if n != bad else -1})", cost=5)
               for n, bad in ((1, 2), (2, 2), (3, 2))]
    return compile_guards(guards, "v", {"___int": int, "___answers": answers})


def test_a_miss_is_explained_without_calling_cached_functions_again():
    # before: every explanation of a miss (the automatic-dynamic first failure, all failures, the log's) called
    # the failing cached-call check again: after `helper.cache_clear()` eager counted hits=0, framejit 9
    from framejit.guards.codegen import Explanations
    log = []
    guard = _cached_guards(log)

    class Entry:
        pass
    entry = Entry()
    entry.guard = guard
    assert not guard.check(1)  # the cached call with 2 answers otherwise: the check function calls 1 and 2
    assert log == [1, 2]
    failures = Explanations((1,), {})(entry)
    assert [(f.guard.kind, f.guard.source, f.actual) for f in failures] == [("CACHED_CALL", "G['h'](2)", "False")]
    assert str(guard.miss_failure((1,), {})) == str(failures[0])
    assert log == [1, 2]  # no call made again
    assert guard.first_failure(1).guard.source == "G['h'](2)"  # the reference evaluator still evaluates
    assert log == [1, 2, 1, 2]
