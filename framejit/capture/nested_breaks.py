"""Nested graph breaks: a break inside inlined calls ends one graph covering every frame, runs the unsupported
instruction with the innermost frame's state, and continues in ONE resume function for the rest of every
frame on the inline stack.

NOTE [Nested graph breaks]: without this a break inside an inlined callee ends the caller's graph at its
call: the callee is then called through its frame hook (a graph before its break, a resume function for its
rest) and the caller resumes after the call: 4 graphs for `outer -> inner -> print`. Here (as Dynamo's
nested graph breaks) the trace that broke in frames F0 (the root) .. Fn (the innermost) is traced again up to
Fn's instruction (nested_frames.py: the translator stops inside the same chain of calls), and the root's
transformed function
1. calls the graph (its outputs: the tensors live in any frame),
2. runs Fn's instruction in plain Python (a CALL as graph_break.BreakCodegen emits it: user callees through
   their hooks) inside functions that stand for F1..Fn (NOTE [Frames around a nested break's step]),
3. returns `R0(*args of F0, *args of F1, ..., *args of Fn)`, where Rn is Fn's plain resume function after
   the instruction (its stack below the instruction, the values it produced, its live locals), and Rk for
   k < n is Fk's resume function after its call whose prologue, in place of loading the call's result,
   calls R(k+1) with the arguments that follow its own. R0 alone is hooked, so the rest of all the frames
   traces as one frame (R1..Rn are inlined): 2 graphs for the example.
R(k+1) is a constant in Rk's code, and every Rk is made once per (code, resume point, stack layout, live
locals, closure, inner function), so a loop that breaks in a callee on every pass reuses them: a break in
Rk's prologue call maps back to Fk's call (resume.origin), and a break inside an inlined R(k+1) is nested
again over the same frames.
Scope, the rest keeps the plain break at the root's call: every frame's instruction outside try and with
blocks, no cell variable that is empty or shared with a closure that sees it written later (NOTE [Cells
at breaks]), no zero-argument super(), each call on the path (CALL or CALL_FUNCTION_EX) a
direct call of the next frame's function (a function, a method or a module without hooks: its result is
that frame's return value; NOTE [Nested breaks through module calls]), stack slots that are values, NULLs
or iterators, an innermost instruction that is a call or a plain operator, no frame reader at the break (NOTE [Breaks at calls that read frames]), no
closure guarded by its code (another object of that code, with other cells, may come next: the functions
made here hold the cells they were made with), and no frame on the path in a loop (NOTE [Nested breaks in
loops]; a loop carrying a nested tensor, NOTE [Loops carrying nested tensors], runs as Python).
NOTE [Nested breaks in loops]: a frame on the path whose call (or the innermost instruction) lies in a loop
keeps the plain break. A loop's state (the iterator, the module or tensor taken from it, the counter) would be
arguments of the hooked R0, guarded by value, position or alias: one R0 entry per pass (range position,
ModuleList index), the recompile limit hit and most of a model run outside graphs (review revN HIGH-2 and
HIGH-3: a loop over 6 printing blocks ran 1 to 4 graphs per call instead of 12-14), and a loop breaking on
every step no longer ran as Python from its second step (NOTE [Loops breaking on every step]). At the plain
break the loop's frame resumes in its own resume function, whose loop is carried as before nested breaks.
NOTE [Nested breaks below framejit's frames]: a root that is framejit's own function (ModuleCall.__call__ of
a compiled module, which calls forward) keeps the plain break, so forward is its own frame below it:
caller_frames names torch's module-call levels and the caller for a warning or a logging record with
stacklevel >= 2 (NOTE [Module calls past the hook]) only where forward's caller is that code object; below
R0 (the root's resume function) they named the compiled module's caller instead. forward's own breaks are
nested ones again where in scope.
NOTE [Nested breaks through module calls]: a module call on the path (`self.inner(x)`, a module without
hooks: its forward is the next frame) is nested too. Eager has torch's `Module._wrapped_call_impl` and
`_call_impl` between the caller and forward; without them a warning or logging record with stacklevel >= 2
named the caller's line, and a traceback lacked two entries (tests/capture/test_warning_levels.py failed 16
of 42). So the frame is marked `module_called`: (1) the functions standing for the frames around the step
have two more, with those functions' code name, file, line of the call and module.py's globals (its warning
registry); (2) its Rk is made (and persisted) with the mark (`__framejit_module_called__`, also in its
cache text: NOTE [Function constants hashed by their code] in locators.py), and R(k-1)'s code calls it in a
caller_frames.ResumeModuleCall, whose frame stands for torch's levels to warnings, logging and tracebacks
where R(k-1) runs as Python (past the recompile limit: review revL HIGH-1, the KeyError's traceback lacked
module.py's entries); a trace of R(k-1) inlines Rk (handlers/stack.py), a routed eager run calls it through
its hook in a ModuleCall (python_loops.make_call_hooked); (3) a later break inside that Rk is not nested
again: plan() refuses a module-called Rk on the path, so R(k-1)'s call of it is a plain break calling it
through its hook in a ModuleCall (graph_break `_hooked`). Nested again, the submodule's rest was traced
once per call site (a submodule with two breaks called twice: 16 graphs where the plain break made 11,
review revL MED-1); Rk's own hook serves every call site, as the submodule's forward's hook did: 11.
NOTE [Nested breaks persisted] (nested_persist.py): the functions made here (R1..Rn, R0's hook, the frame
functions) are described by the plain data they are made from, so the entries of a nested break and of R0 are
persisted like any other and a warm process traces none of them; a break whose functions would not be
described (a frame below the root with a closure, globals of no module, a frame's code no locator finds) is
taken as the plain break where the persistent cache is on (convert._nested_break_entry), which is persisted.
Symbols of R0's arguments are carried as at a plain break (inherit_symbols); a CALL's result is not marked
dynamic (carried_loops.inherit_dynamic_results names the plain resume function's slots).
"""
from __future__ import annotations

