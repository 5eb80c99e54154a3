"""Computed floats rebuilt in Python whose operations raise at run time (NOTE [Rebuilt floats that raise]).

NOTE [Rebuilt floats that raise] (hhuntG4 HIGH-1): a computed float rebuilt in Python (NOTE [Computed floats
rebuilt in Python] in codegen.py) is preloaded at the top of the transformed function, before the frame's side
effects and outside the user's try blocks. Its operations can raise for a later value (`1.0 / v` at v = 0.0,
`math.log(v)` at 0.0, `math.exp(v * 1000)`, `2.5 % v`) where the traced value did not: the exception reached
the caller, the user's `except` never ran (the "safe division" idiom `try: r = 1.0 / v except
ZeroDivisionError: r = 0.0` raised) and the effects before it in the code (`d["k"] = v`) were lost. The
same float ops are also (dead) nodes of the frame's graph, which raised first where the graph ran first, and
whose rerun is refused when it changed an input in place or drew from torch's generator (`x.add_(1)`,
review revAF HIGH): the preloads now come before the graph call (`floats_then_draws`; they read only the
frame's unchanged inputs), so they raise first. Such a preload runs before anything with an effect,
so it is treated as a graph call that raised: the call reruns eagerly, where the user's own code raises
and handles the exception exactly as eager does. Capture is unchanged for every value that does not raise
(no new graph, no break), and a raising value reruns that call only: the entry stays, nothing recompiles.

Which preloads qualify (`clean_spans`): each one's instructions are recorded by the Reconstructor (the
float's input reloads, its operations, the store into its local: `Codegen.float_spans`), and one counts
only while every instruction before it in the body (after the prologue of reads, NOTE [Referents loaded
once, at entry]) is a load, a local store, a tuple or list build, or another such preload. A graph call, a
draw of the random module, a replayed effect, a try block: the preloads after it keep raising as before
(the floats are preloaded before the graph call and the draws, `floats_then_draws`: they read neither).
The byte offsets of the qualifying preloads are kept per code object, as the graph call's are (NOTE [Graph
call span] in codegen.py), and persisted with break code (persisted_code.py), so a warm process's entry
reruns too.
"""
from __future__ import annotations

import types
import weakref
from typing import Any

import bytecode
from bytecode import Instr

from .. import logs

# instructions that have no effect a rerun would repeat: they read (a source's attribute or item, as the
# graph inputs' reloads before a graph call do), build a tuple or list, or store into a local
_NO_EFFECT = frozenset((
    "RESUME", "NOP", "CACHE", "LOAD_CONST", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_GLOBAL",
    "LOAD_DEREF", "LOAD_CLOSURE", "LOAD_ATTR", "LOAD_METHOD", "BINARY_SUBSCR", "STORE_FAST", "STORE_FAST_LOAD_FAST",
    "STORE_FAST_STORE_FAST", "BUILD_TUPLE", "BUILD_LIST", "PUSH_NULL", "COPY", "SWAP", "POP_TOP", "COPY_FREE_VARS",
    "MAKE_CELL"))

_SPANS: dict[int, list[tuple[int, int]]] = {}  # id(code) -> byte offsets [start, end) of its qualifying preloads


def clean_spans(cg: Any, params: tuple = ()) -> list[tuple[Instr, Instr]]:
    """The (first, last) instruction pairs of `cg.float_spans` that only effect-free instructions precede
    in `cg.insts` (NOTE [Rebuilt floats that raise]), none of them storing into one of `params` (a rerun of a
    handed call reads the arguments back from the frame: NOTE [Arguments handed to resume functions])."""
    spans = getattr(cg, "float_spans", ())
    if not spans:
        return []
    starts = {id(first): (first, last) for first, last in spans}
    clean: list[tuple[Instr, Instr]] = []
    inside = None
    for inst in cg.insts:
        if inside is None and id(inst) in starts:
            inside = starts[id(inst)]
        if inside is not None:
            if inst is inside[1]:
                clean.append(inside)
                inside = None
            continue
        if not (isinstance(inst, bytecode.SetLineno) or isinstance(inst, Instr) and inst.name in _NO_EFFECT):
            break
        if isinstance(inst, Instr) and inst.name.startswith("STORE_FAST") and \
                not set(inst.arg if isinstance(inst.arg, tuple) else (inst.arg,)).isdisjoint(params):
            break
    return clean


