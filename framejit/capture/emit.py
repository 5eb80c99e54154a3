"""Version-specific bytecode emission: how the running CPython spells each thing framejit writes.

normalize.py reads every supported CPython's bytecode into one canonical instruction list; this module is
its writing counterpart. Code framejit generates (transformed functions through `codegen.Codegen`, the code
at graph breaks, resume prologues and trampolines) spells calls, attribute and global loads, jumps and
truth tests through these functions, so a new CPython version is a change to normalize.py and this module
(plus the handlers of any new instruction).

What differs (3.11 / 3.12 / 3.13):
- calls: `PRECALL n; CALL n` / `CALL n` / `CALL n`; keyword names: `KW_NAMES names` before the call
  (3.11, 3.12) or `LOAD_CONST names; CALL_KW n` (3.13); the NULL of a call below the callable (3.11,
  3.12) or above it (3.13): NOTE [Call layouts].
- LOAD_ATTR's argument: a name (3.11) or (method bit, name) (3.12+); LOAD_GLOBAL: (push NULL, name).
- conditional jumps: POP_JUMP_FORWARD_IF_* (3.11) or POP_JUMP_IF_* (3.12+), which on 3.13 need an exact
  bool (TO_BOOL first); a backward jump sent forward changes its name (`retargeted_forward`).
- two locals in one instruction (3.13's LOAD_FAST_LOAD_FAST, ...): code copied into resume functions
  writes them as two (`unpaired_locals`, NOTE [Paired locals in copied code]).

NOTE [Call layouts]: the two slots under a call's arguments are [NULL, callable] or [method, self] on 3.11
and 3.12, and [callable, NULL] or [method, self] on 3.13 (CALL's documented stack: callable, self or NULL,
args). framejit's emitters write `push_null()`, the callable, the arguments, `call(n)`. On 3.13
`push_null()` writes nothing and `call(n)` writes `CALL n-1`: the first argument takes the "self" slot,
which CALL treats as one more leading positional argument (CPython itself emits a with-block's exit call
`exit(None, None, None)` that way: three constants and `CALL 2`). With no argument the NULL is pushed
right before `CALL 0`. CALL_FUNCTION_EX has no such freedom: its NULL goes between the callable and the
arguments tuple (`null_after_callable()`). On the reading side, handlers put the NULL of LOAD_GLOBAL,
LOAD_METHOD and LOAD_SUPER_ATTR where NULL_AFTER_CALLABLE says, so stack layouts at graph breaks (and the
resume prologues rebuilt from them) are the real ones.
"""
from __future__ import annotations

from typing import Any

from bytecode import Instr, Label

from ..versions import python_version

VERSION = python_version()
PY312 = VERSION >= (3, 12)
PY313 = VERSION >= (3, 13)
NULL_AFTER_CALLABLE = PY313  # NOTE [Call layouts]


def null_before_callable() -> list[Instr]:
    """What `push_null()` writes before a callable (NOTE [Call layouts])."""
    return [] if NULL_AFTER_CALLABLE else [Instr("PUSH_NULL")]


def null_after_callable() -> list[Instr]:
    """The NULL of a CALL_FUNCTION_EX between its callable and its arguments tuple, on 3.13."""
    return [Instr("PUSH_NULL")] if NULL_AFTER_CALLABLE else []


def call(nargs: int, kw_names: tuple[str, ...] = ()) -> list[Instr]:
    """Call the callable under `nargs` arguments (pushed after `null_before_callable()`); the last
    len(kw_names) arguments are keywords."""
    if PY313:
        if nargs == 0:
            return [Instr("PUSH_NULL"), Instr("CALL", 0)]
        if kw_names:
            return [Instr("LOAD_CONST", tuple(kw_names)), Instr("CALL_KW", nargs - 1)]
        return [Instr("CALL", nargs - 1)]
    out = [Instr("KW_NAMES", tuple(kw_names))] if kw_names else []
    if not PY312:
        out.append(Instr("PRECALL", nargs))
    return out + [Instr("CALL", nargs)]


