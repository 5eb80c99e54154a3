"""For loops over a tensor's rows whose body breaks on data: the whole loop runs as Python.

NOTE [Loops run as Python]: an MoE expert loop (`for e in mask.nonzero(): idx, top = torch.where(mask[e]);
out = self[f"expert_{e[0]}"](x[top]) ...`) breaks inside its body on every step (nonzero/where need the
data, the f-string formats a tensor). Unrolled, or stepped with its body as resume functions (NOTE [Loops
carried across breaks]), every piece between two breaks became a graph compiled again for each expert,
row count and layout: 38 graphs for HF switch_transformers where stock torch.compile makes 20. Stock runs
such a loop eagerly (a break inside a loop skips the frame) and captures only the frames its calls enter.
framejit does the same, but keeps the rest of the frame captured: when a DATA_DEPENDENT break happens
inside a for loop over the rows of a tensor, the break moves to the loop's GET_ITER (or FOR_ITER, or the
resume point of a resume function that starts inside the body), and from there the code runs in a plain
"tail" function (NOTE [Breaks inside try blocks] in graph_break.py) in which
- every call inside the loop whose callable can be told from the bytecode calls `route(callable)`'s answer
  instead (NOTE [Callees routed in loops run as Python]): a module with a forward of its own or a torch.nn
  layer (NOTE [torch.nn layers routed]) and no hooks runs `type(m).forward` through its frame hook, a function or method outside torch and the
  standard library through its hook (Hooks.call_through_hook), so those callees are captured as frames,
  as stock captures them;
- the loop's exit edge goes to a trampoline that calls the hooked resume function after the loop, so the
  code after the loop is captured again.
A call whose callable slot cannot be traced back within its basic block (a NULL or self pushed by another
instruction, a jump in between) stays a plain call: correct, only not captured. Breaks of other kinds in
loops keep the unrolled/stepped forms (a `print` at `i == 0` breaks once), except in loops over a symbolic
range (NOTE [Loops over symbolic ranges]).
"""
from __future__ import annotations

import functools
import sysconfig
import types
from typing import Any

from bytecode import Instr, Label

from . import emit, normalize
from .lookup import is_module_default
from .block_loops import (_READS, _WRITES, bound_after_loop, ends_torch_blocks, loop_handlers_allowed,
                          unbound_after_loop, with_exit)


def enclosing_loop(insts: list, index: int):
    """The innermost canonical FOR_ITER whose body holds instruction `index`, or None."""
    best = None
    for inst in insts[:index]:
        if inst.name == "FOR_ITER" and isinstance(inst.arg, int) and inst.index < index < inst.arg:
            best = inst
    return best


# NOTE [Loops over symbolic ranges]: `for i in range(1, x.size(0))` whose body breaks on data, traced with a
# symbolic size: unrolled, the range specialises the size (`x.size(0) == 5`), so the frame that owns the loop
# recompiled for every size until the recompile limit sent it to eager (stock runs it eagerly from the
# start). Such a loop runs as Python too: the break moves to its GET_ITER, the range is rebuilt there from
# its symbolic bounds (graph outputs, codegen.py), and the owner frame keeps serving every size. The same
# for a break of any other kind in the body (a `print(i)`, an unsupported call): its stepped form (NOTE
# [Loops carried across breaks]) unrolled the range in the owner frame, which then recompiled per size too.
# Only in frames with symbolic sizes or ints (no symbolic range otherwise), and only at GET_ITER on a
# symbolic range: other loops keep the unrolled/stepped forms for such breaks (module docstring).
# A loop over a symbolic range whose body does not break runs as Python too (`symbolic_range_loop`: a
# DYNAMIC_CONTROL_FLOW break at its GET_ITER): unrolled, it specialised the length as well, so
# `for i in range(x.size(0))`, `for i in range(n)` over an int argument, a manual RNN over time steps or
# a loop over a variable count of layers compiled once per length until the recompile limit (stock
# torch.compile: the same, then the whole frame eagerly). Now the owner frame compiles once for every
# length (plus 0/1 where they specialise, or where the env folds the length to a number: those unroll),
# the body runs as Python with its calls through their frame hooks (a layer's forward is captured once for
# every step), and the code after the loop is captured again. Not taken with fullgraph=True (unrolled and
# specialised, as stock does), in generators, or for a loop in a try or with block. A list, set or dict
# comprehension's iterator has its own form (NOTE [Comprehensions over symbolic ranges]), and so has a generator
# expression's passed straight to a builtin consumer (NOTE [Generator expressions over symbolic ranges]).
def iterates_rows(value: Any) -> bool:
    """A loop iterator over the rows of a tensor: an unrolled iterator whose items are tensors taken
    from one tensor, or a tensor's tuple iterator made in Python (NOTE [Loops over symbolic rows]); or a
    range with a symbolic bound (NOTE [Loops over symbolic ranges])."""
    from .carried_loops import CarriedIteratorValue
    from .sym_arith import SymRangeValue
    from .values import IteratorValue, TensorValue
    if isinstance(value, SymRangeValue):
        return True
    if isinstance(value, CarriedIteratorValue):  # NOTE [Loops breaking on every step]
        return type(value.obj) in (type(iter(())), type(iter([])), list)
    if isinstance(value, IteratorValue):
        return value.owner is None and value.made_at is None and bool(value.items) and \
            all(_row_item(i) for i in value.items)
    return isinstance(value, TensorValue) and value.fake.dim() > 0


# NOTE [Loops breaking on every step]: a per-image loop of a vision-language model (`for i in range(n):
# out.append(helper(feats[i], sizes[i]))` with a `.tolist()` in the helper; a loop over a list of rows) breaks
# on data in every step. Its iterator is a list (iterator) passed to the body's resume function, which read it
# and guarded its position: one entry per loop position (2-3 per image loop, below LOOP_POSITIONS, so never
# stepped as Python; NOTE [Loops carried across breaks]) and each again for every new size, where stock runs
# the loop as Python. A resume function that starts inside the body and breaks on data again before it leaves
# the loop (the next step's break, or a second one in the same step) now runs the rest of the loop as Python
# from its resume point, as a loop over rows does: its trace stops before reading the iterator (no guard on
# it), so one entry serves every position and length, and the body's calls are captured as their frames. A
# break taken once (`if i == 0: n = t.item()`) does not reach this: the resume function unrolls the rest as
# before; the owner frame still traces the first step (a loop over a constant range or list is not known to
# break again there).


