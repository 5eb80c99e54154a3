"""Failures of an op's fake run that are framejit's own, not the user's (NOTE [Internal failures under the fake mode]).

NOTE [Internal failures under the fake mode]: an op whose fake run raises is the user's error (bad shapes, wrong
dtypes: eager raises it for real), and the trace breaks before the op or, with symbolic sizes, runs that call
eagerly without an entry (NOTE [Calls that raise at a symbolic op] in dynamic_misses.py). But the fake run
also runs framejit's own shape rules (packed_sequences.py, ...) and torch's fake-tensor machinery, and a bug
there raised like a user error: a real tensor reaching the fake mode ("Please convert all Tensors to
FakeTensors first", review revAB HIGH-1) made every call with symbolic sizes trace the frame again and run it
eagerly, leaving no entry, with no sign of an internal failure. Such a failure is now a graph break of kind
INTERNAL_ERROR at the op: the graph before it is kept, the op runs in plain Python as eager runs it (where a
real error of the user's is raised for real), the rest resumes, and the break is logged once, when the entry
is made (fullgraph=True raises it as framejit's Unsupported). It is framejit's when
- an AssertionError is raised inside torch's fake-tensor or symbolic-shape machinery (an assert there is an
  inconsistency of what framejit handed it; eager never runs that code), or inside framejit's own code;
- an AttributeError, NameError or UnboundLocalError is raised by framejit's own code.
A `assert` of a Python function in torch run on fake tensors (torch.nn.functional's argument checks) stays
the user's error, as eager raises it too.
"""
from __future__ import annotations

import os
import traceback

from .breaks import BreakKind, Unsupported

_FRAMEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_FAKE_MACHINERY = tuple(os.sep + os.path.join("torch", *parts) for parts in (
    ("_subclasses", ""), ("fx", "experimental", ""), ("_guards.py",)))
_BUG_TYPES = (AttributeError, NameError)  # UnboundLocalError is a NameError


def internal_break(name: str, error: BaseException) -> Unsupported | None:
    """The break for `error`, raised by the fake run of op `name`, when it is framejit's own failure (NOTE
    above), else None (the user's error)."""
    where = _raised_in(error)
    if isinstance(error, AssertionError) and (where.startswith(_FRAMEJIT_DIR) or any(m in where for m in _FAKE_MACHINERY)) \
            or isinstance(error, _BUG_TYPES) and where.startswith(_FRAMEJIT_DIR):
        return Unsupported(BreakKind.INTERNAL_ERROR, f"{name}: framejit's fake run of it failed "
                           f"({type(error).__name__}: {str(error)[:200]}); it runs in plain Python")
    return None


def _raised_in(error: BaseException) -> str:
    """The file of the innermost frame `error` was raised in ('' when unknown)."""
    frames = traceback.extract_tb(error.__traceback__)
    return os.path.abspath(frames[-1].filename) if frames else ""