import os
import types
from typing import Any, Callable

import bytecode
import torch
from bytecode import Instr

from . import emit, lifetimes, local_liveness
from .breaks import BreakKind, Unsupported
from .break_callees import shared_cells
from .break_sites import _SIMPLE, BreakSite
from .codegen import Codegen, FunctionShape, Reconstructor, make_function
from .inherited_symbols import inherit_symbols
from .graph_break import BreakCodegen, _at_line, _Constant, _slot_kind, emit_stack_value
from .normalize import normalize, with_depth
from .resume import _DEAD_ARGS, _ORIGIN, _PROLOGUE_CALLS, _VALUE_ARGS, STACK_PREFIX, layout_key, \
    leading_local, make_resume_code, origin
from .translator import RealCell
from .values import NULL, BoundMethodValue, CellValue, NNModuleValue, SequenceValue, TupleValue, UserFunctionValue
from .values.base import LazyArg

# innermost instructions run in the root's frame as they are (not one that reads its frame: a global store,
# an import, a bare re-raise)
_STEPS = {"CALL", "CALL_FUNCTION_EX"} | (set(_SIMPLE) - {"STORE_GLOBAL", "IMPORT_NAME", "LOAD_BUILD_CLASS",
                                                         "DELETE_DEREF", "BEFORE_WITH", "TYPEALIAS", "TYPEVAR",
                                                         "PARAMSPEC", "TYPEVARTUPLE", "SUBSCRIPT_GENERIC"})
_FRAMEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_INNER_ARG = f"{STACK_PREFIX}in"  # the arguments a nested resume function passes on (dead after its prologue)
_RAW: dict[tuple, types.FunctionType] = {}  # plain resume functions by key: one object per key


def refuse(reason: str) -> Unsupported:
    return Unsupported(BreakKind.UNSUPPORTED_VALUE, f"no nested break: {reason}")


def worth_trying(fn: types.FunctionType, exc: Exception) -> bool:
    """`exc` left the trace of `fn` inside inlined frames, at a root instruction nothing moved."""
    path = exc.__dict__.get("nest_path")
    if not path or len(path) < 2 or path[0][0] is not fn.__code__ or path[0][1] != getattr(exc, "root_index", -1):
        return False
    moved = ("python_loop", "loop_step", "comprehension", "moved_from", "made_site", "frame_eager", "retry_lazy",
             "callees_plain", "split_result", "callee_break", "generator_cm_break", "handler_given_up", "finalizes",
             "frame_reader_index")
    return not any(name in exc.__dict__ for name in moved) and all(index is not None for _, index in path)