# NOTE [Rows zipped and enumerated]: `for i, (emb, dur) in enumerate(zip(embeddings, durations))` (HF
# FastSpeech2's length regulator, DETR-style per-image loops) steps over the rows of tensors as tuples of
# rows and step numbers. Such a loop whose body breaks on data runs as Python as a loop over one tensor's
# rows does; stepped instead, its resume functions recompiled for each step number and row length, then
# ran as Python anyway (/tmp/h11s5/min/lr.py: 5/8/15 graphs over 3 calls where stock makes 2/2/4).
def _row_item(item: Any) -> bool:
    """An item of a loop over rows: a tensor, or a (nested) tuple of tensors and ints holding a tensor."""
    from .values import ConstantValue, TensorValue, TupleValue
    if isinstance(item, TensorValue):
        return True
    if not isinstance(item, TupleValue) or not item.items:
        return False
    leaves = [i for i in item.items if not (isinstance(i, ConstantValue) and type(i.value) is int)]
    return bool(leaves) and all(_row_item(i) for i in leaves)


# NOTE [Locals first bound in a loop run as Python]: the trampoline at the exit of a loop run as Python
# passes the resume function after the loop the locals that were bound where the break was taken (the
# loop's GET_ITER). A local first bound inside the body (the loop variable `i`, `last = y`) was not passed,
# so code after the loop that read it raised UnboundLocalError where eager returns its value (and one the
# body deletes would fail in the trampoline). Such a loop does not run as Python: `body_binds_locals_read_
# after` finds, conservatively, a name the body stores or deletes that was not bound at the break and that
# an instruction outside the body reads (a plain read of the loop variable after `for i in range(n)`).
# A fast local the body stores is refused only where it is live where control leaves the loop (some path from
# there reads it before storing it: local_liveness.live_after): `for k in d: ...` then `for k in d: ...`
# reuses the name, and the second loop stores `k` before any read, so the first one runs as Python too (it
# stepped per key before, 16 traces and the recompile limit: review revX F6). Such a dead local reaches the
# resume function after the loop as the body left it, or as `Unbound` (NOTE [Resume functions take the same
# locals on every pass] in local_liveness.py), and is never read there before it is stored.
def body_binds_locals_read_after(code: types.CodeType, loop: Any, bound: Any) -> bool:
    """The body of `loop` (a canonical FOR_ITER of `code`) stores or deletes a local that is not in `bound`
    (or deletes one), and an instruction outside the body reads it (NOTE above)."""
    from .normalize import normalize
    from .sources import safe_local
    insts = normalize(code).insts
    end = loop_exit(loop, insts)  # NOTE [Loops run as Python at the end of a with-block]: up to the blocks' exit
    inside = [i for i in insts if loop.index < i.index < end]
    written = {str(i.arg) for i in inside if i.name in _WRITES and (i.name.startswith("DELETE") or
                                                                       str(i.arg) not in bound)}
    written -= {n for n in written if safe_local(n) in bound_after_loop(insts, loop)}  # NOTE [Locals bound after a
    # loop inside its with-block]
    written -= {n for n in written if safe_local(n) in unbound_after_loop(code, loop)}  # NOTE [Locals a loop run
    # as Python may leave unbound]
    if not written:
        return False
    read = {str(i.arg) for i in insts if not loop.index < i.index < end and i.name in _READS}
    stored = {str(i.arg) for i in inside if i.name == "STORE_FAST"} - {
        str(i.arg) for i in inside if i.name != "STORE_FAST" and i.name in _WRITES}
    if not (written - stored) & read and (written & read):  # only fast locals stored in the body are read
        from .local_liveness import live_after
        live = live_after(code, loop.index, end)
        return live is None or bool(written & read & live)
    return bool(written & read)


def symbolic_range_loop(tx, inst: Any, iterable: Any) -> Any:
    """At GET_ITER (`inst`): the break that runs a for loop over `iterable` as Python, when it is a range
    whose length is symbolic (NOTE [Loops over symbolic ranges]), else None (the loop unrolls)."""
    import inspect
    from .breaks import BreakKind, Unsupported
    from .normalize import normalize
    from .sym_arith import SymRangeValue, symbolic_length
    if not isinstance(iterable, SymRangeValue) or getattr(tx.output, "fullgraph", False) or \
            tx.code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        return None
    insts = normalize(tx.code).insts
    loop = insts[inst.index + 1] if inst.index + 1 < len(insts) else None
    comp = _comprehension_over(tx, inst, loop, iterable)  # NOTE [Comprehensions over symbolic ranges]
    if comp is not None:
        return _comprehension_break(tx, inst, loop, comp, f"a comprehension over {iterable.describe()}, whose "
                                    "length is symbolic: it runs as Python instead of unrolling (NOTE "
                                    "[Comprehensions over symbolic ranges])")
    if loop is None or loop.name != "FOR_ITER" or not loop_handlers_allowed(tx, insts, inst, loop) or \
            not symbolic_length(tx, iterable) or body_binds_locals_read_after(tx.code, loop, tx.locals):
        return None  # a generator expression's iterator (passed to its function), another comprehension's,
        # a loop inside a try or with block, a length the env knows, or a local first bound in the body and
        # read after it (NOTE [Locals first bound in a loop run as Python]): unrolled as before
    exc = Unsupported(BreakKind.DYNAMIC_CONTROL_FLOW, f"a for loop over {iterable.describe()}, whose length is "
                      "symbolic: it runs as Python instead of unrolling, which would specialise the length "
                      "(NOTE [Loops over symbolic ranges])")
    if tx.parent is None:  # in an inlined callee, the root frame breaks at the call (its own frame then loops)
        exc.root_index, exc.range_loop = inst.index, loop.index
    return exc


