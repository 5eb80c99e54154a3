"""Graph breaks: compile the graph up to an unsupported instruction, run that instruction in plain Python,
and continue in a resume function (resume.py) that enters through the frame hook.

The first trace raises Unsupported at instruction `i` of the outermost frame (a break inside an inlined
call surfaces at the outermost CALL). A second trace of the same frame stops right before `i`, with the
stack and locals intact. The generated function then:
1. calls the compiled graph (its outputs: every tensor made by the graph that is still live),
2. rebuilds only the stack values that instruction `i` consumes and executes `i` itself (a call to a
   user function or module goes through a FrameHook, so the callee is captured as its own frame),
3. for each way control can leave `i` (fall through, or jump), calls the resume function with the rest of
   the stack, the values `i` produced, and the live locals, and returns what it returns.

NOTE [Module calls at breaks]: Python has no frame-evaluation hook, so code called from residual Python is
captured only if the call goes through a FrameHook. A user function or method callee is replaced by its
hook; a module callee `m(...)` becomes `hook(type(m).forward)(m, ...)`, which equals `m(...)` because the
module's hooks are guarded absent.

Breaks are not taken (the frame runs eagerly instead, still correct) inside try/with regions, in frames
with cell variables or generators, and where a NULL would have to be moved (LOAD_METHOD forms).
"""
from __future__ import annotations

import dataclasses
import inspect
import types
from typing import Any, Callable

import torch
from bytecode import Instr, Label

from .breaks import BreakKind, Unsupported, UserException
from .context import ExitValue, GradModeExit, call_with_exits
from .codegen import Codegen, Reconstructor
from .normalize import Inst, normalize
from .resume import STACK_PREFIX, origin
from .translator import LazyArg
from .values import (NULL, BoundMethodValue, CellValue, ConstantValue, DictValue, IteratorValue, ListValue, NewObjectValue, NNModuleValue,
                     SequenceValue, TensorMethodValue, TensorValue, TupleValue, UserFunctionValue, Value)

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
    "RAISE_VARARGS": lambda a: (a, 0),
}


@dataclasses.dataclass
class BreakSite:
    inst: Inst
    consumed: int
    tail: bool = False  # inside try/except or finally: the rest of the frame runs as plain Python


def break_site(code: types.CodeType, exc: Unsupported | UserException) -> BreakSite | None:
    """Where the frame can break for `exc`, or None when it must run eagerly as a whole."""
    if exc.root_index is None or code.co_cellvars or code.co_flags & inspect.CO_GENERATOR:
        return None
    if not all(name.isidentifier() for name in code.co_varnames):
        return None  # e.g. pytest's assertion rewriting adds locals such as `@py_assert0`
    insts = normalize(code).insts
    inst = insts[exc.root_index]
    if inst.handler is not None and not (inst.name in ("CALL", "CALL_FUNCTION_EX") and _only_with_blocks(insts, inst)):
        # NOTE [Breaks inside try blocks]: the instruction must run where the frame's own exception table
        # covers it, so the rest of the frame, from the instruction on, runs as plain Python (a resume
        # function that is not hooked); the graph captured before the break is kept.
        return BreakSite(inst, 0, tail=True)
    if inst.name == "CALL":
        return BreakSite(inst, inst.arg + 2)
    if inst.name == "CALL_FUNCTION_EX":
        return BreakSite(inst, 4 if inst.arg & 1 else 3)
    if inst.name in _CONDITIONAL or inst.name in _OR_POP:
        return BreakSite(inst, 1)
    if inst.name in _SIMPLE:
        return BreakSite(inst, _SIMPLE[inst.name](inst.arg)[0])
    return None


def _only_with_blocks(insts: list[Inst], inst: Inst) -> bool:
    """The exception regions around `inst` are all with-blocks (no try/except or finally), judged from
    the handlers' shapes: a with-block's handler is PUSH_EXC_INFO; WITH_EXCEPT_START, and its own
    cleanup handler is COPY 3; POP_EXCEPT; RERAISE, whose handler is the next enclosing region."""
    handler = inst.handler
    while handler is not None:
        block = insts[handler:handler + 2]
        if [i.name for i in block] != ["PUSH_EXC_INFO", "WITH_EXCEPT_START"]:
            return False
        cleanup = block[1].handler
        if cleanup is None or [i.name for i in insts[cleanup:cleanup + 3]] != ["COPY", "POP_EXCEPT", "RERAISE"]:
            return False
        handler = insts[cleanup].handler
    return True


