"""Per-CPython-version bytecode quirks rewritten into one canonical instruction list.

Input: a code object. Output: `Program`, a flat list of `Inst(name, arg, lineno, index)` in which jump
arguments are instruction indices, so handlers never see version differences (NOTES.md lists them):
- PRECALL (3.11) is dropped: CALL alone carries the call.
- POP_JUMP_{FORWARD,BACKWARD}_IF_* (3.11) become POP_JUMP_IF_*; JUMP_{FORWARD,BACKWARD}[_NO_INTERRUPT]
  become JUMP.
- LOAD_METHOD (3.11) and LOAD_ATTR with the method bit (3.12) become LOAD_METHOD name; plain LOAD_ATTR
  carries the name only.
- RETURN_CONST c (3.12) becomes LOAD_CONST c; RETURN_VALUE.
- CALL_INTRINSIC_1 (3.12) becomes the instruction it stands for (UNARY_POSITIVE, LIST_TO_TUPLE, ...).
- SEND (3.11), which drops the iterator when it is exhausted, becomes SEND_THEN_END (3.12 leaves that to
  END_SEND at the jump target).
- LOAD_FAST_CHECK (3.12) becomes LOAD_FAST. END_FOR (3.12) is dropped: an exhausted FOR_ITER jumps past
  it in CPython too.
- RESUME, NOP, CACHE, EXTENDED_ARG and the exception-table markers carry no meaning for tracing and are
  dropped (exception handling regions are tracked separately, see translator).
3.13:
- TO_BOOL right before POP_JUMP_IF_TRUE/FALSE or UNARY_NOT is merged into that instruction (which tests
  truth itself); a TO_BOOL elsewhere has its own handler.
- `LOAD_CONST names; CALL_KW n` becomes `KW_NAMES names; CALL n`, as in 3.12.
- LOAD_FAST_LOAD_FAST, STORE_FAST_LOAD_FAST and STORE_FAST_STORE_FAST become their two halves.
- MAKE_FUNCTION followed by SET_FUNCTION_ATTRIBUTE flags becomes 3.12's MAKE_FUNCTION flags.
- CONVERT_VALUE c, FORMAT_SIMPLE and FORMAT_WITH_SPEC become FORMAT_VALUE c, FORMAT_VALUE 0 and
  FORMAT_VALUE 4 (a conversion yields a str, which formats to itself with an empty spec).
- LOAD_FAST of a cell or free variable (LOAD_CLOSURE is a pseudo-instruction there) becomes LOAD_CLOSURE.
- END_FOR is followed by POP_TOP (the iterator): an exhausted FOR_ITER jumps past both, so both go.
- A call's stack is [callable, self-or-NULL, args] (3.11/3.12: [NULL-or-callable, callable-or-self, args]);
  LOAD_GLOBAL and the method form of LOAD_ATTR push their NULL after the value. Handlers take the NULL
  position from `emit.NULL_AFTER_CALLABLE` (emit.py writes code the same way).

Raw instructions, read where code is rewritten in place or listed as CPython spells it (python_loops.py,
dump.py): `raw_call`, `raw_stack_effect`, `raw_method_name`, `raw_load_pushes_null`, `DIS_WITH_OFFSETS`
(NOTE [Reading raw instructions]). Shapes of the canonical list: `jump_targets` (where jumps and handlers
go), `with_depth` (the with-blocks around an instruction), `is_user_handler`, `has_handlers`.

NOTE [Canonical instructions and raw ones]: each canonical `Inst` remembers the raw instruction it comes
from (`instr`, at `position`), the raw instructions merged into it before that one (`merged`: a TO_BOOL, a
3.13 MAKE_FUNCTION), and `start`, the position where code that resumes at it must begin: a merged
instruction's, or, for a CALL, that of its KW_NAMES (the 3.13 LOAD_CONST of the names) and of 3.11's
PRECALL. The second half of a split instruction has `part` 1; no code can resume there.
"""
from __future__ import annotations

import dataclasses
import types
from typing import Any

import bytecode
from bytecode import Instr, Label, TryBegin, TryEnd

from ..versions import python_version

PY312 = python_version() >= (3, 12)
PY313 = python_version() >= (3, 13)