# NOTE [Loops over sequences of changing length]: `d = {i: i * i for i in range(x.size(0))}; for k in d: out =
# out + d[k]`: the dict is opaque in the resume function after the comprehension (NOTE [Dict and set results of
# changing size] in carried_loops.py), so the loop's GET_ITER broke and the loop stepped in Python (NOTE
# [Iterators stepped as Python]) with its body as a resume function taking the key: `d[k]` specialised the
# key, so that function compiled once per key (11 traces over 10 sizes, hdyn4's d_iter; a list or the
# `.items()` of such a dict the same, until the recompile limit ran it eagerly). Such a loop over an opaque
# sequence (a list, tuple, dict or set of changing length) now runs as Python like a loop over a symbolic
# range: the break at its GET_ITER becomes the loop's, the tail function runs the loop with its calls routed
# through their frame hooks, and the code after it is a resume function again. Same conditions as there: the
# root frame, no try or with block around the loop, not a generator, not fullgraph, no local first bound in
# the body read after it; otherwise the loop steps as before.
def opaque_sequence_loop(tx, inst: Any, exc: Any) -> Any:
    """At GET_ITER `inst` over an opaque sequence: mark the break `exc` as the for loop's that follows, so that
    the loop runs as Python (NOTE above) where it can; a comprehension's there, the break that runs it as Python
    (NOTE [Comprehensions over sequences of changing length]), returned."""
    import inspect
    from .normalize import normalize
    if tx.parent is not None or getattr(tx.output, "fullgraph", False) or \
            tx.code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        return None
    insts = normalize(tx.code).insts
    loop = insts[inst.index + 1] if inst.index + 1 < len(insts) else None
    # NOTE [Lengths that change between calls] in carried_loops.py: not a list grown by a loop's steps only
    comp = _comprehension_at(tx, inst, loop) if getattr(tx.peek(), "changes", False) else None
    if comp is not None:
        return _comprehension_break(tx, inst, loop, comp, f"a comprehension over {tx.peek().describe()}, whose "
                                    "length changes: it runs as Python instead of unrolling (NOTE [Comprehensions "
                                    "over sequences of changing length])")
    if loop is None or loop.name != "FOR_ITER" or inst.handler is not None or loop.handler is not None or \
            body_binds_locals_read_after(tx.code, loop, tx.locals):
        return None
    exc.root_index, exc.range_loop = inst.index, loop.index
    return None


# NOTE [Comprehensions over sequences of changing length]: `return [f() for f in fns]` after a loop that
# appended to `fns` on every step, `[g(r) for r in rows]` over a list of rows of changing length: the list is
# opaque there (NOTE [Sequences of changing length carried across breaks]), so the comprehension's GET_ITER
# broke and ran in Python, and the resume function took the list iterator as an argument, guarded by its
# list's length: one entry per length until the recompile limit ran it eagerly (revB M1's p_closure: 13
# graphs and 1 eager frame over 12 lengths; stock: 2 graphs). Such a comprehension runs as Python as one over
# a symbolic range does (NOTE [Comprehensions over symbolic ranges]), its body's calls routed (NOTE
# [Comprehension bodies routed]); its result reaches the resume function after it as a sequence of changing
# length. Only where the length changes between calls of the frame (NOTE [Lengths that change between calls]
# in carried_loops.py): a list that grew by a loop's steps to the same length on every call keeps the old
# form, whose body's closures are captured.


# NOTE [Comprehensions over symbolic ranges]: `[i * 2 for i in range(x.size(0) // 2, x.size(0))]`, `{i: i * i
# for i in range(n)}` unrolled the range, which specialised the size or int: one entry per value until the
# recompile limit ran the frame eagerly (stock torch.compile: 2 frames and no graph when the comprehension
# makes no tensor). Such a comprehension runs as Python like a loop over a symbolic range (NOTE [Loops over
# symbolic ranges]), its break taken at the GET_ITER:
# - 3.12+ inline it (PEP 709): the tail function runs it and trampolines after its epilogue, as for a break
#   in its body (NOTE [Breaks inside inlined comprehensions] in inlined_comprehensions.py);
# - on 3.11 it is `GET_ITER; CALL 0` of its own `<listcomp>` function: the tail function makes that call as a
#   plain call (through its hook, its frame would guard the range iterator `.0` by value and recompile per
#   size) and trampolines to the resume function after the CALL with its result (`loop_exit`).
# Only list, set and dict comprehensions here (a generator expression's consumer is another call: NOTE
# [Generator expressions over symbolic ranges]); only in the root frame (in an inlined callee the root
# breaks at the call, and the callee's own frame then runs it so). When it cannot run as Python (a block
# under it), the break stays at the GET_ITER. The result is a resume function's argument: a list read
# after it is guarded by its length (stack arguments are not made opaque: NOTE [Sequences of changing
# length carried across breaks]), so that function compiles per length, the owner frame does not.
_COMPREHENSIONS = ("<listcomp>", "<setcomp>", "<dictcomp>")


def _comprehension_over(tx, inst: Any, call: Any, iterable: Any) -> Any:
    """At GET_ITER `inst` over a symbolic range: the inlined comprehension it starts (3.12+), True for the
    call of a comprehension's function that follows it (3.11), else None."""
    from .sym_arith import symbolic_length
    return _comprehension_at(tx, inst, call) if symbolic_length(tx, iterable) else None


def _comprehension_at(tx, inst: Any, call: Any) -> Any:
    """The comprehension started at GET_ITER `inst` (see _comprehension_over), else None."""
    from . import inlined_comprehensions
    from .values.callables import UserFunctionValue
    comp = next((c for c in inlined_comprehensions.comprehensions(tx.code) if c.get_iter == inst.index), None)
    if comp is not None:
        return None if inlined_comprehensions.body_binds_unbound(tx.code, comp, tx.locals) else comp
    if call is None or call.name != "CALL" or call.arg != 0 or len(tx.stack) < 2:
        return None
    fn = tx.stack[-2]
    code = getattr(fn.fn, "__code__", fn.fn) if isinstance(fn, UserFunctionValue) else None
    if not isinstance(code, types.CodeType):
        return None
    if code.co_name == "<genexpr>":
        found, above = _genexpr_consumer(tx, call), 4  # NOTE [Generator expressions over symbolic ranges]
    else:
        found, above = (True if code.co_name in _COMPREHENSIONS else None), 2
    if found is None or not ends_torch_blocks(tx, inst, call if found is True else found, above):
        return None
    return found