def live_tensors(values: list[Any]) -> list[TensorValue]:
    """Tensors made by the graph that `values` hold (graph outputs), in first-seen order."""
    seen: dict[int, TensorValue] = {}

    def visit(v: Any) -> None:
        if isinstance(v, TensorValue):
            if v.node.op != "placeholder":
                seen.setdefault(id(v.node), v)
        elif isinstance(v, SequenceValue):
            for item in v.items:
                visit(item)
        elif isinstance(v, DictValue):
            for item in v.items.values():
                visit(item)
        elif isinstance(v, NewObjectValue):
            for item in v.attrs.values():
                visit(item)
        elif isinstance(v, IteratorValue):
            for item in v.items[v.index:]:
                visit(item)
        elif isinstance(v, BoundMethodValue):
            visit(v.self_value)
        elif isinstance(v, TensorMethodValue):
            visit(v.tensor)
        elif isinstance(v, UserFunctionValue):
            for cell in v.closure or ():
                visit(getattr(cell, "contents", None))
            for default in v.defaults or ():
                visit(default)

    for value in values:
        visit(value)
    return list(seen.values())


class BreakCodegen:
    """Emits the transformed function of a frame that breaks at `site` (see the module docstring)."""

    def __init__(self, fn: types.FunctionType, site: BreakSite, tx, request, hooks) -> None:
        self.fn = fn
        self.site = site
        self.tx = tx
        self.request = request
        self.hooks = hooks  # callable(fn) -> FrameHook; and .resume(code, index, nulls, names) -> FrameHook
        self.cg = Codegen()
        self.stack = list(tx.stack)
        self.below = self.stack[:len(self.stack) - site.consumed]
        self.top = self.stack[len(self.stack) - site.consumed:]
        # the stack arguments of a resume function are dead after its prologue
        self.local_names = [n for n in tx.locals if not n.startswith(STACK_PREFIX)]
        if any(isinstance(v, CellValue) for v in self.stack):
            raise Unsupported(BreakKind.UNSUPPORTED_VALUE, "a cell is live at the break")
        # NOTE [Breaks inside with-blocks]: each open grad-mode block's __exit__ on the stack is rebuilt as
        # a GradModeExit(prev) object, passed to the resume function in its stack slot, where the
        # resumed code's own with-exit calls it; the call at the break is wrapped so that an exception
        # also exits the blocks.
        self.exits = tuple(GradModeExit(v.saved) for v in self.stack if isinstance(v, ExitValue))

    def values(self) -> list[Any]:
        live = self.stack + [v for v in self.tx.locals.values() if not isinstance(v, LazyArg)]
        return live + self.tx.output.side_effects.values()

    def emit(self, compiled: Callable | None, output_index: dict[int, int], inputs) -> Codegen:
        cg, rebuild = self.cg, Reconstructor(self.cg, output_index, "___graph_out")
        if compiled is not None:
            cg.push_null()
            cg.load_const(compiled)
            for inp in inputs:
                inp.source.reload(cg)
            cg.call(len(inputs))
            cg.store_fast("___graph_out")
        if self.tx.output.side_effects:
            rebuild.preload(self.stack + [v for v in self.tx.locals.values() if not isinstance(v, LazyArg)])
        self.tx.output.side_effects.emit(rebuild)  # the state the unsupported instruction observes
        restore_grad_mode(cg, self.tx.output)
        inst = self.site.inst
        if self.site.tail:
            self._resume(rebuild, inst.index, produced=0, hooked=False)
        elif inst.name == "CALL":
            self._emit_call(rebuild)
            self._resume(rebuild, inst.index + 1, produced=1)
        elif inst.name == "CALL_FUNCTION_EX":
            self._emit_call_ex(rebuild)
            self._resume(rebuild, inst.index + 1, produced=1)
        elif inst.name in _CONDITIONAL or inst.name in _OR_POP:
            self._emit_branch(rebuild)
        else:
            for value in self.top:
                rebuild.emit(value)
            cg.insts.append(inst.instr.copy())
            produced = _SIMPLE.get(inst.name, lambda a: (0, 0))(inst.arg)[1] if inst.name != "CALL_FUNCTION_EX" else 1
            if inst.name == "RAISE_VARARGS":
                return cg
            self._resume(rebuild, inst.index + 1, produced=produced)
        return cg

    def _emit_call(self, rebuild: Reconstructor) -> None:
        """CALL at the break. The callee goes through its frame hook where it has one; inside open
        with-blocks the call is wrapped by `call_with_exits` so an exception still exits them."""
        first, second, *args = self.top
        callee, leading = (second, []) if first is NULL else (first, [second])
        hooked = self._hooked(callee)
        if hooked is not None:
            callee, self_value = hooked
            leading = ([] if self_value is None else [self_value]) + leading
        cg = self.cg
        cg.push_null()
        if self.exits:
            cg.load_const(call_with_exits)
            cg.load_const(self.exits)
        cg.load_const(callee) if hooked is not None else rebuild.emit(callee)
        for value in leading + args:
            rebuild.emit(value)
        cg.call(len(leading) + len(args) + (2 if self.exits else 0), self.tx.kw_names)

    def _emit_call_ex(self, rebuild: Reconstructor) -> None:
        """f(*args, **kwargs) at the break, hooked and wrapped like `_emit_call`."""
        _null, callee, args, *kwargs = self.top
        hooked = self._hooked(callee)
        cg = self.cg
        cg.push_null()
        if hooked is None and not self.exits:
            rebuild.emit(callee)
            rebuild.emit(args)
        else:
            if not isinstance(args, SequenceValue):
                raise Unsupported(BreakKind.UNSUPPORTED_CALL, "*args of unknown length at a break")
            prefix: list[Value] = []
            target = callee
            if hooked is not None:
                target, self_value = hooked
                prefix = [] if self_value is None else [self_value]
            if self.exits:
                cg.load_const(call_with_exits)
                prefix = [ConstantValue(self.exits), _Constant(target)] + prefix
            else:
                cg.load_const(target)
            rebuild.emit(TupleValue(prefix + list(args.items)))
        for value in kwargs:
            rebuild.emit(value)
        cg.emit("CALL_FUNCTION_EX", 1 if kwargs else 0)

    def _hooked(self, callee: Value) -> tuple[Any, Value | None] | None:
        """A callee that should run through the frame hook: (hook, bound self or None).

        A module call becomes a call of its class's `forward` through a hook, with the module as self:
        the same as `module(...)` because its hooks are guarded absent (NOTE [Module calls at breaks]).
        """
        if isinstance(callee, UserFunctionValue) and _plain(callee):
            return self.hooks.function(callee.fn), None
        if isinstance(callee, BoundMethodValue) and isinstance(callee.func, UserFunctionValue) and _plain(callee.func):
            return self.hooks.function(callee.func.fn), callee.self_value
        if isinstance(callee, NNModuleValue) and callee.source is not None:
            forward = type(callee.obj).forward
            if isinstance(forward, types.FunctionType) and type(callee.obj).__call__ is torch.nn.Module.__call__:
                try:
                    self.tx.guard_no_hooks(callee)
                except Unsupported:
                    return None  # a module with hooks is called as it is: its hooks run, forward is not captured
                return self.hooks.function(forward), callee
        return None

    def _emit_branch(self, rebuild: Reconstructor) -> None:
        inst, cg = self.site.inst, self.cg
        rebuild.emit(self.top[0])
        taken = Label()
        cg.insts.append(Instr(inst.name.replace("POP_JUMP_IF", "POP_JUMP_FORWARD_IF") if _needs_forward_name(inst.name)
                              else inst.name, taken))
        self._resume(rebuild, inst.index + 1, produced=0)
        cg.insts.append(taken)
        self._resume(rebuild, inst.arg, produced=1 if inst.name in _OR_POP else 0)

    def _resume(self, rebuild: Reconstructor, index: int, produced: int, hooked: bool = True) -> None:
        cg = self.cg
        temps = [f"___result{i}" for i in range(produced)]
        for name in reversed(temps):
            cg.store_fast(name)
        layout = tuple(_slot_kind(v) for v in self.below) + ("value",) * produced
        code, target = origin(self.fn.__code__, index)
        hook = self.hooks.resume(code, target, layout, tuple(self.local_names), hooked)
        cg.push_null()
        cg.load_const(hook)
        for value in self.below:
            if isinstance(value, IteratorValue):
                rebuild.emit(ListValue(value.items[value.index:]))
            elif value is not NULL:
                rebuild.emit(value)
        for name in temps:
            cg.load_fast(name)
        for name in self.local_names:
            value = self.tx.locals[name]
            if isinstance(value, LazyArg):
                cg.load_fast(value.name)
            else:
                rebuild.emit(value)
        cg.call(sum(kind != "null" for kind in layout) + len(self.local_names))
        cg.return_value()


class _Constant(Value):
    """A Python object to be loaded as a constant (the hooked callee inside a rebuilt args tuple)."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def is_constant(self) -> bool:
        return True

    def as_constant(self) -> Any:
        return self.obj


def restore_grad_mode(cg: Codegen, output) -> None:
    """After the graph, set the grad mode the traced code had reached (the graph itself ends in the
    mode it started with, so it does not depend on a backend keeping grad-mode nodes)."""
    if output.grad_enabled != output.entry_grad_enabled:
        cg.push_null()
        cg.load_const(torch._C._set_grad_enabled)
        cg.load_const(output.grad_enabled)
        cg.call(1)
        cg.emit("POP_TOP")


def _plain(fn: UserFunctionValue) -> bool:
    """A real function object that can be called as it is (not a closure made while tracing)."""
    return fn.closure is None and fn.defaults is None


def _slot_kind(value: Value) -> str:
    if value is NULL:
        return "null"
    return "iter" if isinstance(value, IteratorValue) else "value"


def _needs_forward_name(name: str) -> bool:
    import sys
    return sys.version_info < (3, 12) and name.startswith("POP_JUMP_IF")


__all__ = ["BreakCodegen", "BreakSite", "break_site", "live_tensors", "restore_grad_mode"]