class Frame:
    """One frame on the inline stack at the break: where it resumes and what it passes on."""

    def __init__(self, tx: Any, index_after: int, below: list, stacks: list = ()) -> None:
        self.tx = tx
        self.call = self.step = normalize(tx.code).insts[index_after - 1]  # the instruction it is at
        self.code, self.target = origin(tx.code, index_after)
        self.below = below
        self.module_called = False  # reached through a module call (NOTE [Nested breaks through module calls])
        if leading_local(self.code) is not None:
            raise refuse("a frame with zero-argument super()")
        if not all(isinstance(tx.cells.get(n), RealCell) for n in tx.code.co_freevars):
            raise refuse("a frame whose closure was made while tracing")
        if any(tx.cells[n].source is not None for n in tx.code.co_freevars):
            raise refuse("a closure guarded by its code (another function object's cells may come next)")
        if any(_slot_kind(v) not in ("value", "null", "iter", "carried") for v in below):
            raise refuse("a stack slot that is not a value")
        self.cell_values = _cell_values(tx, below + list(stacks), index_after - 1)
        fast = [n for n in tx.locals if not n.startswith(STACK_PREFIX)]
        found = local_liveness.resume_locals(self.code, self.target, fast)
        self.names = (tuple(fast) if found is None else tuple(found[0])) + tuple(self.cell_values)
        self.closure = tuple(tx.cells[name].cell for name in self.code.co_freevars) if self.code.co_freevars \
            else None

    def passed(self) -> list:
        """The locals' values in the order of `names` (Unbound for a dead, unbound one)."""
        return [self.cell_values[n] if n in self.cell_values else self.tx.locals[n] if n in self.tx.locals
                else _Constant(local_liveness.Unbound) for n in self.names]

    def values(self) -> list:
        return [v for v in self.below + self.passed() if v is not NULL and not isinstance(v, LazyArg)]


def _cell_values(tx: Any, below: list, index: int) -> dict[str, Any]:
    """The frame's own cell variables, passed on as locals (their values: NOTE [Cells at breaks]); none may be
    shared with a closure that sees it written later, or be empty (the resume function makes each cell anew).
    `below` holds, besides the frame's stack below its instruction, every frame's whole stack at the break
    (NOTE [Closures passed at a nested break])."""
    own = set(tx.code.co_cellvars)
    cells = {n: c for n, c in tx.cells.items() if n in own}
    if not all(isinstance(c, CellValue) and c.contents is not None for c in cells.values()):
        raise refuse("a cell variable that is empty or passed on as a cell")
    live = below + list(tx.locals.values()) + [c.contents for c in cells.values()] + \
        tx.output.side_effects.values()
    if shared_cells(cells, live, normalize(tx.code).insts, index):
        raise refuse("a cell variable shared with a closure")
    return {n: c.contents for n, c in cells.items()}


