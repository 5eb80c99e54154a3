"""Guards as plain data.

capture/ turns each assumption made while tracing into a `Guard`: a Python boolean expression over the
frame's arguments (parameter names) and named objects (a namespace of `___`-prefixed names), plus its
provenance. guards/ never imports capture: it only sees these records.

`kind` is a stable name (TENSOR_DTYPE, CONSTANT_MATCH, ...) for tests and logs; `cost` orders checks,
cheapest first; `actual` is an expression whose value is shown when the guard fails (e.g. `x.dtype`).
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Guard:
    expr: str
    kind: str
    source: str  # the user-readable place, e.g. "L['x']" or "L['self'].layers[0].weight"
    origin: str = ""  # the user code that caused it: "file.py:12: y = x.shape[0]"
    expected: str = ""  # readable expected value
    actual: str | None = None  # expression evaluated on failure to show the actual value
    cost: int = 1
    parts: tuple["Guard", ...] = ()  # a combined guard (e.g. all of one tensor's metadata): its checks

    @classmethod
    def combine(cls, kind: str, parts: list["Guard"]) -> "Guard":
        """One guard checking all `parts` in one expression; failures still name the failing part."""
        first = parts[0]
        expr = " and ".join(f"({p.expr})" if " or " in p.expr else p.expr for p in parts)
        return cls(expr, kind, first.source, first.origin, "; ".join(p.expected for p in parts), None,
                   max(p.cost for p in parts), tuple(parts))

    def describe(self) -> str:
        text = f"{self.kind} {self.source}: {self.expr}"
        return f"{text}  # {self.origin}" if self.origin else text


# Cost classes: identity and type checks first, then constants, then tensor metadata.
COST_ID = 0
COST_TYPE = 1
COST_CONSTANT = 2
COST_TENSOR = 3
COST_CONTAINER = 4
