"""What a generator run ahead of its consumer can see (NOTE [Eager generators] in translator.py).

`reachable_values` walks the abstract values a generator is called with (its arguments and closure
cells) through containers, objects made while tracing, bound methods, iterators and closures, and
returns their ids: a mutation of one of them by the consumer could change what the generator yields.
Values read from outside are not followed: mutations of outside state are counted on their own
(`SideEffects.version`).
"""
from __future__ import annotations

from typing import Any

from .breaks import BreakKind, Unsupported
from .values import (BoundMethodValue, CellValue, DictValue, IteratorValue, NewObjectValue, SequenceValue,
                     SetValue, UserFunctionValue, Value)


def closure_cells(fn: Any) -> list[Value]:
    """A function value's cells made while tracing, themselves (NOTE [Cells generators close over])."""
    return [c for c in getattr(fn, "closure", None) or () if isinstance(c, CellValue)]


# NOTE [Cells generators close over]: a generator run ahead of its consumer read its closure's cells when it
# ran, at creation; eager's reads them as it is iterated. A cell rebound (STORE_DEREF) or emptied (DELETE_DEREF)
# between the two (`t = x; g = gen(); t = x * 3; list(g)`) gave the old value (eager: the new one; a `del t`
# lost eager's NameError; review revA F4/F5). The cells themselves are reachable values, and a store into or
# delete of a cell made while tracing marks it touched (SideEffects.bump), so the generator's per-step check
# breaks where it was made and it runs lazily, as Python.
def reachable_values(roots: list[Any]) -> set[int]:
    return set(reachable_value_map(roots))


def reachable_value_map(roots: list[Any]) -> dict[int, Value]:
    """The values reachable from `roots`, by id."""
    seen: dict[int, Value] = {}
    todo = list(roots)
    while todo:
        v = todo.pop()
        if not isinstance(v, Value) or id(v) in seen:
            continue
        seen[id(v)] = v
        if isinstance(v, SequenceValue):
            todo.extend(v.items)
        elif isinstance(v, DictValue):
            todo.extend(v.items.values())
        elif isinstance(v, SetValue):
            continue
        elif isinstance(v, NewObjectValue):
            todo.extend(v.attrs.values())
        elif isinstance(v, BoundMethodValue):
            todo.extend([v.func, v.self_value])
        elif isinstance(v, IteratorValue):
            todo.extend([v.owner] if v.owner is not None else v.items)
        elif isinstance(v, UserFunctionValue):
            todo.extend(closure_cells(v))
            todo.extend(v.defaults or ())
            todo.extend(v.attr_values())
        elif isinstance(v, CellValue):
            todo.append(v.contents)
    return seen


def torch_state(out) -> tuple:
    """The global torch state traced code can change and computations read (NOTE [Torch state across yields]
    in handlers/blocks.py, NOTE [Torch state at each draw])."""
    return (out.grad_enabled, out.inference_mode, tuple(out.autocast_stack), out.__dict__.get("default_dtype"),
            out.__dict__.get("default_device"))


# NOTE [Torch state at each draw]: a generator run ahead of its consumer (NOTE [Eager generators] in translator.py)
# ran its body when it was made, and a lazy combinator (NOTE [Lazy combinators]) called map's function or a lazy
# generator argument's body when it was made, under the torch state of that moment; eager runs them at each draw,
# under the consumer's state. `with torch.no_grad(): g = (x * i for i in r)` then `list(g)` gave tensors without
# grad where eager's require it (review revR HIGH-1; also inference mode, autocast, `torch.set_default_dtype` or a
# `with torch.device(d)` block before `torch.ones(2)` in the body). Such an iterator keeps the state it computed
# under, and its per-step check compares it with the state at each draw (the draw that ends it too: eager runs the
# code after the last yield then): a different state breaks where it was made. A generator function's is first
# traced again lazily (`retry_lazy`: NOTE [Generators driven by send] in lazy_generators.py), its body stepped at
# each draw under the state then in force; a combinator (and a generator whose lazy trace is not taken) runs as
# Python from where it was made. Drawn under the state it was made under, nothing changes: it is captured as
# before.
def drawn_under_other_state(out, made: tuple, what: str, made_at: int | None) -> Unsupported | None:
    """The break for an iterator computed under torch state `made` drawn now (NOTE [Torch state at each
    draw]), or None when the state is the same."""
    if torch_state(out) == made:
        return None
    e = Unsupported(BreakKind.SIDE_EFFECT, f"{what} is drawn under other torch state (grad mode, inference mode, "
                    "autocast, default dtype or device) than it computed its items under: it runs lazily")
    e.root_index = made_at  # break where it was made
    return e


def run_ahead_effects(out) -> tuple[int, int]:
    """What a generator's run ahead is checked not to have done (see check_run_ahead_effects)."""
    return out.__dict__.get("effects_recorded", 0), out.__dict__.get("random_draws", 0)


# NOTE [Random draws of run-ahead generators]: a generator run ahead of its consumer (NOTE [Eager generators] in
# translator.py) that draws from torch's random generator (`torch.rand`, a training dropout: every op
# requests.draws_random counts, OutputGraph.random_draws) drew all its numbers when made; eager draws each
# item's at its draw. The consumer's own draws in between (`g = (torch.rand(2) for _ in r); a = torch.rand(2);
# list(g)`), or items never drawn (`next(g)` then `torch.rand(2)`), gave other numbers than eager's. Such a
# generator is traced again lazily, stepped at each draw (NOTE [Generators driven by send] in
# lazy_generators.py), so its draws and the consumer's interleave as in eager; when that retrace is not taken
# it is a break at the call that made it. A lazy combinator whose function (or lazy generator argument) drew
# random numbers when it was made breaks where it was made when any other draw happened before one of its steps
# (lazy_combinators.Watch): it then runs as Python. Known gap: such a combinator left partly drawn, followed by
# other random draws and no further step of it (`m = map(drop, xs); a = next(m); b = torch.rand(2)`), still
# drew the items eager never draws.
def check_run_ahead_effects(out, before: tuple[int, int], f: Any, frame_eager: bool) -> None:
    from .lazy_generators import lazy_from_now
    effects, draws = run_ahead_effects(out)
    if effects != before[0]:  # its grad-mode sets run where eager runs them
        raise lazy_from_now(Unsupported(BreakKind.SIDE_EFFECT, f"the generator {f.__qualname__} sets torch state: "
                                        "it runs lazily"), f.__code__)
    if draws != before[1]:
        e = Unsupported(BreakKind.SIDE_EFFECT, f"the generator {f.__qualname__} draws random numbers: it runs lazily")
        e.retry_lazy, e.frame_eager = f.__code__, frame_eager
        raise lazy_from_now(e, f.__code__) if frame_eager else e


__all__ = ["check_run_ahead_effects", "closure_cells", "drawn_under_other_state", "reachable_value_map",
           "reachable_values", "run_ahead_effects", "torch_state"]