def plan(root_fn: types.FunctionType, inner: Any, exc: Exception) -> tuple[list[Frame], BreakSite]:
    """The frames from the root to `inner` (the translator stopped at its instruction), checked to be in scope
    (the module docstring), and the innermost instruction's site."""
    chain = []
    tx = inner
    while tx is not None:
        chain.append(tx)
        tx = tx.parent
    chain.reverse()
    if chain[0].code.co_filename.startswith(_FRAMEJIT_DIR):  # NOTE [Nested breaks below framejit's frames]
        raise refuse("the root is framejit's own function (a compiled module's call)")
    frames = []
    module_calls = []
    stacks = _whole_stacks(chain)  # NOTE [Closures passed at a nested break]
    for tx, child in zip(chain, chain[1:]):
        inst = _checked(tx, tx.current.index)
        if inst.name not in ("CALL", "CALL_FUNCTION_EX") or tx.operands is None:
            raise refuse(f"{inst.name} calls the inner frame")
        slots = tx.operands[len(tx.operands) - _consumed(inst):]
        callee, _ = emit.callee_and_self(slots[0], slots[1], NULL)
        if _callee_code(callee) is not child.code:
            raise refuse("the call is not a direct call of the inner frame's function")
        if isinstance(callee, UserFunctionValue) and getattr(callee.fn, "__framejit_module_called__", False):
            raise refuse("a module-called resume function (its hook serves every call site)")
        module_calls.append(isinstance(callee, NNModuleValue))
        frames.append(Frame(tx, tx.current.index + 1, tx.operands[:len(tx.operands) - _consumed(inst)], stacks))
    inst = _checked(inner, inner.stop_at)
    if inst.name not in _STEPS or inst.name == "RAISE_VARARGS" and inst.arg == 0 or \
            inst.name not in ("CALL", "CALL_FUNCTION_EX") and _SIMPLE[inst.name](inst.arg)[1] > 1:
        raise refuse(f"{inst.name} at the break")  # the step function returns one value (not an unpacking's)
    frames.append(Frame(inner, inst.index + 1, inner.stack[:len(inner.stack) - _consumed(inst)], stacks))
    for frame, module_call in zip(frames[1:], module_calls):
        frame.module_called = module_call
    if any(local_liveness.in_loop(f.code, f.target) for f in frames):  # NOTE [Nested breaks in loops]
        raise refuse("a frame on the path is in a loop")
    if _open_managers(inner.output, chain[0].current.index):  # NOTE [Nested breaks with open managers]
        raise refuse("a context manager entered by a call is still open")
    return frames, BreakSite(inst, _consumed(inst))


# NOTE [Closures passed at a nested break]: a closure made in a frame on the path over one of its cells may be
# live only in the slots an instruction consumes (`checkpoint(lambda t: t * s, x)` at the innermost step, or a
# lambda passed down as an argument of the call into the next frame), or in another frame's locals. The step
# rebuilds it over a cell of its own; a frame whose cell was then passed on as its value (a new cell in the
# resume function) and that writes it after the break (`s = 3.0`) left the closure reading the old value: the
# reentrant checkpoint's recomputation in backward read s = 2.0 where eager reads 3.0 (review hhuntG7 HIGH-1).
# Every frame's cells are checked against the values of every frame's whole stack and locals (a shared cell
# keeps the plain break, which passes it on as the cell itself: NOTE [Cells passed to resume functions]).
def _whole_stacks(chain: list) -> list:
    values = []
    for tx in chain:
        values.extend(tx.operands if tx is not chain[-1] and tx.operands is not None else tx.stack)
        values.extend(tx.locals.values())
        values.extend(getattr(c, "contents", None) for c in tx.cells.values())
    return values


# NOTE [Nested breaks with open managers]: a torch manager entered by a call (`m.__enter__()`,
# `ExitStack.enter_context`) or a @contextmanager manager entered in an inlined frame, still open at the
# break, lives only in the trace: the plain break moves before the root instruction that entered it
# (generator_ctx.break_before_generator_cms), but for a manager entered inside a callee that instruction is
# the root's own call, so a nested break ran the callee's rest with a rebuilt manager never entered: its
# `__exit__` raised AttributeError('prev') eager never raises, or left grad mode off after the call (review
# revF HIGH-1: autocast / inference_mode entered in a middle frame). Such a break keeps the plain break,
# which runs the root's call as Python (eager's managers).
def _open_managers(out, root_index) -> bool:
    from .generator_ctx import _live_at, _unentered_gen_cm
    return any(_live_at(c, root_index) and not _unentered_gen_cm(c)
               for c in out.__dict__.get("live_generator_cms", ()))


def _consumed(inst) -> int:
    """The stack values the instruction reads (its callable's two slots included)."""
    if inst.name == "CALL":
        return inst.arg + 2
    if inst.name == "CALL_FUNCTION_EX":
        return 4 if inst.arg & 1 else 3
    return _SIMPLE[inst.name](inst.arg)[0]


def _checked(tx: Any, index: int):
    """The instruction of `tx` at `index`, outside try and with blocks."""
    insts = normalize(tx.code).insts
    inst = insts[index]
    if inst.handler is not None or with_depth(insts, inst) != 0 or tx.code.co_flags & 0x3a0:  # generators
        raise refuse("inside a try or with block, or in a generator")
    return inst


