"""Iterators stepped ahead of eager by a run-ahead generator or a combinator, and the reads that would tell.

NOTE [Iterators claimed by a run ahead]: a generator run ahead of its consumer (NOTE [Eager generators] in
translator.py) steps every iterator its body iterates at its call, and a combinator evaluated when it is made
(NOTE [Lent iterators], [Lazy generators drawn ahead]) steps those its lazy generator arguments iterate; eager
steps them only as the consumer draws. The two agree only while nothing else steps or reads such an iterator
before the consumer has drawn the generator to its end. An iterator the frame holds too broke that silently
(revAQ HIGH-4: `it = iter(range(6)); g2 = (-v for v in it); list(v + next(g2) for v in it)` gave [] where eager
gives [-1, -1, -1], and with range(5) no PEP 479 RuntimeError; `g = (v for v in it); next(g); list(it)` gave []
where eager gives the rest; HIGH-5: `zip(range(2), gen([it]))` then `list(it)`). Each iterator stepped by such a
run is `claimed` by it (`collect_steps`, `claim`): a later step of it (IteratorValue.next/remaining, a lazy
generator's resume) or a read of its position (returned, live at a break: codegen, side_effects' moves of
outside iterators) while the claim is live is a break:
- a generator's claim is live until the generator was drawn to its end in order (a step that found it ended,
  or a whole drain: list(), tuple(), `[*g]`) and lent to no combinator; an end reached inside another run
  ahead (`h` drained by `g = (v * 2 for v in h)` run at its call) is ahead of eager too and does not count
  (`mark_ended_in_order`; revBB HIGH-1: `next(g); list(it)` gave [] where eager gives [2, 3]); the break carries `retry_lazy` (the
  frame is traced again with that generator lazy, its body stepped in the consumer's order) and lands where
  it was made when that retry is not taken;
- a combinator's claim (and a lazy generator's drawn at once by a consumer that may stop early: any(), all(),
  min/max with key=, sum) is never over: the break lands where it was made, which then runs as Python.
NOTE [Combinators drawn to their end]: a generator lent to a combinator (NOTE [Lent iterators]) kept its claim
for good, so `for i, v in enumerate(v * 2 for v in it): ...` followed by `list(it)`, or by any break while `it`
is a live local (its position is read), broke where the enumerate was made and stepped the loop as Python (revBB
MED-2: 2 -> 4 graphs over 3 calls). An enumerate drawn to its end in order (a for loop or next() that found it
ended, list()/tuple()) means eager's enumerate drew its argument to its end, so that argument ended in order too
(`ends_with`, `ended_by_lender`; through combinators of combinators as well); for zip it is the first argument
in order whose column is the shortest (CPython's zip stops at the first argument that ends; the arguments
after it are not drawn again, those before it were drawn once more and have not ended). sum(), and any()/all()
that found nothing to stop at, draw their argument to its end in order as well (builtins._drawn_whole; an error
midway leaves the claim).
Iterators only the run itself reaches (a genexpr's own list iterator, those its body makes) are claimed as well
and never read elsewhere, so ordinary generators stay in one graph.
"""
from __future__ import annotations

import contextlib
from typing import Any

_COLLECTING: list[dict] = []  # id -> iterator stepped under each open collect_steps, innermost last


class Claim:
    """A run ahead that stepped an iterator: `holder` (a generator's iterator, or None: never over), the root
    instruction to break at, and the generator code to retry lazily."""

    def __init__(self, holder: Any, root_index: int | None, retry: Any = None, frame_eager: bool = False) -> None:
        self.holder, self.root_index, self.retry, self.frame_eager = holder, root_index, retry, frame_eager

    def live(self) -> bool:
        h = self.holder
        return h is None or not (h.exhausted and h.__dict__.get("ended_in_order") and
                                 (h.lent_at is None or h.__dict__.get("ended_by_lender")))

    def error(self, iterator: Any) -> Any:
        from ..breaks import BreakKind, Unsupported
        e = Unsupported(BreakKind.SIDE_EFFECT, f"{iterator.describe()} was stepped ahead of eager by a generator or "
                        "combinator run when made, and is stepped or read elsewhere before that one was drawn to "
                        "its end: it runs lazily")
        e.root_index = self.root_index
        if self.retry is not None:
            e.retry_lazy = self.retry
            e.frame_eager = self.frame_eager
        return e


def note_claimed_step(iterator: Any) -> None:
    """`iterator` is stepped: seen by the open collections; a live claim on it is a break."""
    for stepped in _COLLECTING:
        stepped[id(iterator)] = iterator
    check_claims(iterator)


def mark_ended_in_order(iterator: Any) -> None:
    """`iterator` was drawn to its end in order: its claims end, unless a run ahead drew it (that is ahead of eager)."""
    if not _COLLECTING:
        _ended(iterator)


def _ended(iterator: Any) -> None:
    iterator.ended_in_order = True
    for inner in iterator.__dict__.get("ends_with", ()):  # NOTE [Combinators drawn to their end]
        inner.ended_by_lender = True
        _ended(inner)


def ends_with(result: Any, iterables: list, columns: list | None = None) -> Any:
    """NOTE [Combinators drawn to their end]: the argument whose end the end of combinator `result` means, drawn in
    eager's order: enumerate's (`columns` None), zip's first argument in order among the shortest."""
    if columns is not None and columns:
        shortest = min(len(c) for c in columns)
        iterables = [next(v for v, c in zip(iterables, columns) if len(c) == shortest)]
    result.ends_with = [v for v in iterables[:1] if hasattr(v, "exhausted")]
    return result


def check_claims(iterator: Any) -> None:
    """A read of `iterator`'s position (or a step of it): a live claim is a break."""
    for claim_ in iterator.__dict__.get("claims", ()):
        if claim_.live():
            raise claim_.error(iterator)


@contextlib.contextmanager
def collecting():
    """The iterators stepped within the block, by id (filled as they are stepped)."""
    stepped: dict = {}
    _COLLECTING.append(stepped)
    try:
        yield stepped
    finally:
        del _COLLECTING[next(i for i, c in enumerate(_COLLECTING) if c is stepped)]  # by identity: dicts compare equal


def collect_steps(run: Any) -> tuple[Any, list]:
    """`run()`, and the iterators stepped while it ran."""
    with collecting() as stepped:
        return run(), list(stepped.values())


def claim(stepped: list, new: Claim) -> None:
    for iterator in stepped:
        if iterator is not new.holder:
            iterator.__dict__.setdefault("claims", []).append(new)


def root_index(tx: Any) -> int | None:
    """The root frame's instruction now (where a run ahead or combinator made now breaks)."""
    while tx.parent is not None:
        tx = tx.parent
    return tx.current.index if tx.current is not None else None


def claimed(iterator: Any) -> bool:
    return any(c.live() for c in iterator.__dict__.get("claims", ()))


__all__ = ["Claim", "check_claims", "claim", "claimed", "collect_steps", "collecting", "ends_with", "note_claimed_step",
           "root_index"]
