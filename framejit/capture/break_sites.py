"""Where a frame can break: the instruction kinds that have a break form (BreakSite, break_site) and the
tensors a graph must return at a break (live_tensors). Split from graph_break.py, which emits the code
around the break (BreakCodegen) and imports these.
"""
from __future__ import annotations

import dataclasses
import inspect
import types
from typing import Any, Callable

from .breaks import Unsupported, UserException
from .frame_locals import reader_break_ok
from .normalize import Inst, normalize, with_depth
from .values import (BoundMethodValue, DictValue, IteratorValue, NewObjectValue, PartialValue, SequenceValue, SetValue,
                     SymNodeValue, TensorMethodValue, TensorValue, UserFunctionValue)
from .numpy_support import NdarrayMethodValue, NdarrayValue, children as numpy_children
from .partials import partial_parts
from .sym_arith import SymRangeValue
from .values.mappings import key_value

_CONDITIONAL = {"POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE", "POP_JUMP_IF_NONE", "POP_JUMP_IF_NOT_NONE"}
_OR_POP = {"JUMP_IF_FALSE_OR_POP", "JUMP_IF_TRUE_OR_POP"}
# instruction -> (values consumed, values produced) for breakable non-jump, non-call instructions
_SIMPLE: dict[str, Callable[[Any], tuple[int, int]]] = {
    "STORE_ATTR": lambda a: (2, 0), "STORE_SUBSCR": lambda a: (3, 0), "STORE_GLOBAL": lambda a: (1, 0),
    "DELETE_SUBSCR": lambda a: (2, 0), "BINARY_SUBSCR": lambda a: (2, 1), "BINARY_OP": lambda a: (2, 1),
    "COMPARE_OP": lambda a: (2, 1), "CONTAINS_OP": lambda a: (2, 1), "IS_OP": lambda a: (2, 1),
    "UNARY_NEGATIVE": lambda a: (1, 1), "UNARY_NOT": lambda a: (1, 1), "UNARY_INVERT": lambda a: (1, 1),
    "GET_ITER": lambda a: (1, 1), "BUILD_STRING": lambda a: (a, 1), "UNPACK_SEQUENCE": lambda a: (1, a),
    "IMPORT_NAME": lambda a: (2, 1), "BINARY_SLICE": lambda a: (3, 1), "STORE_SLICE": lambda a: (4, 0),
    "RAISE_VARARGS": lambda a: (a, 0), "DELETE_ATTR": lambda a: (1, 0), "TO_BOOL": lambda a: (1, 1),
    "BEFORE_WITH": lambda a: (1, 2),  # NOTE [Breaks at BEFORE_WITH]
    "DELETE_DEREF": lambda a: (0, 0),  # a real cell emptied by plain Python (NOTE [Deleting a closure variable])
    # a container built of values one of which breaks when read (NOTE [Mutable buffers carried across breaks])
    "BUILD_TUPLE": lambda a: (a, 1), "BUILD_LIST": lambda a: (a, 1), "BUILD_SET": lambda a: (a, 1),
    "LOAD_BUILD_CLASS": lambda a: (0, 1),  # a class statement: the class is made by plain Python
    # f"{tensor}": the value, and its format spec when flag 0x04 says there is one (handlers/build.py)
    "FORMAT_VALUE": lambda a: (2 if (a & 0x04 if isinstance(a, int) else a[1]) else 1, 1),
    # 3.12+ CALL_INTRINSIC_1 forms of PEP 695 (`type X = ...`, `def f[T]`) in the frame's own code: run as Python
    "TYPEALIAS": lambda a: (1, 1), "TYPEVAR": lambda a: (1, 1), "PARAMSPEC": lambda a: (1, 1),
    "TYPEVARTUPLE": lambda a: (1, 1), "SUBSCRIPT_GENERIC": lambda a: (1, 1),
}
# reads that may break (an attribute framejit cannot model, a global of an unsupported type); a method
# load becomes a plain attribute load: NULL + bound method, which CPython calls the same way
_LOADS = {"LOAD_ATTR", "LOAD_METHOD", "LOAD_GLOBAL"}
# breakable inside with-blocks
_IN_BLOCKS = {"CALL", "CALL_FUNCTION_EX", "POP_JUMP_IF_FALSE", "POP_JUMP_IF_TRUE"} | _LOADS