def call_over_slots(nargs: int) -> list[Instr]:
    """CALL of `nargs` arguments over the two slots a raw call has below them ([NULL, f] or, on 3.13,
    [f, NULL]), where the running CPython's own code already pushed the NULL (python_loops.py)."""
    return ([] if PY312 else [Instr("PRECALL", nargs)]) + [Instr("CALL", nargs)]


def below_three() -> list[Instr]:
    """SWAPs that move the item on top under the next three and the two call slots below them: the
    callable `helper` pushed last becomes the call's callable for [slot, slot, a, b, c] (NOTE [Call
    layouts]: the NULL stays below the callable before 3.13 and above it on 3.13)."""
    return [Instr("SWAP", 5 if NULL_AFTER_CALLABLE else 4), Instr("SWAP", 3), Instr("SWAP", 2)]


def null_beside_attribute() -> list[Instr]:
    """After a plain attribute load: its NULL pushed and put where a method load's NULL goes."""
    return [Instr("PUSH_NULL")] + ([] if NULL_AFTER_CALLABLE else [Instr("SWAP", 2)])


def skipped_by_exhausted_for_iter() -> list[Instr]:
    """What an exhausted FOR_ITER jumps over at its target: END_FOR (3.12), END_FOR; POP_TOP (3.13)."""
    return ([Instr("END_FOR")] if PY312 else []) + ([Instr("POP_TOP")] if PY313 else [])


def call_ex(has_kwargs: bool) -> list[Instr]:
    """`f(*args, **kwargs)` of [NULL, f, args(, kwargs)] (3.13: [f, NULL, ...])."""
    return [Instr("CALL_FUNCTION_EX", int(has_kwargs))]


def call_const(fn: Any, args: list[Instr]) -> list[Instr]:
    """`fn(*args)` for a constant `fn` and argument loads of one instruction each."""
    return null_before_callable() + [Instr("LOAD_CONST", fn)] + list(args) + call(len(args))


def load_attr(name: str) -> Instr:
    """A plain attribute load (no method form)."""
    return Instr("LOAD_ATTR", (False, name) if PY312 else name)


def load_closure(name: str) -> Instr:
    """Push the cell object of the cell variable `name` (3.13 assembles LOAD_CLOSURE into LOAD_FAST)."""
    from bytecode import CellVar
    return Instr("LOAD_FAST" if PY313 else "LOAD_CLOSURE", CellVar(name))


def load_fast_checked(name: str) -> Instr:
    """A local load that raises UnboundLocalError where the local is unset (3.12+ spell the check
    LOAD_FAST_CHECK; 3.11's LOAD_FAST always checks)."""
    return Instr("LOAD_FAST_CHECK" if PY312 else "LOAD_FAST", name)


def load_global(name: str, push_null: bool = False) -> Instr:
    return Instr("LOAD_GLOBAL", (push_null, name))


def conditional_jump(name: str, target: Label) -> list[Instr]:
    """A forward conditional jump given its canonical name (normalize.py): POP_JUMP_IF_TRUE/FALSE/NONE/
    NOT_NONE, or 3.11's JUMP_IF_TRUE/FALSE_OR_POP. On 3.13 a truth test first makes the value a bool."""
    if name.startswith("POP_JUMP_IF") and not PY312:
        return [Instr(name.replace("POP_JUMP_IF", "POP_JUMP_FORWARD_IF"), target)]
    if name in ("POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE") and PY313:
        return [Instr("TO_BOOL"), Instr(name, target)]
    return [Instr(name, target)]


