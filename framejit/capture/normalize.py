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
- LOAD_FAST_CHECK (3.12) becomes LOAD_FAST. END_FOR (3.12) is dropped: an exhausted FOR_ITER jumps past
  it in CPython too.
- RESUME, NOP, CACHE, EXTENDED_ARG and the exception-table markers carry no meaning for tracing and are
  dropped (exception handling regions are tracked separately, see translator).
"""
from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any

import bytecode
from bytecode import Instr, Label, TryBegin, TryEnd

PY312 = sys.version_info >= (3, 12)

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
    position: int = 0  # index of the originating item in `bytecode.Bytecode.from_code(code)`
    instr: Any = dataclasses.field(default=None, repr=False)  # the original bytecode Instr

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
    handler_stack: list[Label] = []
    for position, item in enumerate(bytecode.Bytecode.from_code(code)):
        if isinstance(item, Label):
            label_at[item] = len(insts)
        elif isinstance(item, TryBegin):
            handler_stack.append(item.target)
        elif isinstance(item, TryEnd):
            if handler_stack:
                handler_stack.pop()
        elif isinstance(item, Instr):
            for inst in _canonical(item):
                inst.index = len(insts)
                inst.position = position
                inst.instr = item
                if handler_stack:
                    pending.append((inst, handler_stack[-1]))
                if isinstance(inst.arg, Label):
                    pending.append((inst, inst.arg))
                insts.append(inst)
    for inst, label in pending:
        if inst.arg is label:
            inst.arg = label_at[label]
        else:
            inst.handler = label_at[label]
    return Program(code, insts)


def _canonical(instr: Instr) -> list[Inst]:
    name, arg = instr.name, instr.arg
    lineno = instr.lineno if isinstance(instr.lineno, int) else None
    if name in DROPPED:
        return []
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
