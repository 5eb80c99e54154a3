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


_GENERATORS = "coroutines and async code are not traced; generators are run only as inlined callees"
_EXCEPTIONS = "exception groups are not traced"
UNSUPPORTED_OPCODES: dict[str, str] = {
    **{name: _GENERATORS for name in (
        "GET_AWAITABLE", "GET_AITER", "GET_ANEXT", "END_ASYNC_FOR",
        "BEFORE_ASYNC_WITH", "ASYNC_GEN_WRAP", "CLEANUP_THROW",
        "INSTRUMENTED_YIELD_VALUE", "SETUP_ANNOTATIONS", "GEN_START")},
    **{name: _EXCEPTIONS for name in (
        "CHECK_EG_MATCH", "PREP_RERAISE_STAR")},
    "IMPORT_STAR": "star imports are not allowed in functions",
    "PRINT_EXPR": "interactive-mode printing",
    "DELETE_GLOBAL": "deleting a global is a side effect",
    "LOAD_NAME": "module-level and class-body code is not compiled",
    "STORE_NAME": "module-level and class-body code is not compiled",
    "DELETE_NAME": "module-level and class-body code is not compiled",
    "LOAD_CLASSDEREF": "class-body code is not compiled",
    "LOAD_FROM_DICT_OR_DEREF": "class-body code is not compiled",
    "LOAD_FROM_DICT_OR_GLOBALS": "class-body code is not compiled",
    "LOAD_BUILD_CLASS": "defining a class inside a compiled function",
    "LOAD_LOCALS": "class-body code is not compiled",
    "SETUP_FINALLY": "pseudo-instruction",
    "SETUP_CLEANUP": "pseudo-instruction",
    "SETUP_WITH": "pseudo-instruction",
    "POP_BLOCK": "pseudo-instruction",
    "JUMP_NO_INTERRUPT": "pseudo-instruction",
    "INTERPRETER_EXIT": "never in user code",
    "CALL_INTRINSIC_2": "type parameters (PEP 695) are not traced",
    "BINARY_SUBSCR_GETITEM": "specialized form",
    "RESERVED": "never emitted by the compiler",
    "LOAD_SUPER_METHOD": "pseudo-instruction (assembled into LOAD_SUPER_ATTR)",
    "LOAD_ZERO_SUPER_METHOD": "pseudo-instruction (assembled into LOAD_SUPER_ATTR)",
    "LOAD_ZERO_SUPER_ATTR": "pseudo-instruction (assembled into LOAD_SUPER_ATTR)",
    "STORE_FAST_MAYBE_NULL": "pseudo-instruction (assembled into STORE_FAST)",
    "EXIT_INIT_CHECK": "only in the interpreter's own shim frames (3.13)",
    "ENTER_EXECUTOR": "written by the tier-2 optimizer over running code, never by the compiler (3.13)",
}

# Registration happens on import; keep these imports after HANDLERS and op are defined.
from . import arith, blocks, build, calls, imports, jumps, matching, pep479, stack  # noqa: E402,F401
