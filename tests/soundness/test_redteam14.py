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