# NOTE [Generator expressions over symbolic ranges]: `sum(x[i] for i in range(x.size(0)))`, `tuple(i for i in
# range(n))`: the generator is made by its own `<genexpr>` function (on every version: PEP 709 inlines only
# list, set and dict comprehensions) and consumed by the next call. Unrolled, the range specialised the size:
# one entry per size until the recompile limit ran the frame eagerly (stock torch.compile: the same). When
# that next call is `consumer(genexpr)` with a Python builtin consumer that only iterates (sum, any, all,
# tuple, list, set, sorted, min, max, ...), the tail function makes both calls as plain calls, as for a
# comprehension's (NOTE [Comprehensions over symbolic ranges]), and trampolines after the consumer's call
# with its result: the owner frame serves every size. A user function or torch consumer is not taken (its
# body would run uncaptured): the genexpr unrolls there as before. The generator's own frame is not hooked,
# so a call in its body runs eagerly (it is not captured as its own frame).
_CONSUMERS = (sum, any, all, tuple, list, set, frozenset, sorted, min, max, dict)


def _genexpr_consumer(tx, call: Any) -> Any:
    """The consumer call after the generator expression's CALL `call`, when it is `consumer(genexpr)` with a
    builtin consumer (NOTE above), else None."""
    from .normalize import normalize
    from .values import NULL
    from .values.callables import BuiltinValue
    from .values.objects import ClassValue
    insts = normalize(tx.code).insts
    consumer = _consumer_call(insts, call)  # NOTE [Consumers with more arguments]
    if consumer is None or consumer.handler != call.handler or len(tx.stack) < 4:
        return None
    below = [v for v in tx.stack[-4:-2] if v is not NULL]
    if len(below) != 1 or not isinstance(below[0], (BuiltinValue, ClassValue)) or \
            not any(below[0].obj is c for c in _CONSUMERS):
        return None
    return consumer


# NOTE [Consumers with more arguments]: `sum((x[i] for i in range(x.size(0))), x.new_zeros(3))`, `max(gen,
# default=None)`, `sorted(gen, key=lambda v: -v)` unrolled per size (only a one-argument consumer call right after
# the generator expression's was taken: revG L2, hdyn7's c_max_gen / c_sum_start; stock: the same, 8 traces and the
# recompile limit). The consumer is the first CALL that takes the generator as its first argument; what the code
# between pushes (its other arguments, keyword names) is evaluated by the tail function as plain Python, in eager's
# order (after the generator is made, before the consumer iterates it). Only loads, attribute reads, calls, function
# and tuple builds and operators are allowed there (_ARGUMENT_EFFECTS): no store (a walrus), jump (a ternary), or
# another loop, so no local is bound and the path to the consumer is straight.
_ARGUMENT_EFFECTS = {"LOAD_CONST": lambda a: 1, "LOAD_FAST": lambda a: 1, "LOAD_DEREF": lambda a: 1,
                     "LOAD_GLOBAL": lambda a: 1 + bool(a[0]) if isinstance(a, tuple) else 1, "LOAD_ATTR": lambda a: 0,
                     "LOAD_METHOD": lambda a: 1, "PUSH_NULL": lambda a: 1, "KW_NAMES": lambda a: 0,
                     "CALL": lambda a: -a - 1, "BINARY_OP": lambda a: -1, "UNARY_NEGATIVE": lambda a: 0,
                     "MAKE_FUNCTION": lambda a: -bin(a & 0xF).count("1"), "BUILD_TUPLE": lambda a: 1 - a,
                     "BUILD_LIST": lambda a: 1 - a}


def _consumer_call(insts: list, call: Any) -> Any:
    """The CALL that takes the generator made by `call` as its first argument, with only the argument code of
    NOTE [Consumers with more arguments] between them, or None."""
    depth = 0  # values pushed above the generator
    for inst in insts[call.index + 1:]:
        if inst.handler != call.handler or inst.name not in _ARGUMENT_EFFECTS:
            return None
        if inst.name == "CALL" and inst.arg == depth + 1:
            return inst
        depth += _ARGUMENT_EFFECTS[inst.name](inst.arg)
        if depth < 0:
            return None
    return None


# NOTE [Comprehension bodies routed]: a generator expression passed to a builtin consumer (NOTE [Generator
# expressions over symbolic ranges]) and, on 3.11, a list/set/dict comprehension (its own `<listcomp>`
# function, NOTE [Comprehensions over symbolic ranges]) run as Python by a plain call of their function
# from the tail function. Their bodies' calls then ran eagerly: `sum(lin(x[i]) for i in range(x.size(0)))`
# under dynamic=True lost its whole graph (320 ops at size 64; revR R7) where stock unrolls it. Now the
# function made for the comprehension is replaced, right after the tail's GET_ITER, by one over a copy of
# its code whose calls go through `route(callable)` as a loop body's do (NOTE [Callees routed in loops run
# as Python]): `lin`'s forward, a user function in the body, are captured as their own frames and compiled
# once for every step (the row's shape does not change with the range's length). The copy keeps the
# function's globals, defaults, closure and names, so the body computes what eager's does; its own
# generator frame is the callee's caller, as in eager. Copies are made once per code object and route; the
# comprehensions and generator expressions made in the body are copied so too (`_routed_tree`).
_ROUTED_CODES: Any = None


def _routed_tree(code: types.CodeType, route: Any) -> types.CodeType:
    """`code` with its calls routed, and those of the comprehensions and generator expressions it makes (a
    nested `sum(sum(f(v) for v in row) for row in rows)`: the inner one's function is made in the outer's body)."""
    from .routed_eager import _routed_code
    consts = tuple(_routed_tree(c, route) if isinstance(c, types.CodeType) and c.co_name in _COMPREHENSIONS +
                   ("<genexpr>",) else c for c in code.co_consts)
    if any(a is not b for a, b in zip(consts, code.co_consts)):
        code = code.replace(co_consts=consts)
    return _routed_code(code, route)