@dataclasses.dataclass
class BreakSite:
    inst: Inst
    consumed: int
    tail: bool = False  # inside try/except or finally: the rest of the frame runs as plain Python
    with_depth: int = 0  # with-blocks around the instruction (none of them a try block)
    loop: Inst | None = None  # the FOR_ITER of a loop run as Python from here (NOTE [Loops run as Python])
    frame_reader: bool = False  # a call that leads to a frame reader (NOTE [Breaks at calls that read frames])


# NOTE [Zero-argument super() at breaks]: CPython's `super()` without arguments takes the instance from the
# frame's first local slot and the class from the `__class__` cell (3.11 always; 3.12+ where LOAD_SUPER_ATTR is
# not specialised or the compiler emits a plain call). A resume function's first argument used to be a stack
# value, so after a break such a frame got the wrong instance (review revG G2) and ran eagerly on 3.11 (c0a428f,
# 29c8602). Resume functions now take the original's first local first (NOTE [The instance comes first] in
# resume.py), so those frames break and resume as any other. Left eager: a code with a `__class__` cell and no
# positional parameter (`def f(*args): print(); return super().f()`: eager's super() raises "super(): no
# arguments"; a resume function has positional parameters) when it may call super() after the break (a `super`
# load called with no argument at or after the break's instruction, or in a loop around it). Not covered: the
# builtin called through another name (`sup = super; sup()`). Also eager: a break at the `super()` call itself
# (its trace raised: `del self; super()` on 3.11), which would run in the transformed function, a frame with no
# `__class__` cell ("super(): __class__ cell not found" where eager says "super(): arg[0] deleted").
def super_without_instance(code: types.CodeType, index: int) -> bool:
    if "__class__" not in code.co_freevars:
        return False
    insts = normalize(code).insts
    loads = [i.index for i, after in zip(insts, insts[1:]) if i.name == "LOAD_GLOBAL" and
             (i.arg[1] if isinstance(i.arg, tuple) else i.arg) == "super" and after.name == "CALL" and after.arg == 0]
    if index - 1 in loads:
        return True
    if code.co_argcount:
        return False
    if any(load >= index for load in loads):
        return True
    return any("JUMP" in i.name and isinstance(i.arg, int) and i.arg <= index < i.index and
               any(i.arg <= load < i.index for load in loads) for i in insts)


def break_site(code: types.CodeType, exc: Unsupported | UserException) -> BreakSite | None:
    """Where the frame can break for `exc`, or None when it must run eagerly as a whole."""
    if exc.root_index is None or code.co_flags & inspect.CO_GENERATOR:
        return None
    insts = normalize(code).insts
    inst = insts[exc.root_index]
    if getattr(exc, "python_loop", None) is not None:  # NOTE [Loops run as Python] in python_loops.py
        return BreakSite(inst, 0, tail=True, loop=insts[exc.python_loop])
    depth = with_depth(insts, inst)
    reader = reader_break_ok(code, exc, inst, inst.handler is not None, depth)
    if reader is not None:  # NOTE [Breaks at calls that read frames] in frame_locals.py
        return BreakSite(inst, inst.arg + 2, frame_reader=True) if reader else None
    if inst.handler is not None and (depth is None or inst.name not in _IN_BLOCKS):
        # NOTE [Breaks inside try blocks]: the instruction must run where the frame's own exception table
        # covers it, so it runs in a plain "tail" function: the frame's code resumed at the instruction,
        # with its exception table. Each edge out of the instruction jumps to a trampoline appended after
        # every exception region, which calls the hooked resume function for the rest of the frame and
        # returns its result (resume._trampolines): the rest is captured, its exceptions are handled by
        # the resume function's own copy of the handlers, once, and an exception of the instruction
        # itself is handled in the tail function as plain Python. Without trampolines (a NULL or a
        # re-entered block on the stack) the whole rest of the frame runs as plain Python.
        return BreakSite(inst, 0, tail=True)
    if inst.name == "CALL":
        return BreakSite(inst, inst.arg + 2, with_depth=depth)
    if inst.name == "CALL_FUNCTION_EX":
        return BreakSite(inst, 4 if inst.arg & 1 else 3, with_depth=depth)
    if inst.name in _CONDITIONAL or inst.name in _OR_POP:
        return BreakSite(inst, 1, with_depth=depth)
    if inst.name in _SIMPLE:
        # NOTE [Breaks at BEFORE_WITH]: a context manager whose `__enter__` cannot be traced (a
        # contextlib manager made by plain Python, e.g. `torch.backends.cudnn.flags(...)` called at an
        # earlier break: its generator already exists; a manager that opens a file or starts a profiler)
        # is entered as plain Python by the instruction itself, outside every exception region (a
        # BEFORE_WITH inside one took the tail form above). The resume function starts right after it,
        # inside the block: its copy of the frame's exception table calls the manager's `__exit__` on
        # every path out, as the frame's own would, so the block and the code after it stay captured.
        return BreakSite(inst, _SIMPLE[inst.name](inst.arg)[0])
    if inst.name == "FOR_ITER" and getattr(exc, "loop_step", False):  # NOTE [Loops carried across breaks]
        return BreakSite(inst, 0, with_depth=depth)
    if inst.name in _LOADS:
        return BreakSite(inst, 0 if inst.name == "LOAD_GLOBAL" else 1, with_depth=depth)
    return None


