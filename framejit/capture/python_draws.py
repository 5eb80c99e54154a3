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
Python code and the resume function like any local (which marks it dynamic there from the first trace:
NOTE [Symbols carried into resume functions]). Returned, stored, passed along or left unused (layer drop in
eval) it costs nothing. Recorded: the drawing methods of an exact `random.Random` listed in `_DRAWS`
(random, uniform, gauss, randint, randrange, choice, ...) called with constant arguments that they take
without raising, on `random._inst` (the module's functions) or on a generator read from a source (NOTE
[Generators read where the trace read them]). Before, only random() and uniform() of `random._inst` were:
`rng.gauss(0, 1)`, `random.randint(1, 5)` or `m.rng.random()` were inlined down to the C draws of random.py,
each a break whose resume function guarded the number drawn (a recompile per new value until it turned
dynamic): 9-22 frames traced over 4 calls where the draws are now 2-6 (the shape changes). Anything else
(`random.seed`/`getstate`/`setstate`, shuffle, sample, a subclass of Random) is the break it was. Entries
holding draws are not persisted (frame_cache): the calls are objects the persisted plan does not describe.

Known difference: a frame that raises after its graph and before eager would have reached a draw (a
replayed side effect or the break's own call raising) has drawn in compiled code and not in eager.
"""
from __future__ import annotations

import inspect
import random
import types
from typing import Any

from .breaks import BreakKind, Unsupported
from .sources import AttrSource, GlobalSource, LocalSource, Source
from .values.base import ConstantValue, Value

DRAWS_LOCAL = "___python_draws"  # the transformed code's list of this call's draws


def _numbers(*args) -> bool:
    """Ints and floats the float arithmetic of the methods takes without raising (an int past float's range
    raises OverflowError when it meets a float: NOTE [Draws that cannot raise])."""
    return all(type(a) is float or (type(a) is int and abs(a) < 2 ** 1000) for a in args)


def _ints(*args) -> bool:
    return all(type(a) is int for a in args)


def _randrange_ok(start, stop=None, step=1) -> bool:
    return _ints(start, step) and (stop is None or type(stop) is int) and step != 0 and \
        len(range(start, stop, step) if stop is not None else range(start)) > 0


# NOTE [Draws that cannot raise]: a recorded draw is made after the graph, so a draw that raises would raise
# after writes eager never made (review revM F3: `random.lognormvariate(1000, 1)` raises OverflowError from
# exp(); eager raised before the frame's `xs[0].add_(1)`, framejit after it). lognormvariate is therefore
# not recorded (it is traced as before), and number arguments must be floats or ints that convert to float.


# NOTE [Draws from the random module]: the methods of random.Random recorded as draws, each with the check
# its (bound) arguments must pass for the call to return what eager's does without raising, and the type of
# its result (None: the common type of the items of `choice`'s constant sequence).
_DRAWS: dict[Any, tuple[Any, type | None]] = {
    random.Random.random: (lambda: True, float),
    random.Random.uniform: (_numbers, float),
    random.Random.gauss: (_numbers, float),
    random.Random.normalvariate: (_numbers, float),
    random.Random.expovariate: (lambda lambd=1.0: _numbers(lambd) and lambd != 0, float),
    random.Random.getrandbits: (lambda k: _ints(k) and k >= 0, int),
    random.Random.randint: (lambda a, b: _ints(a, b) and a <= b, int),
    random.Random.randrange: (_randrange_ok, int),
    random.Random.choice: (lambda seq: type(seq) in (tuple, str) and len(seq) > 0, None),
}
_C_METHODS = {"random": random.Random.random, "getrandbits": random.Random.getrandbits}


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
    """The result of a recorded draw: a number nobody in the trace knows (NOTE [Draws from the random module])."""

    def __init__(self, index: int, kind: type = float) -> None:
        self.index = index
        self.kind = kind
        self.source = DrawSource(index)

    def python_type(self) -> type:
        return self.kind  # Random.random and uniform return floats, randint ints, choice an item of its sequence

    def describe(self) -> str:
        return f"a number drawn from Python's random module (draw {self.index})"


def drawing_call(tx, fn: Any, args: list[Value], kwargs: dict[str, Value], fn_source: Source | None = None):
    """(Random method, generator, constant arguments, result type) when `fn(*args, **kwargs)` draws from a
    `random.Random` whose identity is known (`random._inst`, or one read from a source, which is guarded),
    with constant arguments that the method takes without raising; else None. `fn` is the method bound to the
    generator (`random.random`, `rng.random`: `fn_source` is where it was read) or the function called with
    the generator first (`random.uniform(0, 1)`: Random.uniform and the ObjectValue of `random._inst`)."""
    owner = getattr(fn, "__self__", None)
    if type(owner) is random.Random and _C_METHODS.get(getattr(fn, "__name__", None)) is not None:
        method, rest = _C_METHODS[fn.__name__], args
        receiver = _owner_source(tx, fn_source, owner)
    elif _is_draw_function(fn) and args and type(getattr(args[0], "obj", None)) is random.Random:
        method, rest, owner, receiver = fn, args[1:], args[0].obj, args[0].source
    else:
        return None
    values = _constant_arguments(rest, kwargs)
    kind = None if values is None else _result_type(method, *values)
    if kind is None or owner is not random._inst and receiver is None or _written(tx, owner):
        return None
    if owner is random._inst:
        receiver = None  # the module's own generator: always this object
    elif _reloadable(receiver):  # NOTE [Generators read where the trace read them]
        tx.output.guard_type(receiver, random.Random)
        owner = None
    else:
        tx.output.guard_id(receiver, owner)
        receiver = None
    return method, owner, receiver, values, kind


# NOTE [Draws after stores to their generator]: recorded draws are made right after the graph, before the
# replayed stores; a store the trace made to the generator before the draw (`rng.gauss_next = None` between
# two `rng.gauss(0, 1)`, review revM F4; `setattr(rng, ...)`, a write into `vars(rng)`) would then land after
# it, and the second gauss returned the cached half of the first pair where eager draws anew. A draw from a
# generator with such a pending store is not recorded (it is traced as before, reading the stored value).
def _written(tx, owner: Any) -> bool:
    effects = tx.output.side_effects
    if any(key[0] == id(owner) for key in effects.attrs):
        return True
    state = getattr(owner, "__dict__", None)
    seen = tx.output.__dict__.get("_by_object", {}).get(id(state))
    if seen is not None and seen[0] is state:
        return True  # its __dict__ is a value of the trace (NOTE [Generator state read after a draw]): not recorded
    return effects.written_dict(state) is not None


def _owner_source(tx, fn_source: Source | None, owner: Any) -> Source | None:
    """Where the generator a bound draw method belongs to was read: the base of `rng.random` when the trace
    read that base as the generator itself, else None (NOTE [Draw methods held by other objects])."""
    if not isinstance(fn_source, AttrSource) or fn_source.raw:
        return None
    base = tx.output.cached(fn_source.base)
    return fn_source.base if getattr(base, "obj", None) is owner else None


# NOTE [Draw methods held by other objects]: a generator's bound method kept by another object
# (`self.sample = self.rng.random`, then `S.sample()`) is read as an attribute of that object, not of the
# generator: reloading "the base of the method's source" drew from the Sampler (TypeError on every call, a
# recompile each: review revM F2). A method is recorded with a reloaded generator only when the trace read
# its base as that very generator; otherwise the call is not recorded (it is traced as before: a break).


# NOTE [Generators read where the trace read them]: a draw from a generator other than `random._inst` (a
# user's `rng = random.Random(0)` global, `self.rng`, an argument) is made on the object the transformed code
# reads from the same place the trace read it (a local, a global, attributes of those), right after the
# graph, so a new generator there (one per call, or a module's reassigned `rng`) needs no recompile; the
# guard is on its exact type (a subclass may draw otherwise). Nothing the frame does runs between the guard
# and the draws (the graph runs no Python; the replayed stores and the break's call come after them). A
# generator read another way is guarded by identity and named by the transformed code as a constant.
def _reloadable(source: Source | None) -> bool:
    if isinstance(source, (LocalSource, GlobalSource)):
        return True
    return isinstance(source, AttrSource) and not source.raw and _reloadable(source.base)


def _constant_arguments(args: list[Value], kwargs: dict[str, Value]) -> tuple | None:
    """(positional values, keyword values) of constant arguments (a tuple or list of constants: a tuple),
    else None."""
    def plain(v: Value):
        if isinstance(v, ConstantValue):
            return v.value
        items = getattr(v, "items", None)
        if type(v).__name__ in ("ListValue", "TupleValue") and all(isinstance(i, ConstantValue) for i in items):
            return tuple(i.value for i in items)
        raise LookupError
    try:
        return tuple(plain(a) for a in args), {k: plain(v) for k, v in kwargs.items()}
    except LookupError:
        return None


def _result_type(method: Any, positional: tuple, keywords: dict) -> type | None:
    """The type of what `method(generator, *positional, **keywords)` returns, when the arguments pass the
    method's check (so the call does not raise), else None."""
    check, kind = _DRAWS[method]
    try:
        if isinstance(method, types.FunctionType):  # the method's own arity and keywords
            inspect.signature(method).bind(None, *positional, **keywords)
        if not check(*positional, **keywords):
            return None
    except TypeError:  # another number of arguments than the method takes
        return None
    if kind is None:  # choice: an item of a constant sequence, all of one plain type
        kinds = {type(item) for item in positional[0] if type(item) in (int, float, str, bool)}
        if len(kinds) != 1 or len(positional[0]) != sum(type(i) in kinds for i in positional[0]):
            return None
        kind = kinds.pop()
    return kind


def _is_draw_function(fn: Any) -> bool:
    try:
        return fn in _DRAWS
    except TypeError:
        return False


def record_draw(tx, call: tuple) -> DrawValue:
    """Record a draw (drawing_call's result) as this trace's next one."""
    draws = tx.output.__dict__.setdefault("python_draws", [])
    method, owner, receiver, (positional, keywords), kind = call
    draws.append((method, owner, receiver, positional, keywords))
    tx.output.side_effects.version += 1  # an effect on outside state (NOTE [Eager generators]: not reordered)
    return DrawValue(len(draws) - 1, kind)


def make_draws(calls: tuple, owners: tuple) -> list:
    """Run the recorded draws, in order, on the generators `owners` read now (called by the transformed
    code)."""
    return [fn(owner, *args, **kwargs) for (fn, args, kwargs), owner in zip(calls, owners)]


def emit_draws(cg, output) -> None:
    """`___python_draws = make_draws(calls, (generators...))` where the trace recorded draws."""
    draws = output.__dict__.get("python_draws")
    if not draws:
        return
    cg.push_null()
    cg.load_const(make_draws)
    cg.load_const(tuple((fn, args, kwargs) for fn, _, _, args, kwargs in draws))
    for _, owner, receiver, _, _ in draws:
        if receiver is not None:  # NOTE [Generators read where the trace read them]
            receiver.reload(cg)
        else:
            cg.load_const(owner)
    cg.build("BUILD_TUPLE", len(draws))
    cg.call(2)
    cg.store_fast(DRAWS_LOCAL)


def has_draws(output) -> bool:
    return bool(output.__dict__.get("python_draws"))


# NOTE [Generator state read after a draw]: a recorded draw is made after the graph, so the trace sees the
# generator's state from before it: `a = rng.gauss(0, 1); g = rng.gauss_next` read None where eager reads the
# cached half of the pair (review revO O1), and `vars(rng)` the old dict. Reading a generator's own data
# (its `__dict__`, or a name in it) after this trace recorded a draw is a graph break: the draws made so far
# are made at the break, then Python reads the state they left. The other order too: a draw from a generator
# whose `__dict__` the trace holds as a value (`d = vars(rng)` carried into a resume function, then
# `d["gauss_next"]` and a draw) is not recorded (_written): the value read from the dict would be rebuilt
# from it after the draw (review revO O1).
def check_state_read(tx, obj: random.Random, name: str) -> None:
    if has_draws(tx.output) and (name == "__dict__" or name in getattr(obj, "__dict__", {})):
        raise Unsupported(BreakKind.SIDE_EFFECT, f"reading {name!r} of a random generator after a draw")