def routed_comprehension(route: Any, fn: Any) -> Any:
    """`fn` (the comprehension's function the tail function is about to call) over a copy of its code whose
    calls go through `route` (NOTE [Comprehension bodies routed]); anything else as it is."""
    global _ROUTED_CODES
    if type(fn) is not types.FunctionType or fn.__code__.co_name not in _COMPREHENSIONS + ("<genexpr>",):
        return fn
    if _ROUTED_CODES is None:
        import weakref
        _ROUTED_CODES = weakref.WeakKeyDictionary()
    per_route = _ROUTED_CODES.setdefault(route, {})
    code = per_route.get(fn.__code__)
    if code is None:
        try:
            code = per_route[fn.__code__] = _routed_tree(fn.__code__, route)
        except Exception:  # noqa: BLE001 - code the bytecode library cannot round-trip: run as it is
            code = per_route[fn.__code__] = fn.__code__
    if code is fn.__code__:
        return fn
    copy = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    if copy.__builtins__ is not fn.__builtins__:  # NOTE [Builtins of a function]
        return fn
    copy.__qualname__, copy.__kwdefaults__ = fn.__qualname__, fn.__kwdefaults__
    return copy


# NOTE [Comprehensions called at breaks]: on 3.11 a list, set or dict comprehension is a call of its own
# `<listcomp>` function; a break inside its body (`[inner(a, b) for a, b in zip(feats, sizes)]` with a
# `.tolist()` in `inner`: hloop's f_zip) is taken by the frame at that call, which then ran the function
# made for the comprehension as plain Python: `inner` ran eagerly on every step, never captured (1-3 graphs
# over 5 calls where stock captures 3-7). The call at the break now calls `routed_comprehension(route, fn)`
# instead (NOTE [Comprehension bodies routed]): the body's calls go through their frame hooks, so `inner` is
# compiled as its own frame, once for every step. The comprehension's own frame is not traced (its iterator,
# a zip of rows or a list of changing length, would be stepped per item), as stock leaves it to Python. The
# call is made by `comprehension_caller(route)(fn, iterator)` (persisted in break code as the route's).
def comprehension_function(callee: Any) -> bool:
    """`callee` is a comprehension's function (3.11) made by the frame: routed where it is called at a break."""
    from .values.callables import UserFunctionValue
    return isinstance(callee, UserFunctionValue) and type(callee.fn) is types.FunctionType and \
        callee.fn.__code__.co_name in _COMPREHENSIONS


def comprehension_caller(route: Any) -> Any:
    """`caller(fn, *args)`: the routed copy of the comprehension's function `fn` called (NOTE above), one per route."""
    global _CALLERS
    if _CALLERS is None:
        import weakref
        _CALLERS = weakref.WeakKeyDictionary()
    caller = _CALLERS.get(route)
    if caller is None:
        def caller(fn, *args, **kwargs):
            return routed_comprehension(route, fn)(*args, **kwargs)
        _CALLERS[route] = caller
    return caller


_CALLERS: Any = None


def route_comprehension_calls(items: list, label_at: int, route: Any) -> None:
    """After the GET_ITER at the tail function's resume label (items[label_at]), replace the comprehension's
    function below the iterator with `routed_comprehension(route, function)` (NOTE [Comprehension bodies
    routed])."""
    at = next(k for k in range(label_at + 1, len(items)) if isinstance(items[k], Instr))
    if items[at].name != "GET_ITER":
        return
    temp = "___comprehension"
    fix = [Instr("SWAP", 2), Instr("STORE_FAST", temp)]
    fix += emit.call_const(functools.partial(routed_comprehension, route), [Instr("LOAD_FAST", temp)])
    fix += [Instr("SWAP", 2), Instr("DELETE_FAST", temp)]
    for i in fix:
        i.lineno = items[at].lineno
    items[at + 1:at + 1] = fix


def keyed_result(code: types.CodeType, loop: Any, comp: Any, callees: list) -> bool:
    """The comprehension (or generator expression's consumer) run as Python at `loop` makes a dict or set
    (NOTE [Dict and set results of changing size] in carried_loops.py); `callees`: the stack slots of its
    function (3.11), or of the consumer and its NULL."""
    from .normalize import normalize
    if comp is not None:  # 3.12+: the comprehension's BUILD_* before its FOR_ITER
        return normalize(code).insts[comp.loop - 2].name in ("BUILD_MAP", "BUILD_SET")
    if loop.name != "CALL":
        return False
    objs = [getattr(v, "obj", None) for v in callees] + [getattr(getattr(v, "fn", None), "__code__", None)
                                                          for v in callees]
    return any(o is dict or o is set or o is frozenset for o in objs) or \
        any(isinstance(o, types.CodeType) and o.co_name in ("<dictcomp>", "<setcomp>") for o in objs)


def _comprehension_break(tx, inst: Any, call: Any, comp: Any, why: str) -> Any:
    """The break that runs the comprehension as Python (NOTE [Comprehensions over symbolic ranges])."""
    from .breaks import BreakKind, Unsupported
    exc = Unsupported(BreakKind.DYNAMIC_CONTROL_FLOW, why)
    if tx.parent is not None:  # the root frame breaks at the call; the callee's own frame runs it so
        return exc
    exc.root_index = inst.index
    if comp is True or getattr(comp, "name", None) == "CALL":  # 3.11, or a generator expression's consumer:
        exc.range_loop = call.index if comp is True else comp.index  # moved_break makes it the loop run as Python
        return exc
    exc.loop_tried = exc.comprehension_tried = True  # the fallback: a plain break at the GET_ITER
    moved = Unsupported(BreakKind.DYNAMIC_CONTROL_FLOW, why)
    moved.root_index, moved.python_loop, moved.moved_from, moved.comprehension = inst.index, comp.loop, exc, comp
    return moved


