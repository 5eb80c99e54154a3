"""Facts of a trace that follow the process's string-hash seed.

NOTE [Hash-seeded facts]: CPython salts the hashes of str and bytes (and so of tuples, frozensets and
enum members holding them) with a per-process seed (PYTHONHASHSEED, random by default). Inside one
process the trace reproduces them exactly (NOTE [Set order]: it iterates real sets built by the program's
operations), but a warm process has another seed: `for k in {"a", "b", "c"}` iterates in another order,
`hash("a")` is another number. An entry whose trace observed such a fact (iterated, popped or printed a
set of two or more such elements, or folded `hash()` of one) gets one guard line comparing the hash of a
probe string with its value in the tracing process: true in every later call of this process and in a
process with the same seed, false (a miss, traced anew) in a process salted differently. Before 3.12,
hash(None) is None's address, which differs between processes too: a set holding None gets a guard on
hash(None) the same way.
Constant folding (protocol.constant_fold, FORMAT_VALUE) has no translator at hand: the output being
traced is found on a per-thread stack that Translator.run keeps (`tracing`).
"""
from __future__ import annotations

import contextlib
import enum
import sys
import threading
from typing import Any, Iterable

_PROBE = "framejit hash probe"


def seeds(obj: Any) -> set:
    """What of the process hash(obj) depends on: its string-hash seed (_PROBE), None's address (None)."""
    if isinstance(obj, (str, bytes)):
        return {_PROBE} if obj else set()
    if isinstance(obj, (tuple, frozenset)):
        return set().union(*map(seeds, obj))
    if obj is None:
        return {None} if sys.version_info < (3, 12) else set()
    return {_PROBE} if isinstance(obj, enum.Enum) else set()


_ACTIVE = threading.local()


@contextlib.contextmanager
def tracing(output):
    """Marks `output` as the one being traced in this thread while the block runs."""
    stack = _ACTIVE.__dict__.setdefault("outputs", [])
    stack.append(output)
    try:
        yield
    finally:
        stack.pop()


def note_fold(fn: Any, values: Iterable[Any]) -> None:
    """The trace folds fn(*values) (a builtin, a method bound to a constant, format, ...)."""
    stack = _ACTIVE.__dict__.get("outputs")
    if not stack:
        return
    receiver = getattr(fn, "__self__", None)
    values = list(values)
    if fn is hash and len(values) == 1:
        note_hash(stack[-1], values[0])
    elif getattr(fn, "__name__", None) == "__hash__":
        note_hash(stack[-1], receiver)
    note_constants(stack[-1], [receiver, *values])


def note_hash(output, obj: Any) -> None:
    """The trace folded hash(obj)."""
    for probe in seeds(obj):
        _guard_seed(output, probe)


def note_order(output, elements: Iterable[Any]) -> None:
    """The trace observed the iteration order of a set with these elements."""
    elements = list(elements)
    if len(elements) > 1:
        for probe in set().union(*map(seeds, elements)):
            _guard_seed(output, probe)


def note_constants(output, values: Iterable[Any]) -> None:
    """The trace folded a call on these constants: any set among them shows its order to the call."""
    for v in values:
        if isinstance(v, (set, frozenset)):
            note_order(output, v)
        elif isinstance(v, (tuple, list)):
            note_constants(output, v)
        elif isinstance(v, dict):
            note_constants(output, v.values())


def _guard_seed(output, probe: str | None) -> None:
    guarded = output.__dict__.setdefault("hash_seeds_guarded", set())
    if probe in guarded:
        return
    guarded.add(probe)
    name = output.name_of(hash, "hash")
    what = "the string-hash seed" if probe is not None else "the address of None"
    output.add_guard("GLOBAL_STATE", f"{name}({probe!r}) == {hash(probe)!r}", None,
                     expected=f"{what} of the tracing process", actual=f"{name}({probe!r})")


__all__ = ["note_constants", "note_fold", "note_hash", "note_order", "seeds", "tracing"]