def _callee_code(callee: Any) -> Any:
    if isinstance(callee, BoundMethodValue):
        callee = callee.func
    if isinstance(callee, UserFunctionValue):
        return callee.fn.__code__
    if isinstance(callee, NNModuleValue) and not _has_hooks(callee.obj):
        forward = type(callee.obj).forward
        return forward.__code__ if isinstance(forward, types.FunctionType) else None
    return None


def _has_hooks(module: torch.nn.Module) -> bool:
    from torch.nn.modules import module as m
    own = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    return any(getattr(module, name, None) for name in own) or any(
        getattr(m, name, None) for name in ("_global_forward_hooks", "_global_forward_pre_hooks",
                                            "_global_backward_hooks", "_global_backward_pre_hooks"))


def resume_functions(frames: list[Frame], produced: int, hooks: Any) -> tuple[Any, int]:
    """The hooked R0 of NOTE [Nested graph breaks] and its number of arguments."""
    inner_fn, inner_args = None, 0
    for depth in range(len(frames) - 1, -1, -1):
        frame = frames[depth]
        kinds = tuple(_slot_kind(v) for v in frame.below)
        layout = kinds + ("value",) * (produced if inner_fn is None else 1)
        inner_fn = raw_resume(frame.code, frame.target, layout, frame.names, frame.tx.f_globals, frame.closure,
                              inner_fn, inner_args, frame.module_called)
        inner_args = inner_fn.__code__.co_argcount
    return hooked_root(hooks.hooks.hooks, inner_fn), inner_args


def raw_resume(code: types.CodeType, target: int, layout: tuple, names: tuple, f_globals: dict, closure: Any,
               inner_fn: Any, inner_args: int, module_called: bool = False) -> types.FunctionType:
    """The plain resume function Rk of NOTE [Nested graph breaks] (one object per key); it remembers what
    made it (NOTE [Nested breaks persisted] in nested_persist.py) and whether its frame was reached through a
    module call (NOTE [Nested breaks through module calls])."""
    key = (code, target, layout_key(layout), names, id(f_globals), tuple(map(id, closure or ())), inner_fn,
           inner_args, module_called)
    made = _RAW.get(key)
    if made is None:
        resume_code = make_resume_code(code, target, layout, names)
        if inner_fn is not None:
            resume_code = _calling_inner(resume_code, code, target, layout, inner_fn, inner_args)
        made = _RAW[key] = types.FunctionType(resume_code, f_globals, resume_code.co_name, None, closure)
        made.__framejit_nested__ = (code, target, layout, names, inner_fn, inner_args)
        made.__framejit_module_called__ = module_called
    return made


def hooked_root(hooks: Any, inner_fn: types.FunctionType) -> Any:
    """R0 through its frame hook (`hooks`: the request's Hooks)."""
    root = hooks._hook(("nested", inner_fn), inner_fn)
    from .resume import eager_function
    if getattr(root, "eager", None) is None:
        root.eager = eager_function(inner_fn)
    root.nested_root = True  # NOTE [Nested breaks persisted] in nested_persist.py
    return root


def _calling_inner(code: types.CodeType, original: types.CodeType, target: int, layout: tuple, inner_fn: Any,
                   n: int) -> types.CodeType:
    """`code` (a resume function's of `original` at `target`) whose prologue calls `inner_fn` with its last
    `n` arguments in place of loading the call's result from its last stack argument."""
    result = f"{STACK_PREFIX}{len(layout) - 1}"
    passed = [f"{_INNER_ARG}{i}" for i in range(n)]
    bc = bytecode.Bytecode.from_code(code)
    at = next(i for i, ins in enumerate(bc) if isinstance(ins, Instr) and ins.name == "LOAD_FAST" and ins.arg == result)
    if getattr(inner_fn, "__framejit_module_called__", False):  # NOTE [Nested breaks through module calls]
        from .caller_frames import ResumeModuleCall
        inner_fn = ResumeModuleCall(inner_fn)
    call = emit.call_const(inner_fn, [Instr("LOAD_FAST", name) for name in passed])
    for ins in call:
        ins.location = bc[at].location
    bc[at:at + 1] = call
    bc.argnames = [name for name in bc.argnames if name != result] + passed
    bc.argcount = len(bc.argnames)
    new = bc.to_code(stacksize=code.co_stacksize + n + 3, compute_exception_stack_depths=False)
    insts = normalize(new).insts
    jump = next(i for i in insts if i.name == "JUMP")
    _ORIGIN[new] = (original, jump.arg - target)
    _PROLOGUE_CALLS[new] = (jump.index - 1, jump.arg)
    _VALUE_ARGS[new] = _VALUE_ARGS.get(code, frozenset()) - {result}
    _DEAD_ARGS[new] = _DEAD_ARGS.get(code, frozenset())
    return new