def loop_exit(loop: Any, insts: list | None = None) -> int:
    """Where a loop run as Python leaves: the FOR_ITER's exhausted edge, after a comprehension's call, or
    after the with-block the loop ends (NOTE [Loops run as Python at the end of a with-block]; `insts`: the
    code's canonical instructions)."""
    after = with_exit(insts, loop) if insts is not None and loop.handler is not None else None
    if after is not None:  # NOTE [Comprehensions ending a with-block] for a comprehension's call
        return after
    return loop.index + 1 if loop.name == "CALL" else loop.arg




def moved_break(code: types.CodeType, exc: Any, symbolic: bool) -> Any:
    """The break `exc` moved to where its enclosing loop runs as Python, or None (module docstring). A break
    of another kind than DATA_DEPENDENT moves only in a frame with symbolic sizes or ints (`symbolic`), for a
    loop over a symbolic range (NOTE [Loops over symbolic ranges])."""
    from .breaks import BreakKind, Unsupported
    from .normalize import normalize
    from .resume import _ORIGIN
    if getattr(exc, "range_loop", None) is not None and not getattr(exc, "loop_tried", False):
        exc.loop_tried = True  # when the loop cannot run as Python, the break is taken at its GET_ITER
        moved = Unsupported(exc.kind, exc.graph_break.explanation, exc.graph_break.user_stack)
        moved.graph_break = exc.graph_break
        moved.root_index, moved.python_loop, moved.moved_from = exc.root_index, exc.range_loop, exc
        return moved
    every_step = getattr(exc, "kind", None) is BreakKind.DATA_DEPENDENT or getattr(exc, "nested_operand", False)
    if not isinstance(exc, Unsupported) or exc.root_index is None or getattr(exc, "python_loop", None) is not None \
            or getattr(exc, "loop_tried", False) or (not every_step and not symbolic):
        return None
    exc.loop_tried = True  # when the loop cannot run as Python, the break is taken where it happened
    insts = normalize(code).insts
    loop = enclosing_loop(insts, exc.root_index)
    if loop is None or loop.handler is not None or insts[exc.root_index].handler is not None:
        return None
    stop = loop.index - 1 if insts[loop.index - 1].name == "GET_ITER" else loop.index
    if code in _ORIGIN:  # a resume function that starts inside the body never reaches the loop's head
        point = next(i for i in insts if i.name == "JUMP").arg
        if loop.index < point < loop.arg:
            stop = point
    moved = Unsupported(exc.kind, exc.graph_break.explanation, exc.graph_break.user_stack)
    moved.graph_break = exc.graph_break
    moved.root_index, moved.python_loop, moved.moved_from = stop, loop.index, exc
    return moved


def iterates_rows_at(stack: list, inst: Any, moved_from: Any) -> bool:
    """At the break moved from `moved_from`, the loop's iterable (GET_ITER) or iterator is over a tensor's
    rows; for a break of another kind than DATA_DEPENDENT, the iterable is a symbolic range or an opaque sequence
    (GET_ITER)."""
    from .breaks import BreakKind
    from .carried_loops import OpaqueSequenceValue
    from .sym_arith import SymRangeValue
    if not stack:
        return False
    from .graph_break import _slot_kind
    from .resume import ITERATOR_KINDS
    if getattr(moved_from, "nested_operand", False):  # NOTE [Loops carrying nested tensors] in graph_calls.py
        return inst.name in ("GET_ITER", "FOR_ITER") or any(_slot_kind(v) in ITERATOR_KINDS for v in stack)
    if moved_from.kind is not BreakKind.DATA_DEPENDENT:  # NOTE [Loops over sequences of changing length]
        return inst.name == "GET_ITER" and isinstance(stack[-1], (SymRangeValue, OpaqueSequenceValue))
    if inst.name in ("GET_ITER", "FOR_ITER"):
        return iterates_rows(stack[-1])
    iterators = [v for v in stack if _slot_kind(v) in ITERATOR_KINDS]
    return bool(iterators) and iterates_rows(iterators[-1])


# ---- the tail function's code: calls through call_hooked, a trampoline at the loop's exit ----
# The running CPython's spelling of calls and method loads is read through normalize.py (NOTE [Reading raw
# instructions]) and the replacement written through emit.py: no version checks here.

def _producers(items: list, end: int, lo: int, depth: int, wanted: int):
    """Walk back from items[end-1] (not past `lo`) and return, for the stack slots `depth`..`depth+wanted-1`
    counted from the top at `end`, (position of the instruction that pushed it, its index among that
    instruction's pushes from the top); None when a label, jump or unknown instruction is in the way."""
    found = []
    d = depth
    q = end - 1
    while len(found) < wanted:
        if q <= lo:
            return None
        item = items[q]
        if not isinstance(item, Instr):
            if type(item).__name__ == "SetLineno":
                q -= 1
                continue
            return None
        if item.has_jump() or item.is_final():
            return None
        effect = normalize.raw_stack_effect(item)
        if effect is None:
            return None
        pops, pushes = effect
        while d < pushes and len(found) < wanted:
            found.append((q, d))
            d += 1
        d = d - pushes + pops
        q -= 1
    return found


def _routed(instrs: list, route: Any, line: Any) -> list:
    """`instrs` (pushing a callable on top) followed by the call `route(callable)`, which leaves in its place
    what the call then calls (NOTE [Callees routed in loops run as Python])."""
    out = list(instrs) + [Instr("LOAD_CONST", route), Instr("SWAP", 2), Instr("PUSH_NULL")]
    out += [Instr("SWAP", 2)] if emit.NULL_AFTER_CALLABLE else [Instr("SWAP", 3), Instr("SWAP", 2)]
    out += emit.call_over_slots(1)  # over the NULL pushed here
    for i in out[len(instrs):]:
        i.lineno = line
    return out


def _method_load_as_attr(instr: Instr, route: Any) -> list[Instr]:
    """A method load rewritten to a plain attribute load, routed, with its NULL (NOTE [Call layouts])."""
    load = emit.load_attr(normalize.raw_method_name(instr))
    load.lineno = instr.lineno
    out = _routed([load], route, instr.lineno) + emit.null_beside_attribute()
    for i in out[-len(emit.null_beside_attribute()):]:
        i.lineno = instr.lineno
    return out


