"""Python floats that are graph inputs instead of guarded constants.

NOTE [Dynamic floats]: a float argument is specialised (guarded by value) like any Python constant. When
a frame recompiles because a float argument changed value (a `.item()` result passed to a resume
function, a temperature, a learning rate), the hook marks that argument dynamic and later traces make it
a graph input: a placeholder whose example value is the float (TorchDynamo's automatic dynamic, for
floats). Its uses in tensor ops and float arithmetic become graph nodes, so the graph computes with the
value of each call, with Python's own scalar semantics (the graph receives the Python float). Any other
use (a comparison, `int()`, a shape, a Python call outside the graph) needs the concrete value: that
specialises the float, guarding each input it derives from by value, and the trace continues with the
constant, which is what it did before. Under compile(dynamic=True) a float argument of the frame (or an
item of one: a compiled module's arguments) is a graph input from the first call, as stock
torch.compile(dynamic=True) makes it (`x * scale` over 4 scales: 1 compilation, was 2).

NOTE [Float relations]: a float input is also a symbol of the trace's ShapeEnv (`sym`, a SymFloat). A
comparison of float inputs with each other or with numbers (`if t > 0.5`, `t < u`) is then a SymBool (a
SymNodeValue), not a specialisation: branching on it records the relation in the env, which becomes a
guard line (`t > 0.5`, constants printed with 17 digits: exact), so other values on the same side reuse
the entry (stock torch.compile's symbolic floats do the same). Only inputs themselves: a computed float
(`t * 2 + 1 > 3`) would be guarded through the env's rewritten arithmetic (`2.0*t + 1.0`, or worse
reassociated), which can round differently from the code's at the boundary, so it still specialises by
value. `math.floor(t)`, `int(t)` and every other use specialise by value, as above. NaN and infinities
get no symbol (guarded by value); a float with a symbol is guarded not NaN (NOTE [Float symbols are not NaN]
in capture/shapes.py).
"""
from __future__ import annotations

from typing import Any

from .base import Value


class SymFloatValue(Value):
    """A float computed in the graph from float inputs: `node` yields it, `example` is its value now."""

    def __init__(self, out, node, example: float, roots: tuple, source=None, sym=None) -> None:
        self.out = out  # the OutputGraph, for the guards of specialisation
        self.node = node
        self.example = example
        self.roots = roots  # the input SymFloatValues it derives from
        self.source = source
        self.sym = sym  # its SymFloat in the trace's ShapeEnv, or None (NOTE [Float relations])

    def python_type(self) -> type:
        return float

    def is_constant(self) -> bool:
        return True  # as a constant it is specialised (as_constant)

    def as_constant(self) -> Any:
        self.specialise()
        return self.example

    int_roots: tuple = ()  # symbolic int inputs it is computed from (NOTE [Symbolic ints inside dynamic floats])

    def specialise(self) -> None:
        for root in self.roots:
            if not getattr(root, "specialised", False):
                root.specialised = True
                self.out.guard_constant(root.source, root.example)
                _name_the_use(self.out, root)
        for root in self.int_roots:
            root.as_constant()  # a guard on the symbol's value (NOTE [Symbolic shapes])

    def describe(self) -> str:
        return f"SymFloat({self.example!r})"


def _name_the_use(out, root: SymFloatValue) -> None:
    """NOTE [Why a dynamic float is constant again]: a float that became a graph input because it changed
    (NOTE [Dynamic floats]) and is then used where its value is needed (a call folded on it, a string, a
    branch on a computed float) is guarded by value again; the recompile log said only `expected 0.7, got
    0.3`. Its guard's expected text now says that the graph input was made constant again, and by which
    instruction (the guard's origin names the user's line)."""
    import dataclasses
    guard = out.guards[-1] if out.guards else None
    if guard is None or guard.kind != "CONSTANT_MATCH" or not out.tx_stack:
        return
    inst = out.tx_stack[-1].current
    use = "" if inst is None else f" by {_instruction(inst)}"
    out.guards[-1] = dataclasses.replace(guard, expected=f"{guard.expected} (the float {root.source.describe()} "
                                                          f"is a graph input, made constant again{use})")


def _instruction(inst) -> str:
    if inst.name.startswith("CALL"):
        return "a call"
    arg = getattr(inst.arg, "__name__", None) or (inst.arg if isinstance(inst.arg, str) else "")
    return f"{inst.name} {arg}".strip()


class SymNodeValue(Value):
    """A size or size relation that is symbolic in the graph (NOTE [Symbolic shapes] in capture/shapes.py):
    `sym` is a torch.SymInt or SymBool of the trace's ShapeEnv, `node` the graph node that computes it.
    As a constant (any use the trace cannot keep symbolic: `range(n)`, an `if`, a Python call outside the
    graph) it is specialised: the ShapeEnv records a guard on its value or relation, which becomes a
    line of the guard function, and the trace continues with the concrete value."""

    def __init__(self, node, sym, source=None) -> None:
        self.node = node
        self.sym = sym
        self.source = source

    def python_type(self) -> type:
        import torch
        return bool if isinstance(self.sym, torch.SymBool) else float if isinstance(self.sym, torch.SymFloat) else int

    def is_constant(self) -> bool:
        return True  # as a constant it is specialised (as_constant)

    def as_constant(self) -> Any:
        return self.python_type()(self.sym)

    def describe(self) -> str:
        return f"{type(self.sym).__name__}({self.sym})"