class NestedBreakCodegen(BreakCodegen):
    """BreakCodegen for the innermost frame of a nested break, emitted into the root's transformed function."""

    def __init__(self, root_fn: types.FunctionType, frames: list[Frame], site: BreakSite, request, hooks) -> None:
        inner = frames[-1].tx
        where = types.SimpleNamespace(__code__=inner.code, __globals__=root_fn.__globals__)
        super().__init__(where, site, inner, request, hooks)
        self.frames = frames

    def values(self) -> list[Any]:
        return [v for f in self.frames for v in f.values()] + self.stack[len(self.below):] + \
            self.tx.output.side_effects.values()

    def _emit_cells(self, rebuild: Reconstructor) -> None:
        rebuild.preload([v for f in self.frames[:-1] for v in f.values()], sourced=True)

    def _emit_step(self, rebuild: Reconstructor):
        """NOTE [Frames around a nested break's step]: the instruction runs in functions that stand for the
        frames F1..Fn (each one's code name, file, line and globals; F(k) calls F(k+1)), so what reads the
        stack (a warning's location and registry, logging, a traceback of what the step raises) sees eager's
        frames; then the root returns R0's result. In a break nested again inside R0 (its frames are R1..Rn)
        they are named as the user's functions, not as resume functions: caller_frames takes a resume
        function's caller for the same user frame, so a `warn(stacklevel=2)` named the line that called the
        compiled function (review revN MED-2)."""
        cg, inst = self.cg, self.site.inst
        start = len(cg.insts)
        operands, spec = self._step_body(rebuild)
        shim = frame_functions(_step_frames(self.frames[1:]), len(operands), spec, inst.name == "RAISE_VARARGS")
        cg.push_null()
        cg.load_const(shim)
        for value in operands:
            rebuild.emit(value)
        cg.call(len(operands))
        if inst.name == "RAISE_VARARGS":
            cg.return_value()
            return _at_line(cg, start, self.frames[0].call)
        produced = 1 if inst.name.startswith("CALL") else _SIMPLE[inst.name](inst.arg)[1]
        if produced == 0:
            cg.emit("POP_TOP")
        hook, nargs = resume_functions(self.frames, produced, self.hooks)
        cg.store_fast("___result0") if produced else None
        self._load_resume_callee(hook, True, ("value",) * nargs, None, [])
        passed: list = []  # what R0 takes, in order (None: the step's result)
        for frame in self.frames:
            for value in frame.below:
                if value is not NULL:
                    emit_stack_value(rebuild, value)
                    passed.append(value)
            if frame is self.frames[-1] and produced:
                cg.load_fast("___result0")
                passed.append(None)
            for value in frame.passed():
                cg.load_fast(value.name) if isinstance(value, LazyArg) else rebuild.emit(value)
                passed.append(value)
        names = hook.fn.__code__.co_varnames[:nargs]  # NOTE [Symbols carried into resume functions]
        inherit_symbols(hook, {f"L['{n}']": v for n, v in zip(names, passed) if v is not None}, self.tx.output)
        if not self.settles:  # NOTE [Arguments handed to resume functions]
            cg.insts += lifetimes.release_marker()
        cg.call(nargs)
        cg.return_value()
        return _at_line(cg, start, self.frames[0].call)

    def _step_body(self, rebuild: Reconstructor) -> tuple[list, tuple]:
        """The values the step's function takes, and its body's description (`_body`)."""
        inst = self.site.inst
        if inst.name == "CALL":
            first, second, *args = self.top
            callee, leading = emit.callee_and_self(first, second, NULL)
            hooked = self._hooked(callee)
            if hooked is not None:
                callee, self_value = _Constant(hooked[0]), hooked[1]
                leading = ([] if self_value is None else [self_value]) + leading
            return [callee, *leading, *args], ("call", tuple(self.tx.kw_names or ()))
        if inst.name == "CALL_FUNCTION_EX":
            first, second, args, *kwargs = self.top
            callee, _ = emit.callee_and_self(first, second, NULL)
            hooked = self._hooked(callee)
            if hooked is not None:
                if not isinstance(args, SequenceValue):
                    raise refuse("*args of unknown length")
                callee, args = _Constant(hooked[0]), TupleValue(([] if hooked[1] is None else [hooked[1]]) +
                                                                list(args.items))
            return [callee, args, *kwargs], ("call_ex", bool(kwargs))
        raw = (*emit.truth_test_prefix(inst), *(r.copy() for r in (*inst.merged, inst.instr)))
        pushes_none = inst.name != "RAISE_VARARGS" and not _SIMPLE[inst.name](inst.arg)[1]
        return list(self.top), ("simple", raw, pushes_none)


