"""Which loops over known items run as Python when their body breaks on data (NOTE [Data breaks on every step]).

NOTE [Data breaks on every step]: a loop over a few known items whose body breaks on data in every step, as an
adapter or expert router does (HF xmod: `for i, key in enumerate(self.adapter_modules.keys()): mask = ids == i;
h = hidden[mask]; new[mask] = self.adapter_modules[key](h)`), was unrolled: the body's resume function got
the loop's enumerate object, stepped it in Python (NOTE [Iterators stepped as Python]) and recompiled for
each key it read (`self.adapter_modules[key]`), so each step cost two or three graphs, again for every new
size (19 graphs over 3 calls for a 2-layer xmod where stock torch.compile makes 12; 5 per call where stock
makes none for /tmp/hhuntHF3/xmod_min.py). Stock runs such a frame eagerly (a break inside a loop skips the
frame) and captures the frames its calls enter. framejit now runs such a loop as Python as it runs a loop over
a tensor's rows (NOTE [Loops run as Python] in python_loops.py: the rest of the frame stays captured, the
body's calls go through their frame hooks) when
- the break is an op whose result's shape depends on the data (a boolean mask index, nonzero, unique:
  `shaped_by_data`, NOTE [Results shaped by data are dynamic in resume functions]); a branch on a tensor's
  value keeps the unrolled form, whose graphs hold the body's ops;
- it is taken in the frame itself, not inside a call the frame inlined: a break deep in a layer's callee must
  not turn the model's loop over its layers into Python (every layer would run uncaptured, where the
  callee's own frame breaks only around its op);
- the break instruction is reached on every step: no jump between the body's start and the break skips it
  or leaves the body (`if i == 0: idx = t.nonzero()` keeps the unrolled form: it breaks once and the rest
  of the loop is captured);
- the loop's iterable is a known, non-empty sequence of items (a list, tuple, range, or an iterator over
  fixed items such as `enumerate(d.keys())` that a break can rebuild: NOTE [Combinators rebuilt at breaks]).
This is a choice of fewer graphs over more captured ops: the ops written in the loop's body itself run
eagerly (as stock runs them), only its calls are captured.

NOTE [Rows of rebuilt combinators]: a loop over rows holding tensors (NOTE [Rows zipped and enumerated] in
python_loops.py) runs as Python on any data break in its body, but `enumerate(...)` or `zip(...)` of lists made
by the trace carries `made_at` (the lazy combinator's call: NOTE [Combinators rebuilt at breaks]), which
iterates_rows refused as if it were a generator's iterator. HF vilt's `for i, (v, nv, p) in
enumerate(zip(valid_nums, non_valid_nums, pad_nums))` (p a tensor, a multinomial in either arm of `if p <= 0`)
was stepped instead, its resume functions per step: 13 graphs on the first call where stock makes 10. A
combinator a break can rebuild (`lazy` set) is accepted now (10 graphs), for a break of an op that needs the
data (multinomial, nonzero, a mask index: `carried_loops.data_break`), not a branch on a tensor's value, which
keeps the stepped form whose graphs hold the body's ops.
"""
from __future__ import annotations

from typing import Any

from .breaks import BreakKind

_JUMPS = frozenset({"JUMP", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE",
                    "JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP", "FOR_ITER", "SEND"})


def loop_runs_as_python(code: Any, site: Any, stack: list, moved_from: Any) -> bool:
    """At the break moved from `moved_from` to `site` (before the loop `site.loop`, a canonical FOR_ITER of
    `code`), the loop runs as Python: over a tensor's rows (python_loops.iterates_rows_at) or by the rules of
    NOTE [Data breaks on every step]."""
    from .python_loops import iterates_rows_at
    return iterates_rows_at(stack, site.inst, moved_from) or _every_step(code, site, stack, moved_from) or \
        _rebuilt_rows(site, stack, moved_from)


def _rebuilt_rows(site: Any, stack: list, moved_from: Any) -> bool:
    """NOTE [Rows of rebuilt combinators]: at the GET_ITER of an enumerate or zip a break can rebuild, over rows
    holding tensors, for a break of an op that needs the data."""
    from .python_loops import _row_item
    from .values import IteratorValue
    if "shaped_by_data" not in moved_from.__dict__ or site.inst.name != "GET_ITER" or not stack:
        return False  # set by carried_loops.data_break only: an op's fake run needed the data
    value = stack[-1]
    return isinstance(value, IteratorValue) and value.owner is None and value.made_at is not None and \
        _rebuilt(value) and bool(value.items) and all(_row_item(i) for i in value.items)


def _every_step(code: Any, site: Any, stack: list, moved_from: Any) -> bool:
    if getattr(moved_from, "kind", None) is not BreakKind.DATA_DEPENDENT or not stack or site.inst.name != "GET_ITER":
        return False
    if not getattr(moved_from, "shaped_by_data", False) or moved_from.root_index is None or \
            len(moved_from.__dict__.get("nest_path") or ()) > 1:
        return False
    return _known_items(stack[-1]) and _reached_every_step(code, site.loop, moved_from.root_index)


def _reached_every_step(code: Any, loop: Any, at: int) -> bool:
    """No instruction of the body before `at` jumps past `at` or out of the body."""
    from .normalize import normalize
    insts = normalize(code).insts
    if not loop.index < at < loop.arg:
        return False
    for inst in insts[loop.index + 1:at]:
        if inst.name in _JUMPS and not (isinstance(inst.arg, int) and loop.index < inst.arg <= at):
            return False
        if inst.name in ("RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"):
            return False
    return True


def _known_items(value: Any) -> bool:
    """`value` is a non-empty list, tuple or range, or an iterator over fixed items a break can rebuild."""
    from .values import ConstantValue, IteratorValue, SequenceValue
    if isinstance(value, IteratorValue):
        return value.owner is None and bool(value.items) and value.index == 0 and \
            (value.made_at is None or _rebuilt(value))
    if isinstance(value, SequenceValue):
        return value.python_type() in (list, tuple) and bool(value.items)
    return isinstance(value, ConstantValue) and type(value.value) in (tuple, range) and len(value.value) > 0


def _rebuilt(value: Any) -> bool:
    """NOTE [Rebuilt before the backend]: the combinator `value` (made in the trace) and the arguments it drew
    from can be rebuilt after the graph before the loop. The break code loads each argument as an object of its
    own before the combinator (codegen's children), and an iterator a combinator drew from (`lent_at`, NOTE
    [Lent iterators]) cannot be: `zip(reversed(range(3)), ws)` was accepted, the graph before the loop went to
    the backend, and only then did building the break code fail and fall back to the unrolled form, one graph
    compiled and thrown away per new input size (review revAD MED-1: 15 graphs over 5 calls, not 13)."""
    from .lazy_combinators import rebuild_spec, spec_children
    from .values import IteratorValue
    if rebuild_spec(value) is None:
        return False
    for child in spec_children(value):
        if isinstance(child, IteratorValue) and (
                child.lent_at is not None if child.made_at is None else not _rebuilt(child)):
            return False
    return True