DROPPED = {"RESUME", "NOP", "CACHE", "EXTENDED_ARG", "PRECALL", "END_FOR"}
RENAMED = {
    "POP_JUMP_FORWARD_IF_FALSE": "POP_JUMP_IF_FALSE", "POP_JUMP_BACKWARD_IF_FALSE": "POP_JUMP_IF_FALSE",
    "POP_JUMP_FORWARD_IF_TRUE": "POP_JUMP_IF_TRUE", "POP_JUMP_BACKWARD_IF_TRUE": "POP_JUMP_IF_TRUE",
    "POP_JUMP_FORWARD_IF_NONE": "POP_JUMP_IF_NONE", "POP_JUMP_BACKWARD_IF_NONE": "POP_JUMP_IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
    "POP_JUMP_BACKWARD_IF_NOT_NONE": "POP_JUMP_IF_NOT_NONE",
    "JUMP_FORWARD": "JUMP", "JUMP_BACKWARD": "JUMP", "JUMP_BACKWARD_NO_INTERRUPT": "JUMP",
    "LOAD_FAST_CHECK": "LOAD_FAST",
}
# 3.13 superinstructions -> their halves
SPLIT = {"LOAD_FAST_LOAD_FAST": ("LOAD_FAST", "LOAD_FAST"), "STORE_FAST_LOAD_FAST": ("STORE_FAST", "LOAD_FAST"),
         "STORE_FAST_STORE_FAST": ("STORE_FAST", "STORE_FAST")}
# 3.13 formatting -> FORMAT_VALUE with these flags (None: the conversion is the instruction's argument)
FORMATS = {"CONVERT_VALUE": None, "FORMAT_SIMPLE": 0, "FORMAT_WITH_SPEC": 0x04}
# rewritten into other canonical instructions (the opcode coverage test counts them as covered)
REWRITTEN = {"LOAD_ATTR", "LOAD_METHOD", "CALL_INTRINSIC_1", "RETURN_CONST", "CALL_KW", "SET_FUNCTION_ATTRIBUTE",
             *SPLIT, *FORMATS}