def _step_frames(frames: list[Frame]) -> list[tuple]:
    """(code, globals, line) of the frames standing for F1..Fn around the step, with torch's two levels
    above a frame reached through a module call (NOTE [Nested breaks through module calls])."""
    from .caller_frames import _module_call_levels
    out = []
    for frame in frames:
        if frame.module_called:
            call_impl, wrapped = _module_call_levels()
            out.append((torch.nn.Module._wrapped_call_impl.__code__, wrapped.globals, wrapped.lineno))
            out.append((torch.nn.Module._call_impl.__code__, call_impl.globals, call_impl.lineno))
        out.append((frame.code, frame.tx.f_globals, frame.call.lineno))
    return out


def _body(spec: tuple) -> Callable[[Codegen, list[str]], None]:
    """What writes the step's body (given its arguments' names), from `_step_body`'s description: a call
    (its keyword names), a call with *args (with **kwargs or not), or the instructions themselves."""
    def body(cg: Codegen, names: list[str]) -> None:
        if spec[0] != "simple":
            cg.push_null()
        for i, name in enumerate(names):
            cg.load_fast(name)
            if i == 0 and spec[0] == "call_ex":
                cg.null_after_callable()
        if spec[0] == "call":
            cg.call(len(names) - 1, spec[1])
        elif spec[0] == "call_ex":
            cg.call_ex(spec[1])
        else:
            cg.insts += [raw.copy() for raw in spec[1]]
            if spec[2]:
                cg.load_const(None)
    return body


def frame_functions(frames: list[tuple], n: int, spec: tuple, raises: bool) -> Any:
    """F1 of NOTE [Frames around a nested break's step]: a function of `n` arguments; `frames` holds
    (code, globals, line) of F1..Fn, `spec` describes the step's body (`_body`), which `raises` (a raise
    statement) or returns a value."""
    names = [f"___arg{i}" for i in range(n)]
    inner = None
    for code, f_globals, lineno in reversed(frames):
        cg = Codegen()
        if inner is None:
            _body(spec)(cg, names)
        else:
            cg.push_null()
            cg.load_const(inner)
            for name in names:
                cg.load_fast(name)
            cg.call(n)
        if inner is not None or not raises:
            cg.return_value()
        _at_line(cg, 0, types.SimpleNamespace(lineno=lineno))
        # the user's function, not R(k)'s (NOTE [Frames around a nested break's step])
        shape = FunctionShape(n, 0, 0, 0, tuple(names), code.co_name, getattr(code, "co_qualname", code.co_name),
                              code.co_filename, code.co_firstlineno)
        inner = make_function(shape, cg, f_globals, None, None, suffix="step")
    inner.__framejit_step__ = (tuple(frames), n, spec, raises)  # NOTE [Nested breaks persisted]
    return inner
