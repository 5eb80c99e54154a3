"""Adversarial differential programs, fourteenth round (issue 12, red team): each runs eagerly and compiled
on separate but equal state over several calls, changing what the code reads between calls, and compares
results, printed output and the state left behind."""
from __future__ import annotations

import pytest
import torch

import framejit


# ---- NOTE [Generators with finalizers] (capture/translator.py): a body that cannot be traced ----------------

def _generator_with_untraceable_finally(kind):
    log = []

    def gen(n):
        try:
            for i in range(n):
                yield i
        finally:
            print("finally")  # not traceable: the break landed at the call that made the generator
            log.append("finally")

    def loop_break(x, n):
        for v in gen(n):
            if v == 1:
                break
            x = x + v
        log.append("after loop")
        return x

    def deleted(x, n):
        g = gen(n)
        a = next(g)
        del g
        log.append("after del")
        return x + a

    return {"loop_break": loop_break, "deleted": deleted}[kind], log


@pytest.mark.parametrize("kind", ["loop_break", "deleted"])
def test_generator_whose_finally_breaks_is_finalized_where_eager_drops_it(kind, capsys):
    # before: 'finally' came after 'after loop' on every call (the generator made in Python at the break
    # lived on in the resume function's arguments), and on the first call only at a later collection
    logs = []
    for compiled in (False, True):
        framejit.reset()
        f, log = _generator_with_untraceable_finally(kind)
        fn = framejit.compile(f, backend="eager") if compiled else f
        out = []
        for n in (3, 3, 4, 3):
            log.clear()
            r = fn(torch.ones(2), n)
            out.append((r.tolist(), list(log), capsys.readouterr().out))
        logs.append(out)
    assert logs[0] == logs[1]


# ---- NOTE [Items with a finalizer] (capture/side_effects.py) ------------------------------------------------

_DROPS = {
    "list_pop": ("def f(x, box):\n    box['l'].pop(0)\n    return x + len(LOG), list(LOG)\n", "list"),
    "list_setitem": ("def f(x, box):\n    box['l'][0] = 5\n    return x + len(LOG), list(LOG)\n", "list"),
    "list_del_slice": ("def f(x, box):\n    del box['l'][:1]\n    return x + len(LOG), list(LOG)\n", "list"),
    "list_clear_in_callee": ("def g(l):\n    l.clear()\n\ndef f(x, box):\n    g(box['l'])\n"
                             "    return x + len(LOG), list(LOG)\n", "list"),
    "dict_pop": ("def f(x, box):\n    box['d'].pop('o')\n    return x + len(LOG), list(LOG)\n", "dict"),
    "dict_clear": ("def f(x, box):\n    box['d'].clear()\n    return x + len(LOG), list(LOG)\n", "dict"),
    "nested_list_pop": ("def f(x, box):\n    box['n'].pop(0)\n    return x + len(LOG), list(LOG)\n", "nested"),
}


@pytest.mark.parametrize("kind", sorted(_DROPS))
def test_a_mutation_dropping_an_object_with_a_finalizer_runs_it_there(kind):
    # before: the trace replayed the pop after the graph, which had read LOG before __del__ ran: every
    # compiled call returned x + 0 and [] where eager returns x + 1 and ['del'] (and on the call that traced,
    # the trace's own values kept the object alive past the call)
    src, holder = _DROPS[kind]
    log = []

    class Fin:
        def __del__(self):
            log.append("del")

    def box(i):
        fin = Fin() if i != 2 else 7  # the third call drops nothing
        return {"list": {"l": [fin, 1]}, "dict": {"d": {"o": fin, "k": 1}}, "nested": {"n": [[fin], 1]}}[holder]

    results = []
    for compiled in (False, True, True):  # the second compiled function shares the code: tracing it is quick
        framejit.reset()
        ns = {"LOG": log}
        exec(compile(src, f"<redteam14_{kind}>", "exec"), ns)
        fn = framejit.compile(ns["f"], backend="eager") if compiled else ns["f"]
        out = []
        for i in range(4):
            log.clear()
            r, seen = fn(torch.ones(2), box(i))
            out.append((r.tolist(), seen, list(log)))
        results.append(out)
    assert results[0] == results[1]
    assert results[0] == results[2]