_TRUTH_TESTS = {"POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "UNARY_NOT"}  # test truth themselves (TO_BOOL merged)
INTRINSIC_1 = {
    1: "PRINT_EXPR", 2: "IMPORT_STAR", 3: "STOPITERATION_ERROR", 4: "ASYNC_GEN_WRAP", 5: "UNARY_POSITIVE",
    6: "LIST_TO_TUPLE", 7: "TYPEVAR", 8: "PARAMSPEC", 9: "TYPEVARTUPLE", 10: "SUBSCRIPT_GENERIC",
    11: "TYPEALIAS",
}


@dataclasses.dataclass
class Inst:
    name: str
    arg: Any
    lineno: int | None
    index: int = 0
    handler: int | None = None  # index of the exception handler covering this instruction, if any
    handler_depth: int = 0  # the stack depth the handler starts from (CPython's exception table)
    handler_lasti: bool = False  # ... and whether it pushes the raising instruction's offset first
    position: int = 0  # index of the originating item in `bytecode.Bytecode.from_code(code)`
    instr: Any = dataclasses.field(default=None, repr=False)  # the original bytecode Instr
    # NOTE [Canonical instructions and raw ones]
    start: int = 0  # where code resuming at this instruction begins (<= position)
    merged: tuple = dataclasses.field(default=(), repr=False)  # raw Instrs run before `instr` as part of it
    part: int = 0  # 1 for the second half of a split superinstruction

    def __repr__(self) -> str:
        return f"{self.index}: {self.name} {self.arg!r}"


@dataclasses.dataclass
class Program:
    code: types.CodeType
    insts: list[Inst]


_cache: dict[types.CodeType, Program] = {}


def normalize(code: types.CodeType) -> Program:
    """The canonical instruction list of `code` (cached per code object)."""
    program = _cache.get(code)
    if program is None:
        program = _cache[code] = _normalize(code)
    return program


def _normalize(code: types.CodeType) -> Program:
    insts: list[Inst] = []
    label_at: dict[Label, int] = {}
    pending: list[tuple[Inst, Label]] = []
    handler_stack: list[TryBegin] = []
    items = list(bytecode.Bytecode.from_code(code, conserve_exception_block_stackdepth=True))
    cells = frozenset(code.co_cellvars) | frozenset(code.co_freevars)
    position = 0
    while position < len(items):
        item = items[position]
        taken = 1
        if isinstance(item, Label):
            label_at[item] = len(insts)
        elif isinstance(item, TryBegin):
            handler_stack.append(item)
        elif isinstance(item, TryEnd):
            if handler_stack:
                handler_stack.pop()
        elif isinstance(item, Instr):
            taken, merged = _group(items, position)
            last = position + taken - 1
            for part, inst in enumerate(_canonical(items[last], merged, _name_at(items, last + 1), cells)):
                inst.index, inst.position, inst.start, inst.part = len(insts), last, position, part
                inst.instr, inst.merged = items[last], tuple(merged)
                if handler_stack:
                    block = handler_stack[-1]
                    inst.handler_depth, inst.handler_lasti = block.stack_depth, block.push_lasti
                    pending.append((inst, block.target))
                if isinstance(inst.arg, Label):
                    pending.append((inst, inst.arg))
                insts.append(inst)
        position += taken
    for inst, label in pending:
        if inst.arg is label:
            inst.arg = label_at[label]
        else:
            inst.handler = label_at[label]
    for before, inst in zip(insts, insts[1:]):
        if inst.name == "CALL" and before.name == "KW_NAMES":
            inst.start = before.start  # a call starts at its names (NOTE [Canonical instructions and raw ones])
    return Program(code, insts)


def jump_targets(insts: list[Inst]) -> frozenset[int]:
    """The indices of the canonical instructions that a jump or an exception handler goes to."""
    jumps = frozenset(i.arg for i in insts if isinstance(i.instr, Instr) and i.instr.has_jump())
    return jumps | frozenset(i.handler for i in insts if i.handler is not None)


def with_depth(insts: list[Inst], inst: Inst) -> int | None:
    """How many with-blocks enclose `inst`, or None when a try/except or finally does, judged from the
    handlers' shapes as CPython 3.11-3.13 compile them: a with-block's handler is PUSH_EXC_INFO;
    WITH_EXCEPT_START, and its own cleanup handler is COPY 3; POP_EXCEPT; RERAISE, whose handler is the
    next enclosing region."""
    handler, depth = inst.handler, 0
    while handler is not None:
        block = insts[handler:handler + 2]
        if [i.name for i in block] != ["PUSH_EXC_INFO", "WITH_EXCEPT_START"]:
            return None
        cleanup = block[1].handler
        if cleanup is None or [i.name for i in insts[cleanup:cleanup + 3]] != ["COPY", "POP_EXCEPT", "RERAISE"]:
            return None
        handler, depth = insts[cleanup].handler, depth + 1
    return depth


def is_user_handler(insts: list[Inst], handler: int) -> bool:
    """The handler at index `handler` is one of a try/except, try/finally or with-block the code's source
    wrote: it starts with PUSH_EXC_INFO (3.12's cleanup of an inlined comprehension does not)."""
    return insts[handler].name == "PUSH_EXC_INFO"


def has_handlers(code: types.CodeType) -> bool:
    """`code` has exception handlers of its own (try, with; NOTE [Handlers the compiler adds]): the
    handlers CPython 3.12+ adds by itself are not among them."""
    insts = normalize(code).insts
    return any(inst.handler is not None and is_user_handler(insts, inst.handler) for inst in insts)


# NOTE [Handlers the compiler adds]: from 3.12 on, CPython covers code the source wrote without a try with
# handlers of its own: every generator's body (CALL_INTRINSIC_1 STOPITERATION_ERROR: a StopIteration
# escaping it becomes a RuntimeError), each `yield from` / `await` (CLEANUP_THROW: an exception thrown into
# the delegating generator), each inlined comprehension (restores the variables it shadows). None of them is
# user code run when a generator is dropped (closing a delegating generator closes its delegate, whose own
# finalizers pass on to the delegating one: blocks.get_yield_from_iter), and 3.11 has none of them, so a
# generator that has only these has no finalizers on every version (NOTE [Generators with finalizers] in
# translator.py). Only a handler the source wrote begins with PUSH_EXC_INFO (is_user_handler).


def _group(items: list, position: int) -> tuple[int, list[Instr]]:
    """How many raw items from `position` form one canonical instruction, and those of them (all but the
    last) merged into the last one's canonical form. Glue (3.11's PRECALL, a TO_BOOL before a truth test,
    3.13's MAKE_FUNCTION before SET_FUNCTION_ATTRIBUTE) joins the instruction that follows it directly."""
    end = position
    while _glue(items, end):
        end += 1
    if PY313 and items[end].name == "END_FOR" and _name_at(items, end + 1) == "POP_TOP":
        end += 1  # the iterator's POP_TOP: an exhausted FOR_ITER jumps past it
    return end - position + 1, [i for i in items[position:end] if i.name != "PRECALL"]


def _glue(items: list, position: int) -> bool:
    name, following = items[position].name, _name_at(items, position + 1)
    if name == "PRECALL":
        return following == "CALL"
    if name == "TO_BOOL":
        return following in _TRUTH_TESTS
    if name in ("MAKE_FUNCTION", "SET_FUNCTION_ATTRIBUTE"):
        return following == "SET_FUNCTION_ATTRIBUTE"
    return False


def _name_at(items: list, position: int) -> str | None:
    item = items[position] if position < len(items) else None
    return item.name if isinstance(item, Instr) else None


def _canonical(instr: Instr, merged: list[Instr], following: str | None, cells: frozenset[str]) -> list[Inst]:
    name, arg = instr.name, instr.arg
    lineno = instr.lineno if isinstance(instr.lineno, int) else None
    if name in DROPPED or (name == "POP_TOP" and merged and merged[-1].name == "END_FOR"):
        return []
    if name == "SET_FUNCTION_ATTRIBUTE":  # 3.13: MAKE_FUNCTION, then one of these per flag
        flags = int(arg)
        for other in merged:
            flags |= int(other.arg) if other.name == "SET_FUNCTION_ATTRIBUTE" else 0
        return [Inst("MAKE_FUNCTION", flags, lineno)]
    if name in SPLIT:
        first, second = SPLIT[name]
        return [Inst(first, _local_name(arg[0]), lineno), Inst(second, _local_name(arg[1]), lineno)]
    if name in FORMATS:
        return [Inst("FORMAT_VALUE", int(arg) if FORMATS[name] is None else FORMATS[name], lineno)]
    if name == "LOAD_FAST" and PY313 and _local_name(arg) in cells:
        return [Inst("LOAD_CLOSURE", _local_name(arg), lineno)]  # 3.13: LOAD_CLOSURE is assembled into LOAD_FAST
    if name == "LOAD_CONST" and following == "CALL_KW":
        return [Inst("KW_NAMES", arg, lineno)]
    if name == "CALL_KW":
        return [Inst("CALL", arg, lineno)]
    if name == "SEND" and not PY312:  # 3.11: an exhausted SEND drops the iterator itself (3.12: END_SEND does)
        return [Inst("SEND_THEN_END", arg, lineno)]
    name = RENAMED.get(name, name)
    if isinstance(arg, (bytecode.CellVar, bytecode.FreeVar)):
        arg = arg.name
    if name == "LOAD_ATTR" and isinstance(arg, tuple):
        is_method, attr = arg
        return [Inst("LOAD_METHOD" if is_method else "LOAD_ATTR", attr, lineno)]
    if name == "RETURN_CONST":
        return [Inst("LOAD_CONST", arg, lineno), Inst("RETURN_VALUE", None, lineno)]
    if name == "CALL_INTRINSIC_1":
        return [Inst(INTRINSIC_1.get(int(arg), f"CALL_INTRINSIC_1<{arg}>"), None, lineno)]
    if name == "LOAD_SUPER_ATTR":
        return [Inst("LOAD_SUPER_ATTR", arg, lineno)]
    return [Inst(name, arg, lineno)]


def _local_name(arg: Any) -> Any:
    return arg.name if isinstance(arg, (bytecode.CellVar, bytecode.FreeVar)) else arg


# ---- raw instructions, for code rewritten in place (python_loops.py) -------------------------------------
# NOTE [Reading raw instructions]: python_loops.py rewrites the calls of a loop body in the code's own
# `bytecode` items, where the running CPython's spelling shows: 3.11's PRECALL, KW_NAMES or 3.13's
# LOAD_CONST of the names before CALL_KW, LOAD_ATTR's method bit. These functions read that spelling, so
# the rewriter has no version checks (emit.py writes its replacement).

def raw_call(items: list, position: int) -> tuple[int, int, tuple] | None:
    """For the raw call instruction at items[position]: (position of the call's first instruction: its
    KW_NAMES, 3.13's LOAD_CONST of the names, or 3.11's PRECALL; its argument count, keywords included; its
    keyword names), or None when items[position] is no call, or one whose parts are not where CPython puts
    them."""
    call = items[position]
    if not isinstance(call, Instr) or call.name not in ("CALL", "CALL_KW"):
        return None
    n, start, names = call.arg, position, ()
    if PY313:
        if call.name == "CALL_KW":
            prev = items[position - 1]
            if not (isinstance(prev, Instr) and prev.name == "LOAD_CONST" and isinstance(prev.arg, tuple)):
                return None
            names, start = prev.arg, position - 1
        return start, n, names
    if call.name != "CALL":
        return None
    if not PY312:
        if not (isinstance(items[position - 1], Instr) and items[position - 1].name == "PRECALL"):
            return None
        start = position - 1
    prev = items[start - 1]
    if isinstance(prev, Instr) and prev.name == "KW_NAMES":
        names, start = prev.arg, start - 1
    return start, n, names


def raw_stack_effect(instr: Instr) -> tuple[int, int] | None:
    """(items popped, items pushed) of a raw non-jump instruction, or None when unknown. A call's count
    spans its parts: 3.11's PRECALL pops the arguments and CALL the two slots below them."""
    name = instr.name
    if raw_method_name(instr) is not None or \
            name == "LOAD_SUPER_ATTR" and isinstance(instr.arg, tuple) and instr.arg[0]:
        return (3 if name == "LOAD_SUPER_ATTR" else 1), 2
    if name == "LOAD_GLOBAL":
        return 0, 1 + bool(instr.arg[0])
    if name == "PRECALL":
        return instr.arg, 0
    if name == "CALL":
        return (instr.arg + 2, 1) if PY312 else (2, 1)
    if name == "CALL_KW":
        return instr.arg + 3, 1
    if name == "CALL_FUNCTION_EX":
        return 3 + (instr.arg & 1), 1
    if name == "KW_NAMES":
        return 0, 0
    try:
        pre, post = instr.pre_and_post_stack_effect()
    except Exception:
        return None
    if post == 0:
        return (0, pre) if pre > 0 else (-pre, 0)
    return -pre, post


def raw_method_name(instr: Instr) -> str | None:
    """The attribute a raw method load reads (3.11's LOAD_METHOD, LOAD_ATTR with its method bit on 3.12+),
    or None for any other instruction (LOAD_SUPER_ATTR included)."""
    if instr.name == "LOAD_METHOD":
        return instr.arg
    if instr.name == "LOAD_ATTR" and isinstance(instr.arg, tuple) and instr.arg[0]:
        return instr.arg[1]
    return None


def raw_load_pushes_null(opname: str, oparg: int | None) -> bool:
    """Whether a raw load with this opcode and (integer) oparg, as `dis` lists it, pushes a call's NULL beside
    its value: LOAD_GLOBAL and LOAD_SUPER_ATTR with their low bit, 3.11's LOAD_METHOD, LOAD_ATTR with its
    low bit on 3.12+ (3.11's LOAD_ATTR has no method bit). Where the NULL goes: emit.NULL_AFTER_CALLABLE."""
    if opname == "LOAD_METHOD":
        return True
    if opname in ("LOAD_GLOBAL", "LOAD_SUPER_ATTR") or opname == "LOAD_ATTR" and PY312:
        return bool((oparg or 0) & 1)
    return False


# `dis.dis` keyword arguments that list every instruction's offset (3.13 leaves them out by default).
DIS_WITH_OFFSETS: dict[str, Any] = {"show_offsets": True} if PY313 else {}