def truth_test_prefix(inst: Any) -> list[Instr]:
    """What runs before the raw form of the canonical instruction `inst` (normalize.Inst) when code is
    written or resumed at it with the traced stack: on 3.13 a truth test (POP_JUMP_IF_TRUE/FALSE,
    UNARY_NOT) reads an exact bool, which a COMPARE_OP with its bool flag made in the original code but
    the traced value (a tensor compared) is not; TO_BOOL makes it one, as that COMPARE_OP would have.
    Nothing where the test's own TO_BOOL is merged into it (it runs as part of the instruction)."""
    if PY313 and inst.name in ("POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE", "UNARY_NOT") and \
            not any(raw.name == "TO_BOOL" for raw in inst.merged):
        return [Instr("TO_BOOL")]
    return []


def jump_forward(target: Label) -> Instr:
    return Instr("JUMP_FORWARD", target)


def retargeted_forward(jump: Instr, target: Label) -> Instr:
    """The raw jump instruction `jump` (as the code has it) sent to `target` further down: a backward jump
    becomes its forward form (JUMP_BACKWARD, and 3.11's POP_JUMP_BACKWARD_IF_*, whose jump direction is
    part of the name)."""
    return Instr(jump.name.replace("BACKWARD", "FORWARD"), target, lineno=jump.lineno)


# NOTE [Paired locals in copied code]: 3.13 packs two locals into one argument (LOAD_FAST_LOAD_FAST,
# STORE_FAST_LOAD_FAST, STORE_FAST_STORE_FAST: 4 bits each, indices 0-15). Resume code copies the user's
# instructions into a code object with other local indices (the stack arguments come first). The `bytecode`
# library (0.19.1) splits such a pair into two instructions only when an index is above 16, so an index of
# exactly 16 was packed into the next one's bits: `(5 << 4) + 16` reads as (6, 0). A resume function with
# 17+ locals then read the wrong variables (the 4-loop program of tests/capture/test_paired_locals.py:
# `acc + m` read `k + ___stack0`, TypeError str + list_iterator; eager returns). Copied code therefore
# spells every pair as its two halves; normalize.py reads the halves as the same canonical instructions
# it makes of the pair, so canonical indices (resume points, `origin`) do not change.
_PAIRED = {"LOAD_FAST_LOAD_FAST": ("LOAD_FAST", "LOAD_FAST"), "STORE_FAST_LOAD_FAST": ("STORE_FAST", "LOAD_FAST"),
           "STORE_FAST_STORE_FAST": ("STORE_FAST", "STORE_FAST")}


def unpaired_locals(items: list) -> list:
    """`items` (abstract instructions, labels, try markers) with every 3.13 paired-locals instruction
    written as its two halves (NOTE [Paired locals in copied code])."""
    out: list = []
    for item in items:
        halves = _PAIRED.get(item.name) if isinstance(item, Instr) else None
        if halves is None:
            out.append(item)
            continue
        out += [Instr(name, arg, location=item.location) for name, arg in zip(halves, item.arg)]
    return out


def with_null(kinds: tuple[str, ...]) -> tuple[str, ...]:
    """A stack layout (resume.py) of values that a load pushed together with a NULL, in the order the
    running CPython pushes them (NOTE [Call layouts])."""
    return kinds + ("null",) if NULL_AFTER_CALLABLE else ("null",) + kinds


def callee_and_self(first: Any, second: Any, null: Any) -> tuple[Any, list]:
    """The callable and the leading arguments in the two slots under a call's arguments: [NULL, f] and
    [f, NULL] (the NULL is `null`) hold f alone, [method, self] a method and its self (every version)."""
    if first is null:
        return second, []
    if second is null:
        return first, []
    return first, [second]


__all__ = ["NULL_AFTER_CALLABLE", "PY312", "PY313", "below_three", "call", "call_const", "call_ex", "call_over_slots",
           "callee_and_self", "conditional_jump", "jump_forward", "load_attr", "load_global", "null_after_callable",
           "null_before_callable", "null_beside_attribute", "retargeted_forward", "skipped_by_exhausted_for_iter",
           "truth_test_prefix", "unpaired_locals", "with_null"]
