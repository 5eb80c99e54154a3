"""Draws from Python's `random` module in a traced frame: made by the transformed code, in trace order.

NOTE [Draws from the random module]: `random.random()` and `random.uniform(a, b)` (the module's functions:
methods of its hidden `random._inst`) are calls into a generator whose state lives outside the graph.
Transformers' layer drop draws one number per decoder layer (`dropout_probability = random.uniform(0, 1)`,
Musicgen, Bart, Whisper, ...) and reads it only in training (`if self.training and dropout_probability <
self.layerdrop`); framejit broke at each draw ("call of Random.random": Musicgen 4-6 graphs per forward,
stock torch.compile 1).

A draw is now a `DrawValue`: the trace records the call (function and constant arguments) and the value
stands for its result without knowing it. The transformed code (the whole frame's, or the code at a
break) makes the recorded calls itself, in trace order, right after the graph call and before any replayed
side effect, resumed call or rebuilt value; the i-th result is stored in a list and read by the value's
source (`DrawSource(i)`). So a call of the frame draws exactly what eager draws, in the same order (the
graph draws nothing from `random`; nothing else the trace runs does either: any other use of the module's
state is a break), and a frame whose graph fails before the draws and reruns eagerly (NOTE [Graph failures
rerun eagerly]) has drawn nothing yet.

The value is opaque: no guard can name it (its source's `expr` is a break: a guard runs before the draw),
and any operation on it (arithmetic, a comparison, a branch, a tensor op) needs its Python value, which the
trace does not have: a graph break at that instruction, where the value, already drawn, is handed to the
Python code and the resume function like any local. Returned, stored, passed along or left unused (layer
drop in eval) it costs nothing. Only calls with constant arguments on `random._inst` itself are recorded
(its identity is fixed; another `random.Random` would need a guard on which object it is); anything else,
`random.seed`/`getstate`/`setstate` included, is the break it was. Entries holding draws are not persisted
(frame_cache): the calls are objects the persisted plan does not describe.

Known difference: a frame that raises after its graph and before eager would have reached a draw (a
replayed side effect or the break's own call raising) has drawn in compiled code and not in eager.
"""
from __future__ import annotations

import random
from typing import Any

from .breaks import BreakKind, Unsupported
from .sources import Source
from .values.base import ConstantValue, Value

DRAWS_LOCAL = "___python_draws"  # the transformed code's list of this call's draws

# the module's functions that draw, as methods of `random._inst`: (function, number of constant arguments)
_DRAWS: dict[Any, tuple[int, ...]] = {random.Random.random: (0,), random.Random.uniform: (2,)}


class DrawSource(Source):
    """The i-th draw of this call of the transformed code (NOTE [Draws from the random module])."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DrawSource) and other.index == self.index

    def __hash__(self) -> int:
        return hash(("draw", self.index))

    def expr(self, names) -> str:  # a guard runs before the draw: nothing can be guarded on it
        raise Unsupported(BreakKind.DATA_DEPENDENT, "a number drawn from Python's random module is only known "
                                                    "when the call runs")

    def reload(self, cg) -> None:
        cg.load_fast(DRAWS_LOCAL)
        cg.load_const(self.index)
        cg.subscr()

    def describe(self) -> str:
        return f"random draw {self.index}"


class DrawValue(Value):
    """The result of a recorded draw: a float nobody in the trace knows (NOTE [Draws from the random module])."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.source = DrawSource(index)

    def python_type(self) -> type:
        return float  # Random.random and Random.uniform of numbers return floats

    def describe(self) -> str:
        return f"a number drawn from Python's random module (draw {self.index})"


def drawing_call(fn: Any, args: list[Value], kwargs: dict[str, Value]) -> tuple | None:
    """(Random method, constant arguments) when `fn(*args, **kwargs)` draws from `random._inst` with
    constant numbers (`random.random()`: a builtin bound to it; `random.uniform(0, 1)`: Random.uniform
    called with it first), else None."""
    if kwargs:
        return None
    if getattr(fn, "__self__", None) is random._inst and getattr(fn, "__name__", None) == "random":
        method, rest = random.Random.random, args
    elif _is_draw_function(fn) and args and getattr(args[0], "obj", None) is random._inst:
        method, rest = fn, args[1:]
    else:
        return None
    if len(rest) not in _DRAWS[method] or not all(
            isinstance(a, ConstantValue) and type(a.value) in (int, float) for a in rest):
        return None
    return method, tuple(a.value for a in rest)


def _is_draw_function(fn: Any) -> bool:
    try:
        return fn in _DRAWS
    except TypeError:
        return False


def record_draw(tx, call: tuple) -> DrawValue:
    """Record a draw (drawing_call's result) as this trace's next one."""
    draws = tx.output.__dict__.setdefault("python_draws", [])
    draws.append(call)
    tx.output.side_effects.version += 1  # an effect on outside state (NOTE [Eager generators]: not reordered)
    return DrawValue(len(draws) - 1)


def make_draws(calls: tuple) -> list:
    """Run the recorded draws, in order (called by the transformed code)."""
    inst = random._inst
    return [fn(inst, *args) for fn, args in calls]


def emit_draws(cg, output) -> None:
    """`___python_draws = make_draws(calls)` where the trace recorded draws."""
    draws = output.__dict__.get("python_draws")
    if not draws:
        return
    cg.push_null()
    cg.load_const(make_draws)
    cg.load_const(tuple(draws))
    cg.call(1)
    cg.store_fast(DRAWS_LOCAL)


def has_draws(output) -> bool:
    return bool(output.__dict__.get("python_draws"))