def _rewrite_call(items: list, p: int, lo: int, route: Any) -> bool:
    group = normalize.raw_call(items, p)
    call = items[p]
    if group is None and call.name == "CALL_FUNCTION_EX":  # `f(*args, **kwargs)`: its tuple (and dict) on top
        group = p, 1 + (call.arg & 1), ()
    if group is None:
        return False
    start, n, names = group
    slots = _producers(items, start, lo, n, 2)  # the slot under the arguments, then the one below it
    if slots is None:
        return False
    (upper_pos, upper_depth), (lower_pos, lower_depth) = slots
    null_pos = upper_pos if emit.NULL_AFTER_CALLABLE else lower_pos
    callable_pos = lower_pos if emit.NULL_AFTER_CALLABLE else upper_pos
    callable_depth = lower_depth if emit.NULL_AFTER_CALLABLE else upper_depth
    null_item = items[null_pos]
    if upper_pos == lower_pos:  # one load pushed both: a global loaded with its NULL, or a method load
        if null_item.name == "LOAD_GLOBAL" and isinstance(null_item.arg, tuple):
            load = emit.load_global(null_item.arg[1])
            load.lineno = null_item.lineno
            new = _routed([load], route, null_item.lineno) + emit.null_beside_attribute()
            for i in new[-len(emit.null_beside_attribute()):]:
                i.lineno = null_item.lineno
        elif normalize.raw_method_name(null_item) is not None:
            new = _method_load_as_attr(null_item, route)
        else:
            return False
        items[null_pos:null_pos + 1] = new
        return True
    null_depth = upper_depth if emit.NULL_AFTER_CALLABLE else lower_depth
    global_null = null_item.name == "LOAD_GLOBAL" and isinstance(null_item.arg, tuple) and null_item.arg[0] \
        and null_depth == (0 if emit.NULL_AFTER_CALLABLE else 1)  # 3.11's `mod.f(x, k=1)`: a global's NULL
    if not (null_item.name == "PUSH_NULL" or global_null) or callable_pos == null_pos or callable_depth != 0:
        return False  # the callable is not the last value its instruction pushes: left a plain call
    items[callable_pos:callable_pos + 1] = _routed([items[callable_pos]], route, items[callable_pos].lineno)
    return True


def hook_loop_calls(items: list, for_iter_pos: int, route: Any) -> None:
    """Route the callable of each call in the loop body that starts at items[for_iter_pos] (a FOR_ITER)
    through `route(callable)`, where the callable can be traced back (module docstring)."""
    exit_label = items[for_iter_pos].arg
    end = items.index(exit_label)
    body = [item for item in items[for_iter_pos + 1:end] if isinstance(item, Instr) and item.name in ("CALL", "CALL_KW")]
    for call in reversed(body):  # from the end; a rewrite inserts only before its call, so found again by identity
        position = next(k for k, item in enumerate(items) if item is call)
        _rewrite_call(items, position, for_iter_pos, route)


def hook_calls_after_loop(items: list, for_iter_pos: int, last: Any, route: Any) -> None:
    """Route the calls of the straight-line code between the loop's exit and `last` (the end of the with-blocks'
    exits: NOTE [Loops run as Python at the end of a with-block]); a block's `__exit__` call is left alone (its
    callable comes from before the loop, so it cannot be traced back from there)."""
    lo = items.index(items[for_iter_pos].arg) if items[for_iter_pos].name == "FOR_ITER" else for_iter_pos + 1
    hi = next(k for k, item in enumerate(items) if item is last)
    calls = [item for item in items[lo:hi] if isinstance(item, Instr) and item.name in ("CALL", "CALL_KW")]
    for call in reversed(calls):
        _rewrite_call(items, next(k for k, item in enumerate(items) if item is call), lo, route)


def route_calls(items: list, route: Any, unpacking: bool = False, calls: list | None = None) -> None:
    """Route the callable of every call in `items` (or of those listed in `calls`) through `route(callable)` where
    it can be traced back (NOTE [Caller-naming calls in tail functions] in caller_frames.py); with `unpacking`, the
    calls with `*args`/`**kwargs` (CALL_FUNCTION_EX) too (NOTE [Callees of frames run eagerly] in routed_eager.py)."""
    names = ("CALL", "CALL_KW", "CALL_FUNCTION_EX") if unpacking else ("CALL", "CALL_KW")
    calls = [item for item in items if isinstance(item, Instr) and item.name in names] if calls is None else calls
    for call in reversed(calls):
        position = next(k for k, item in enumerate(items) if item is call)
        _rewrite_call(items, position, -1, route)


def exit_trampoline_entry(items: list, for_iter_pos: int) -> list:
    """Point the FOR_ITER's exhausted edge at a new label and return [label, what CPython skips there]:
    the END_FOR (3.12) or END_FOR; POP_TOP (3.13) a FOR_ITER jumps over when its iterator is exhausted."""
    entry = Label()
    instr = items[for_iter_pos]
    items[for_iter_pos] = Instr("FOR_ITER", entry, lineno=instr.lineno)
    skipped = emit.skipped_by_exhausted_for_iter()
    for i in skipped:
        i.lineno = instr.lineno
    return [entry] + skipped


# ---- run time: which callees go through a hook ----

_SKIPPED_DIRS: list[str] = []


def _skipped(code: types.CodeType) -> bool:
    """Code of torch itself or of the standard library: called as it is (stock Dynamo skips those files
    too); user and third-party code (site-packages) goes through a hook."""
    if not _SKIPPED_DIRS:
        import os
        import torch
        paths = sysconfig.get_paths()
        _SKIPPED_DIRS.append(os.path.join(os.path.dirname(torch.__file__), ""))
        _SKIPPED_DIRS.extend(os.path.join(paths[k], "") for k in ("stdlib", "platstdlib"))
    name = code.co_filename
    known = _SKIPPED_FILES.get(name)
    if known is None:  # routed calls ask on every call: one answer per file name
        if len(_SKIPPED_FILES) > 4096:
            _SKIPPED_FILES.clear()
        known = _SKIPPED_FILES[name] = name.startswith(_SKIPPED_DIRS[0]) or \
            "site-packages" not in name and name.startswith(tuple(_SKIPPED_DIRS[1:]))
    return known


