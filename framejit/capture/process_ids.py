"""What `id(obj)` answers while tracing (capture/stdlib.py `_id`), and when such an entry may be persisted.

NOTE [Ids as keys inside the trace]: an id is a number of this process; the frame cache finds the object again
in a new process by a locator, where its id is another number (NOTE [Ids are per process] in stdlib.py). So an
entry whose trace used the number (`id(m) % 7`, `hex(id(self))`, an id stored into a dict from outside, returned,
or live at a graph break) is kept in memory only. But the common library use never lets the number out: the
`kernels` hub layers (`use_kernelized_func`, on the attention and norm classes of most transformers 5.x models)
fill a dict made in the call with `funcs[id(fn)] = ...` and look it up with `funcs.get(id(self))`; the answers
depend only on which guarded objects are the same, and the identity guards keep that in every process (two
guards on one object share one name, hence one locator). Such entries were kept in memory only, so a warm
process traced llama's, phimoe's and recurrent_gemma's forward again (tools/warm_gaps.py).

`id()` of a guarded object is a ProcessIdValue: a constant whose number marks the trace process-local as soon as
anything reads it (`.value`, `as_constant()`: arithmetic, formatting, comparisons, graph arguments, codegen),
except its use as a key of a dict the trace made (`key_of` with `into` such a dict: hashing and equality,
which follow identity). An element of any set marks it: a set's elements are folded whole by frozenset(), hash()
and str() without being read one by one (review revE E4). Such a key read back as a value (iteration, `list(d)`, `d.keys()`:
`values.mappings.note_key_read`) marks it too, and so does, once the trace is over (`finish`), a container
holding one that the return value or the replay can reach, and any key use in a trace that ended at a graph
break (its containers may live on in the resume function).
"""
from __future__ import annotations

from typing import Any

from .values import ConstantValue, DictValue
from .values.mappings import PROCESS_IDS_LIVE

# `into` for a container being built by the trace (BUILD_MAP, dict(pairs), set displays)
BUILT = object()


def _escape(out, why: str) -> None:
    out.__dict__.setdefault("process_local", why)  # frame_cache._persist refuses it (NOTE [Ids are per process])


class ProcessIdValue(ConstantValue):
    """`id(obj)` of a guarded object: its number, read only through `value` (NOTE [Ids as keys inside the trace])."""

    def __init__(self, number: int, out) -> None:
        self.raw = number
        self.out = out
        self.source = None

    @property
    def value(self) -> int:
        _escape(self.out, "the trace used the number id() returned")
        return self.raw

    def python_type(self) -> type:
        return int

    def describe(self) -> str:
        return "an id() answer"


def new_id(out, number: int) -> ProcessIdValue:
    if PROCESS_IDS_LIVE.get("out") is not out:
        PROCESS_IDS_LIVE.clear()
        PROCESS_IDS_LIVE.update(out=out, ids=set())
    PROCESS_IDS_LIVE["ids"].add(number)
    return ProcessIdValue(number, out)


def _made_in_trace(container: Any) -> bool:
    """A dict the trace made. Not a set: frozenset(), hash(), str() and set operations fold a set's elements
    into a constant without reading them one by one (review revE E4: hash(frozenset({id(A)})) was the cold
    process's number in a warm one)."""
    from .values.outside import OutsideDictValue
    if container is BUILT:
        return True
    return isinstance(container, DictValue) and container.source is None and not isinstance(container, OutsideDictValue)


def key_of(value: ProcessIdValue, into: Any) -> int:
    """The key an id() answer is in `into` (None: a container the caller does not know)."""
    if not _made_in_trace(into):
        return value.value  # a dict or set from outside: its guards and replay would hold the number
    value.out.__dict__["process_id_keys"] = True
    return value.raw


def finish(out, roots: list | None) -> None:
    """Once the trace is over: does a container holding an id() answer as a key outlive it?"""
    if PROCESS_IDS_LIVE.get("out") is not out:
        return
    ids = PROCESS_IDS_LIVE["ids"]
    PROCESS_IDS_LIVE.clear()  # the keys read from now on are framejit's own (codegen)
    if not out.__dict__.get("process_id_keys"):
        return
    if roots is None:
        _escape(out, "the trace ended at a graph break holding id() answers as keys")
        return
    from .modules import _reachable
    written = [c for c, _, _ in out.side_effects._container_writes()]
    for v in _reachable([*roots, *written]):
        if _made_in_trace(v) and any(type(k) is int and k in ids for k in v.items):  # dicts only
            _escape(out, "a container holding id() answers as keys outlives the trace")
            return
