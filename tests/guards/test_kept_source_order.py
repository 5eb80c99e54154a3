"""NOTE [Guard order of a kept source]: a guard function rebuilt from a kept source (the frame cache's)
checks exactly as the one generated from the guards, orders its guards only when a failure is explained,
and then explains the same first failure as the generated one."""
from __future__ import annotations

import pytest

from framejit.guards import Guard, compile_guards
from framejit.guards import codegen


class Box:
    def __init__(self, n: int) -> None:
        self.n = n


def _guards() -> list[Guard]:
    # the cheapest last, and a read through `x` cheaper than the earlier pin of `x`'s type it must follow
    return [Guard("___type(x) is ___box", "TYPE_MATCH", "L['x']", cost=2),
            Guard("x.n == 3", "CONSTANT_MATCH", "L['x'].n", cost=1),
            Guard("y > 0", "CONSTANT_MATCH", "L['y']", cost=0)]


def _namespace() -> dict:
    return {"___type": type, "___box": Box}


def test_kept_source_checks_alike_and_orders_lazily(monkeypatch):
    made = compile_guards(_guards(), "x, y", _namespace())
    calls = []
    real_order = codegen._order
    monkeypatch.setattr(codegen, "_order", lambda gs: calls.append(1) or real_order(gs))
    kept = compile_guards(_guards(), "x, y", _namespace(), source=made.source)
    assert calls == []  # nothing ordered while rebuilding
    for args in [(Box(3), 1), (Box(4), 1), (Box(3), 0), (object(), 1), (Box(3), 5)]:
        assert kept(*args) == made(*args)
    for args in [(Box(4), 1), (Box(3), 0), (object(), 2)]:
        a, b = kept.first_failure(*args), made.first_failure(*args)
        assert (a.guard.expr, a.actual) == (b.guard.expr, b.actual)
        assert [f.guard.expr for f in kept.all_failures(*args)] == [f.guard.expr for f in made.all_failures(*args)]
    assert calls == [1]  # ordered once, on the first explanation
    assert [g.expr for g in kept.guards] == [g.expr for g in made.guards]
    assert kept.first_failure(Box(3), 1) is None


@pytest.mark.parametrize("bad", [Box(4), object()])
def test_generated_function_orders_at_once(bad):
    fn = compile_guards(_guards(), "x, y", _namespace())
    assert [g.expr for g in fn.guards] == ["y > 0", "___type(x) is ___box", "x.n == 3"]
    assert not fn(bad, 1)