def live_tensors(values: list[Any], inputs: bool = False) -> list[TensorValue]:
    from .unstarted_generators import live_parts
    from .values.outside import OutsideDictValue, OutsideListValue, OutsideSetValue
    """Tensors made by the graph that `values` hold (graph outputs), in first-seen order; with `inputs`, the
    graph's inputs among them too."""
    seen: dict[int, TensorValue] = {}

    def visit(v: Any) -> None:
        if isinstance(v, (TensorValue, SymNodeValue)):  # a size computed by the graph is an output too
            if inputs or v.node.op != "placeholder":
                seen.setdefault(id(v.node), v)
        elif isinstance(v, (OutsideListValue, OutsideDictValue, OutsideSetValue)) and not v.materialized:
            for item in v.pending():  # NOTE [Lists from outside]: the rest is the caller's, unread
                visit(item)
        elif isinstance(v, SequenceValue):
            for item in v.items:
                visit(item)
        elif isinstance(v, DictValue):
            for item in [*map(key_value, v.items), *v.items.values()]:
                visit(item)
        elif isinstance(v, NewObjectValue):
            for item in v.attrs.values():
                visit(item)
        elif isinstance(v, IteratorValue):  # an unstarted generator's call too (NOTE [Unstarted generators rebuilt
            for item in [v.owner] if v.owner is not None else [*v.items[v.index:], *live_parts(v)]:  # by their call])
                visit(item)
        elif isinstance(v, SymRangeValue):  # NOTE [Loops over symbolic ranges] in python_loops.py
            for bound in v.bounds:
                visit(bound)
        elif isinstance(v, BoundMethodValue):
            visit(v.self_value)
        elif isinstance(v, PartialValue):
            for item in partial_parts(v):
                visit(item)
        elif isinstance(v, SetValue):  # NOTE [Sets of tensors]
            for key in v.items:
                visit(key_value(key))
        elif isinstance(v, TensorMethodValue):
            visit(v.tensor)
        elif hasattr(type(v), "rebuild_call"):  # rebuilt by a call of its parts (NOTE [Slices rebuilt at breaks])
            for item in v.rebuild_call()[1]:
                visit(item)
        elif isinstance(v, (NdarrayValue, NdarrayMethodValue)):  # NOTE [NumPy as torch]
            for item in numpy_children(v):
                visit(item)
        elif isinstance(v, UserFunctionValue):
            for cell in v.closure or ():
                visit(getattr(cell, "contents", None))
            for default in [*(v.defaults or ()), *(v.kwdefaults or {}).values(), *v.attr_values()]:
                visit(default)

    for value in values:
        visit(value)
    return list(seen.values())