_SKIPPED_FILES: dict[str, bool] = {}


_RUNTIME: list = []  # (Module.__call__, torch.nn.modules.module's globals, their hook dict names, reads_frames_below)


def _runtime() -> list:
    """What `route` reads on every call, imported once (a relative import in the function cost ~10 us a call)."""
    if not _RUNTIME:
        import torch
        from .module_hooks import _GLOBAL_DICTS
        from .routed_eager import reads_frames_below
        # torch's own __call__ (NOTE [Library defaults patched]: `Module.__call__` may already be a patch)
        _RUNTIME.extend((torch.nn.Module._wrapped_call_impl, vars(torch.nn.modules.module), _GLOBAL_DICTS,
                         reads_frames_below))
    return _RUNTIME


# NOTE [torch.nn layers routed]: a torch.nn layer called in a loop or comprehension run as Python
# (`sum(lin(x[i]) for i in range(x.size(0)))` with lin an nn.Linear or nn.Sequential, a per-row
# TransformerEncoderLayer) ran as it is: its forward is torch's code, which `_skipped` leaves to eager, so
# the body was never captured (0 graphs) although the same layer is traced fine from a traced frame. A
# module whose forward is in torch/nn/modules/ (not Module's own unimplemented one) is routed as a user
# module is: its forward through its frame hook, under the same checks (no instance or global hooks, no
# forward in the instance's dict, `__call__` not overridden); the frame's guards are the hook's as for any
# module. Other torch modules (torch.ao, DDP, ...) are still called as they are.
def _torch_layer(forward: types.FunctionType) -> bool:
    """`forward` is a torch.nn layer's own (NOTE above)."""
    if not _LAYERS:
        import os
        import torch
        _LAYERS.extend((os.path.join(os.path.dirname(torch.__file__), "nn", "modules", ""), torch.nn.Module.forward))
    return forward is not _LAYERS[1] and forward.__code__.co_filename.startswith(_LAYERS[0])


_LAYERS: list = []  # torch/nn/modules/, Module.forward (read on every routed call: imported once)


def _module_target(hooks, module) -> Any:
    module_call, hook_globals, global_dicts, reads_frames_below = _runtime()
    cls = type(module)
    forward = getattr(cls, "forward", None)
    if cls.__call__ is not module_call or not isinstance(forward, types.FunctionType) \
            or _skipped(forward.__code__) and not _torch_layer(forward) or "forward" in module.__dict__:
        return None
    # Module.__call__ calls `self._compiled_call_impl` when set (Module.compile()) or else `self._call_impl`: a
    # class or instance that replaces either is called as it is (review revB H1).
    if not is_module_default(cls._call_impl, "_call_impl") or "_call_impl" in module.__dict__ \
            or getattr(module, "_compiled_call_impl", None) is not None:
        return None
    if reads_frames_below(forward):  # NOTE [Callees of frames run eagerly]
        return None
    if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or \
            module._backward_pre_hooks or any([hook_globals[d] for d in global_dicts]):
        return None
    return functools.partial(hooks.module_forward(forward), module)  # NOTE [Module calls past the hook]


# NOTE [Callees routed in loops run as Python]: the loop's calls used to go through a helper
# `call_hooked(callable, args, kw_names)` that made the call itself, so every callee had the helper's frame
# (and, through the hook, hook.py's frames) as its caller: a callee reading `sys._getframe(1).f_locals` saw
# `target`/`args`/`names` or FrameHook.miss's `self`/`args`/`kwargs`/`entry` where eager shows the user's
# locals (3.12+: a comprehension with a break runs as such a loop, NOTE [Breaks inside inlined
# comprehensions]; test_frame_readers2::test_reader_inside_a_comprehension). Now only the callable is
# replaced, right after it is loaded: `route(callable)` returns a partial that calls it through its hook,
# a module's hooked forward, or the callable itself, and the loop's own CALL instruction makes the call.
# Callees that name their caller (break_callees.names_its_caller: frame readers, logging, import
# machinery) and generator functions (NOTE [Generator functions at breaks]) are returned as they are, so
# they are called by the frame running the loop. That frame (the tail function) holds the user's locals
# only: its prologue deletes the `___stack*` arguments once it has pushed them (resume.make_resume_code),
# and it gets every bound local as an argument, so `f_locals` lists eager's names and values (3.13's
# write-through proxy writes the slots the trampoline after the loop passes on). Left: a cell variable
# bound before the break is an argument of the tail function, so `f_locals` lists it before locals first
# bound in the loop (eager: after them; the same names and values, another order).
def make_call_hooked(hooks) -> Any:
    """The `route(callable)` of a loop run as Python (module docstring, NOTE [Callees routed in loops run as
    Python]): what the call in the loop body calls instead of `callable`."""
    import torch
    from .break_callees import makes_generator, names_its_caller
    from .caller_frames import ResumeModuleCall, tail_callee
    from .routed_eager import reads_frames_below

    def route(target):
        callee = tail_callee(target)  # NOTE [Caller-naming calls in tail functions] in caller_frames.py
        if callee is not target:
            return callee
        if isinstance(target, torch.nn.Module):
            return _module_target(hooks, target) or target
        if type(target) is ResumeModuleCall:  # NOTE [Nested breaks through module calls] in nested_breaks.py
            return hooks.module_forward(target.hook)
        if isinstance(target, (types.FunctionType, types.MethodType)):
            fn = target.__func__ if isinstance(target, types.MethodType) else target
            if isinstance(fn, types.FunctionType) and not _skipped(fn.__code__) and not names_its_caller(fn) \
                    and not makes_generator(fn) and not reads_frames_below(fn):  # NOTE [Callees of frames run eagerly]
                return functools.partial(hooks.call_through_hook, target)
        return target

    return route