def byte_spans(bc: bytecode.Bytecode, concrete: bytecode.ConcreteBytecode, pairs: list) -> list:
    """The byte offsets [first's start, the instruction after last) of each (first, last) pair of `bc`'s
    instructions in its assembled form `concrete` (None for a pair not found): the concrete list holds one
    instruction per abstract one, in order, plus CACHE entries after some, and a traceback's tb_lasti may
    point into an instruction's inline caches."""
    ordinal = {id(inst): k for k, inst in enumerate(i for i in bc if isinstance(i, Instr))}
    starts, offset = [], 0
    for instr in concrete:
        if not isinstance(instr, bytecode.ConcreteInstr):
            continue
        if instr.name != "CACHE":
            starts.append(offset)
        offset += instr.size
    starts.append(offset)
    return [(starts[ordinal[id(first)]], starts[ordinal[id(last)] + 1])
            if id(first) in ordinal and id(last) in ordinal else None for first, last in pairs]


def note_spans(code: types.CodeType, spans: list) -> None:
    spans = [span for span in spans if span is not None]
    if spans:
        _SPANS[id(code)] = spans
        weakref.finalize(code, _SPANS.pop, id(code), None)


def preload_frame(exc: BaseException, code: types.CodeType) -> types.FrameType | None:
    """The frame of `code` (a transformed function) in `exc`'s traceback when a qualifying preload of it
    raised `exc` (NOTE [Rebuilt floats that raise])."""
    spans = _SPANS.get(id(code))
    if not spans:
        return None
    from ..signal_handlers import from_signal_handler
    if from_signal_handler(exc):
        return None
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    return tb.tb_frame if tb is not None and any(start <= tb.tb_lasti < end for start, end in spans) else None


def rebuilt_float_raised(exc: BaseException, code: types.CodeType, name: str) -> bool:
    """`exc` was raised by a qualifying preload of `code`: the call reruns eagerly, logged."""
    if preload_frame(exc, code) is None:
        return False
    logs.log("eager_fallback", "a float %s rebuilds in Python raised (%s: %.300s); this call reruns eagerly, so the "
             "exception is raised (and handled) by the function's own code", name, type(exc).__name__, exc)
    return True


__all__ = ["byte_spans", "clean_spans", "note_spans", "preload_frame", "rebuilt_float_raised"]


def floats_then_draws(rebuild: Any, values: list, output: Any, sourced: bool = True, graph: Any = None) -> None:
    """Preload the replayable rebuilt floats reachable from `values`, then call the graph (`graph`: the
    compiled graph and its inputs, or None), then emit the random module's draws (NOTE [Draws from the random
    module]). A draw is an effect: a float preloaded after it never reran, so `r = random.random(); ...;
    1.0 / v` at v = 0.0 raised to the caller with the effects before it lost. So is a graph that changes an
    input in place or draws from torch's generator (`x.add_(1)`, `torch.rand(1)`): its graph-failure rerun
    is refused, and the float, also a (dead) node of the graph, raised there to the caller. The floats read
    only their sourced roots (unchanged by the frame: `float_inputs_unchanged`), never a draw or a graph
    output, so they go first, raise before any effect and stay clean spans."""
    from .codegen import _children, _replayable_float
    from .python_draws import emit_draws
    from .values import Value
    from .values.scalars import SymFloatValue
    seen: set[int] = set()
    pending = list(reversed(values))
    while pending:
        value = pending.pop()
        if id(value) in seen or not isinstance(value, Value):
            continue
        seen.add(id(value))
        if isinstance(value, SymFloatValue) and _replayable_float(value):
            rebuild.preload([value], sourced)
        elif value.source is None:
            pending.extend(reversed(_children(value)))
    if graph is not None and graph[0] is not None:
        rebuild.cg.call_graph(graph[0], [inp.source for inp in graph[1]])
    emit_draws(rebuild.cg, output)
