"""Opcode handlers: one small function per canonical instruction, grouped by family.

`@op("NAME", ...)` registers a handler `(tx, inst) -> None`. An instruction without a handler is a
graph break (UNSUPPORTED_OPCODE) with the reason listed in UNSUPPORTED_OPCODES; a test asserts that
every opcode of the running CPython is handled, normalized away, or listed there.
"""
from __future__ import annotations

from typing import Callable

HANDLERS: dict[str, Callable] = {}


def op(*names: str):
    def register(fn: Callable) -> Callable:
        for name in names:
            HANDLERS[name] = fn
        return fn
    return register


_GENERATORS = "generators, coroutines and async code are not traced (the frame runs eagerly)"
_EXCEPTIONS = "raising and handling exceptions inside a compiled region is not traced yet"
UNSUPPORTED_OPCODES: dict[str, str] = {
    **{name: _GENERATORS for name in (
        "RETURN_GENERATOR", "YIELD_VALUE", "SEND", "GET_AWAITABLE", "GET_AITER", "GET_ANEXT", "END_ASYNC_FOR",
        "BEFORE_ASYNC_WITH", "ASYNC_GEN_WRAP", "GET_YIELD_FROM_ITER", "CLEANUP_THROW", "END_SEND",
        "INSTRUMENTED_YIELD_VALUE", "SETUP_ANNOTATIONS", "GEN_START")},
    **{name: _EXCEPTIONS for name in (
        "RAISE_VARARGS", "RERAISE", "PUSH_EXC_INFO", "POP_EXCEPT", "CHECK_EXC_MATCH", "CHECK_EG_MATCH",
        "PREP_RERAISE_STAR", "WITH_EXCEPT_START", "LOAD_ASSERTION_ERROR", "STOPITERATION_ERROR")},
    "IMPORT_NAME": "imports inside compiled functions are not traced",
    "IMPORT_FROM": "imports inside compiled functions are not traced",
    "IMPORT_STAR": "star imports are not allowed in functions",
    "PRINT_EXPR": "interactive-mode printing",
    "DELETE_GLOBAL": "deleting a global is a side effect",
    "DELETE_ATTR": "deleting an attribute is a side effect",
    "DELETE_DEREF": "deleting a closure variable",
    "LOAD_NAME": "module-level and class-body code is not compiled",
    "STORE_NAME": "module-level and class-body code is not compiled",
    "DELETE_NAME": "module-level and class-body code is not compiled",
    "LOAD_CLASSDEREF": "class-body code is not compiled",
    "LOAD_FROM_DICT_OR_DEREF": "class-body code is not compiled",
    "LOAD_FROM_DICT_OR_GLOBALS": "class-body code is not compiled",
    "LOAD_BUILD_CLASS": "defining a class inside a compiled function",
    "LOAD_LOCALS": "class-body code is not compiled",
    "MATCH_CLASS": "structural pattern matching is not traced yet",
    "MATCH_MAPPING": "structural pattern matching is not traced yet",
    "MATCH_SEQUENCE": "structural pattern matching is not traced yet",
    "MATCH_KEYS": "structural pattern matching is not traced yet",
    "GET_LEN": "structural pattern matching is not traced yet",
    "BEFORE_WITH": "with-blocks are not traced yet",
    "SETUP_FINALLY": "pseudo-instruction",
    "SETUP_CLEANUP": "pseudo-instruction",
    "SETUP_WITH": "pseudo-instruction",
    "POP_BLOCK": "pseudo-instruction",
    "JUMP_NO_INTERRUPT": "pseudo-instruction",
    "LOAD_SUPER_ATTR": "super() is not traced yet",
    "INTERPRETER_EXIT": "never in user code",
    "CALL_INTRINSIC_2": "type parameters (PEP 695) are not traced",
    "BUILD_SET": "sets are not modelled yet",
    "SET_ADD": "sets are not modelled yet",
    "SET_UPDATE": "sets are not modelled yet",
    "DICT_MERGE": "**kwargs merging with duplicate checks is not modelled yet",
    "DELETE_SUBSCR": "deleting items is not modelled yet",
    "BINARY_SUBSCR_GETITEM": "specialized form",
    "RESERVED": "never emitted by the compiler",
    "LOAD_SUPER_METHOD": "pseudo-instruction (assembled into LOAD_SUPER_ATTR)",
    "LOAD_ZERO_SUPER_METHOD": "pseudo-instruction (assembled into LOAD_SUPER_ATTR)",
    "LOAD_ZERO_SUPER_ATTR": "pseudo-instruction (assembled into LOAD_SUPER_ATTR)",
    "STORE_FAST_MAYBE_NULL": "pseudo-instruction (assembled into STORE_FAST)",
}

# Registration happens on import; keep these imports after HANDLERS and op are defined.
from . import arith, blocks, build, calls, jumps, stack  # noqa: E402,F401
