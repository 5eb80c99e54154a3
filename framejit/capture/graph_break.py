"""Graph breaks: compile the graph up to an unsupported instruction, run that instruction in plain Python,
and continue in a resume function (resume.py) that enters through the frame hook.

The first trace raises Unsupported at instruction `i` of the outermost frame (a break inside an inlined
call surfaces at the outermost CALL where it cannot break inside: NOTE [Nested graph breaks] in
nested_breaks.py). A second trace of the same frame stops right before `i`, with the stack and locals intact. The generated function then:
1. calls the compiled graph (its outputs: every tensor made by the graph that is still live),
2. rebuilds only the stack values that instruction `i` consumes and executes `i` itself (a call to a
   user function or module goes through a FrameHook, so the callee is captured as its own frame),
3. for each way control can leave `i` (fall through, or jump), calls the resume function with the rest of
   the stack, the values `i` produced, and the live locals, and returns what it returns.

NOTE [Module calls at breaks]: Python has no frame-evaluation hook, so code called from residual Python is
captured only if the call goes through a FrameHook. A user function or method callee is replaced by its
hook; a module callee `m(...)` becomes `hook(type(m).forward)(m, ...)`, which equals `m(...)` because the
module's hooks are guarded absent, or `hook(module_hooks.call_with_hooks)(m, ...)` when it has hooks
(NOTE [Module hooks]).

NOTE [Breaks inside with-blocks]: a graph ends in the global state it started with (open autocast and
inference-mode blocks are exited at its end, the grad mode is reset). Each torch state block open at the
break (grad mode, inference mode, autocast) is rebuilt as a block object (context.block_for). A call or a
branch at the break runs through `run_in_blocks`, which enters the blocks around it (so an exception exits
them as the frame's exception table would) and returns the grad mode the step left. The resume function's
prologue re-enters the blocks with BEFORE_WITH, which leaves their `__exit__` in the stack slots where the
original code expects them, and sets that grad mode; its trace records the entries like any with-block.
Other instructions inside with-blocks, and with-blocks over user context managers whose `__exit__` may
suppress an exception, take the tail form of NOTE [Breaks inside try blocks].

Breaks are not taken (the frame runs eagerly instead, still correct) in generators, at instructions
without a break form here (a LOAD_FAST of an argument that cannot be modelled, FOR_ITER other than a
carried loop's step: NOTE [Loops carried across breaks] in carried_loops.py), and where a closure made
before the break shares a cell that is empty there and assigned later (NOTE [Cells at breaks]).
"""
from __future__ import annotations

import functools
import inspect
import operator
import types
from typing import Any, Callable

import torch
import bytecode
from bytecode import Instr, Label

from .apply_at_break import routed_callee
from .breaks import BreakKind, Unsupported
from .context import ExitOnError, ExitValue, block_for, run_in_blocks
from .frame_locals import emit_user_frame_call
from . import block_loops, carried_loops, emit, inlined_comprehensions, lifetimes, local_liveness, python_loops, \
    python_loop_records
from .codegen import GRAPH_OUT, Codegen, Reconstructor
from .codegen_runtime import delete_cell, new_cell
from .normalize import Inst, jump_targets, normalize
from .caller_frames import log, logging_call
from .break_callees import (shared_cells, closure_from_outside, hookable, makes_generator, modelled,
                            names_its_caller, object_call, torch_internals, traceback_module)
from .inherited_symbols import inherit_symbols
from .break_sites import _CONDITIONAL, _LOADS, _OR_POP, _SIMPLE, BreakSite
from .resume import ITERATOR_KINDS, STACK_PREFIX, leading_first, origin
from .graph_calls import note_loop_break
from .kept_joints import is_speculated, settling
from .lookup import module_call_default
from .translator import LazyArg, RealCell
from .values import (NULL, BoundMethodValue, CellValue, ConstantValue, IteratorValue, ListValue,
                     NNModuleValue, SequenceValue, TupleValue, UserFunctionValue, Value)
from .values.iterator_claims import claimed

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
        note_loop_break(tx.output, self.stack)  # NOTE [Unbinds whose loops break] in graph_calls.py
        # the torch state blocks open at the break (NOTE [Breaks inside with-blocks]); a with-block over
        # a user context manager leaves its bound __exit__ instead, and the break takes the tail form
        self.blocks = [v for v in self.stack if isinstance(v, ExitValue)]
        # every with-block's exit, in stack order: a torch block's ExitValue, or a user context manager's
        # bound __exit__ (it stays entered; `run_in_blocks` calls it on an exception)
        self.exits = [v for v in self.stack if isinstance(v, ExitValue) or _user_exit(v)]
        if not site.tail and (site.with_depth != len(self.exits) or not all(map(_never_suppresses, self.exits))):
            self.site = site = BreakSite(site.inst, 0, tail=True)
        self._blocks_tuple = TupleValue([])  # stands for the local holding run_in_blocks's tuple
        self.below = self.stack[:len(self.stack) - site.consumed]
        self.top = self.stack[len(self.stack) - site.consumed:]
        if any(isinstance(v, CellValue) or isinstance(v, TupleValue) and any(isinstance(i, CellValue) for i in v.items)
               for v in self.stack):  # a cell, or a closure's tuple of cells (LOAD_CLOSURE; BUILD_TUPLE)
            raise Unsupported(BreakKind.UNSUPPORTED_VALUE, "a cell is live at the break")
        # NOTE [Cells at breaks]: the frame's own cell variables that hold a value are passed to the resume
        # function like locals; its MAKE_CELL puts each into a new cell. A closure made before the break
        # keeps the old cell: exact as long as neither side assigns the variable again. A cell that a
        # closure shares and that is assigned again later is passed as the cell itself, and so is a cell a
        # resume function got that way (NOTE [Cells passed to resume functions] in resume.py).
        own = set(fn.__code__.co_cellvars)
        cells = {n: c for n, c in tx.cells.items() if n in own and isinstance(c, CellValue)}
        shared = shared_cells(cells, self.stack + list(tx.locals.values()) + [c.contents for c in cells.values()] +
                              tx.output.side_effects.values(), normalize(fn.__code__).insts, site.inst.index, site.loop)
        self.cell_args = {n: c for n, c in tx.cells.items() if n in shared or n in own and _passed_cell(c, n)}
        if self.cell_args and site.frame_reader:
            raise Unsupported(BreakKind.UNSUPPORTED_VALUE, "a frame reader at a break where a cell is passed on")
        self.cell_values = {n: c.contents for n, c in cells.items() if c.contents is not None and n not in shared}
        # the stack arguments of a resume function are dead after its prologue
        self.local_names = [n for n in tx.locals if not n.startswith(STACK_PREFIX)] + list(self.cell_values) + \
            list(self.cell_args)

    def _cell_contents(self) -> list[Any]:
        """What the cells passed on hold (graph outputs among them stay live)."""
        return [c.contents for c in self.cell_args.values() if isinstance(c, CellValue)]

    def _emit_cells(self, rebuild: Reconstructor) -> None:
        """Build each cell made while tracing that is passed on as a cell (one object, shared with the
        closures rebuilt over it: NOTE [Cells shared by rebuilt closures]) into a local."""
        for cell in self.cell_args.values():
            if isinstance(cell, CellValue) and id(cell) not in rebuild.preloaded:
                rebuild._call_const(new_cell, [] if cell.contents is None else [cell.contents])
                name = f"___pre{len(rebuild.preloaded)}"
                self.cg.store_fast(name)
                rebuild.preloaded[id(cell)] = name
                rebuild._kept.append(cell)

    def _emit_local(self, rebuild: Reconstructor, name: str) -> None:
        cell = self.cell_args.get(name)
        if cell is None:
            rebuild.emit(self._local(name))
        elif isinstance(cell, CellValue):
            self.cg.load_fast(rebuild.preloaded[id(cell)])
        else:
            cell.source.reload(self.cg)  # the argument holding the real cell

    def _local(self, name: str) -> Any:
        if name in self.cell_args:
            cell = self.cell_args[name]
            return cell.contents if isinstance(cell, CellValue) else None
        return self.cell_values[name] if name in self.cell_values else self.tx.locals[name]

    def _live_locals(self) -> list[Any]:
        return [v for v in map(self._local, self.local_names) if v is not None and not isinstance(v, LazyArg)]

    def _names_at(self, index: int) -> tuple[str, ...]:
        """The locals passed to the resume function at canonical `index` of this frame's code: NOTE [Resume
        functions take the same locals on every pass] (local_liveness.py); all bound ones at a frame reader's
        call, whose callee lists them."""
        code, target = origin(self.fn.__code__, index)
        fast = [n for n in self.tx.locals if not n.startswith(STACK_PREFIX)]
        found = None if self.site.frame_reader else local_liveness.resume_locals(code, target, fast)
        if found is None:
            return tuple(self.local_names)
        return tuple(found[0]) + tuple(self.cell_values) + tuple(self.cell_args)

    def _tail_names(self) -> tuple[str, ...]:
        """A tail function's locals (NOTE [Breaks inside try blocks], [Loops run as Python]): those passed at
        its own instruction, and the locals dead there that the resume functions it trampolines to take
        (dead there, such a local may hold `Unbound` in the tail's frame: NOTE [Resume functions take the
        same locals on every pass])."""
        inst = self.site.inst
        names = self._names_at(inst.index)
        code, target = origin(self.fn.__code__, inst.index)
        if self.site.frame_reader or local_liveness.resume_locals(code, target, []) is None:
            return names
        exits = [python_loops.loop_exit(self.site.loop, normalize(self.fn.__code__).insts)] if self.site.loop \
            else [inst.index + 1] + (
            [inst.arg] if inst.name in _CONDITIONAL or inst.name in _OR_POP else [])
        wanted = {n for index in exits for n in self._names_at(index) if n not in names}
        fast = [n for n in names if n not in self.cell_values and n not in self.cell_args]
        loop = normalize(code).insts[origin(self.fn.__code__, self.site.loop.index)[1]] if self.site.loop else None
        after = block_loops.bound_after_loop(normalize(code).insts, loop) | block_loops.unbound_after_loop(code, loop) \
            if loop else frozenset()  # NOTE [Locals a loop run as Python may leave unbound]
        fast = local_liveness.in_order(code, fast + list(local_liveness.dead_arguments(code, target, wanted)) +
                                       [n for n in after if n not in fast and n not in self.tx.locals])
        return tuple(fast) + tuple(self.cell_values) + tuple(self.cell_args)

    def _passed(self, name: str) -> Any:
        """A local's value for the resume function: `Unbound` for a dead one that is not bound."""
        if name in self.tx.locals or name in self.cell_values or name in self.cell_args:
            return self._local(name)
        return _Constant(local_liveness.Unbound)

    def values(self) -> list[Any]:
        return self.stack + self._live_locals() + self.tx.output.side_effects.values()

    def emit(self, compiled: Callable | None, output_index: dict[int, int], inputs) -> Codegen:
        cg, rebuild = self.cg, Reconstructor(self.cg, output_index, GRAPH_OUT, self.fn.__globals__)
        rebuild.output = self.tx.output  # NOTE [Set tables rebuilt exactly]: hash-seed guards
        self.settles = compiled if is_speculated(compiled) else None  # NOTE [Joints kept across a plain break]
        from .raising_floats import floats_then_draws  # NOTE [Rebuilt floats that raise]: floats, graph, draws
        floats_then_draws(rebuild, self.values(), self.tx.output, graph=(compiled, inputs))
        live = self.stack + self._live_locals()
        # NOTE [Reload before the break's call]: a value read while tracing from a source (`a = L[0]`,
        # `g = D.get(k)`, the first item of a list read lazily: NOTE [Lists from outside]) is loaded now,
        # before side-effect replay and before the unsupported call, which may change that container
        # (a framejit.disable'd function, a print hook, user code at an attribute load); read after it,
        # the resume function would get the changed value where eager kept the one read before.
        rebuild.preload(live + self.tx.output.side_effects.values(), sourced=True)
        self._emit_cells(rebuild)  # NOTE [Cells passed to resume functions]
        self.tx.output.side_effects.emit(rebuild)  # the state the unsupported instruction observes
        rebuild.preload(rebuild.after_replay, sourced=False)  # NOTE [Dict iterators built after replay]
        restore_grad_mode(cg, self.tx.output)
        self._make_blocks(rebuild)
        return self._emit_step(rebuild)

    def _emit_step(self, rebuild: Reconstructor) -> Codegen:
        """The unsupported instruction itself, run in plain Python, then the call of the resume function."""
        cg, inst = self.cg, self.site.inst
        step_start = len(cg.insts)
        if self.site.tail:
            self._resume(rebuild, inst.index, produced=0, hooked=False)
        elif inst.name == "CALL" and self.site.frame_reader:
            self._emit_reader_call(rebuild)
            body = self._resume(rebuild, inst.index + 1, produced=1)
            carried_loops.inherit_dynamic_results(body, inst, self.top, len(self.below))
        elif inst.name == "CALL":
            self._emit_call(rebuild)
            body = self._resume(rebuild, inst.index + 1, produced=1)
            carried_loops.inherit_dynamic_results(body, inst, self.top, len(self.below))
            carried_loops.mark_break_result(self, body, len(self.below))  # split_result, shaped_by_data
        elif inst.name == "CALL_FUNCTION_EX":
            self._emit_call_ex(rebuild)
            self._resume(rebuild, inst.index + 1, produced=1)
        elif inst.name in _CONDITIONAL or inst.name in _OR_POP:
            self._emit_branch(rebuild)
        elif inst.name == "FOR_ITER":
            self._emit_for_iter(rebuild)
        elif inst.name in _LOADS and self.exits and inst.name != "LOAD_GLOBAL":
            self._emit_load_in_blocks(rebuild, inst)
        elif inst.name in _LOADS:
            for value in self.top:
                rebuild.emit(value)
            self._resume(rebuild, inst.index + 1, produced=1, with_null=self._emit_load(inst))
        elif inst.name == "DELETE_DEREF":
            self._emit_delete_cell(inst)
            self._resume(rebuild, inst.index + 1, produced=0)
        else:
            for value in self.top:
                rebuild.emit(value)
            cg.insts += emit.truth_test_prefix(inst)  # NOTE [Canonical instructions and raw ones]
            cg.insts += [raw.copy() for raw in (*inst.merged, inst.instr)]
            produced = _SIMPLE.get(inst.name, lambda a: (0, 0))(inst.arg)[1] if inst.name != "CALL_FUNCTION_EX" else 1
            if inst.name == "RAISE_VARARGS":
                return _at_line(cg, step_start, inst)
            body = self._resume(rebuild, inst.index + 1, produced=produced)
            if produced == 1:  # NOTE [Dynamic ints formatted into strings] in carried_loops.py
                carried_loops.inherit_dynamic_results(body, inst, self.top, len(self.below))
                carried_loops.mark_break_result(self, body, len(self.below), split=False)  # `x[mask]`
        return _at_line(cg, step_start, inst)

    def _emit_load_in_blocks(self, rebuild: Reconstructor, inst: Inst) -> None:
        """getattr(obj, name) inside the blocks (user attribute code runs there), then the resume function."""
        cg = self.cg
        cg.push_null()
        for value in self._in_blocks_prefix(rebuild):
            rebuild.emit(value)
        cg.load_const(getattr)
        rebuild.emit(self.top[0])
        cg.load_const(inst.arg)
        cg.call(5)
        self._unpack_in_blocks()
        self._resume(rebuild, inst.index + 1, produced=1, with_null=inst.name == "LOAD_METHOD")

    def _emit_delete_cell(self, inst: Inst) -> None:
        """`del v` of a real cell (NOTE [Deleting a closure variable]): `delete_cell(cell, v, own)` empties
        it, or raises CPython's error when it is empty already (a cell made while tracing breaks here only
        when it is empty: the step raises, on a new empty cell)."""
        cell = self.tx.cells[inst.arg]
        cg = self.cg
        cg.push_null()
        cg.load_const(delete_cell)
        if not isinstance(cell, RealCell):
            cg.push_null()
            cg.load_const(new_cell)
            cg.call(0)
        elif cell.source is not None:
            cell.source.reload(cg)
        else:
            cg.load_const(cell.cell)
        cg.load_const(inst.arg)
        cg.load_const(inst.arg in self.fn.__code__.co_cellvars)
        cg.call(3)
        cg.emit("POP_TOP")

    def _make_blocks(self, rebuild: Reconstructor) -> None:
        """Build the block objects of the open with-blocks into locals (NOTE [Breaks inside with-blocks]);
        rebuilding an open block's exit value then loads its block object. Then the tuple of blocks
        `run_in_blocks` enters, user context managers' exits wrapped in ExitOnError."""
        cg = self.cg
        for i, value in enumerate(self.blocks):
            ctor, args = block_for(value)
            cg.push_null()
            cg.load_const(ctor)
            for arg in args:
                cg.load_const(arg)
            cg.call(len(args))
            name = f"___block{i}"
            cg.store_fast(name)
            rebuild.preloaded[id(value)] = name
        if self.exits and not self.site.tail:
            for value in self.exits:
                if isinstance(value, ExitValue):
                    rebuild.emit(value)
                else:
                    cg.push_null()
                    cg.load_const(ExitOnError)
                    rebuild.emit(value)
                    cg.call(1)
            cg.build("BUILD_TUPLE", len(self.exits))
            cg.store_fast("___blocks")
            rebuild.preloaded[id(self._blocks_tuple)] = "___blocks"

    def _in_blocks_prefix(self, rebuild: Reconstructor) -> list[Value]:
        """Inside with-blocks, the step becomes `run_in_blocks(blocks, grad, fn, ...)`: the callable
        is loaded and its leading arguments returned; `_unpack_in_blocks` follows the call."""
        if not self.exits:
            return []
        self.cg.load_const(run_in_blocks)
        return [self._blocks_tuple, ConstantValue(self.tx.output.grad_enabled)]

    def _unpack_in_blocks(self) -> None:
        if self.exits:
            self.cg.emit("UNPACK_SEQUENCE", 2)  # (grad mode after the step, its result)
            self.cg.store_fast("___grad")

    def _emit_call(self, rebuild: Reconstructor) -> None:
        """CALL at the break. The callee goes through its frame hook where it has one; inside open
        with-blocks the call runs through `run_in_blocks`."""
        first, second, *args = self.top
        callee, leading = emit.callee_and_self(first, second, NULL)
        hooked = self._hooked(callee)
        if hooked is not None:
            callee, self_value = hooked
            leading = ([] if self_value is None else [self_value]) + leading
        cg = self.cg
        cg.push_null()
        prefix = self._in_blocks_prefix(rebuild)
        for value in prefix:
            rebuild.emit(value)
        cg.load_const(callee) if hooked is not None else rebuild.emit(callee)
        for value in leading + args:
            rebuild.emit(value)
        wrapped = len(prefix) + 1 if self.exits else 0  # run_in_blocks's own arguments, callee included
        cg.call(wrapped + len(leading) + len(args), self.tx.kw_names)
        self._unpack_in_blocks()

    def _emit_reader_call(self, rebuild: Reconstructor) -> None:
        """CALL at a break that leads to a frame reader: made directly, from a frame holding the user's
        locals (NOTE [Breaks at calls that read frames] in frame_locals.py)."""
        first, second, *args = self.top
        callee, leading = emit.callee_and_self(first, second, NULL)

        def operands(load: Callable[[Any], None]) -> None:
            self.cg.push_null()
            for value in [callee, *leading, *args]:
                load(value)
        user_locals = {n: self._local(n) for n in self.local_names}
        emit_user_frame_call(self.cg, rebuild, self.fn, user_locals, operands,
                             lambda: self.cg.call(len(leading) + len(args), self.tx.kw_names),
                             ([callee, *leading, *args], tuple(self.tx.kw_names or ()), self.site.inst.lineno))

    def _emit_call_ex(self, rebuild: Reconstructor) -> None:
        """f(*args, **kwargs) at the break, hooked and wrapped like `_emit_call`."""
        first, second, args, *kwargs = self.top
        callee, _ = emit.callee_and_self(first, second, NULL)
        hooked = self._hooked(callee)
        cg = self.cg
        cg.push_null()
        if hooked is None and not self.exits:
            rebuild.emit(callee)
            cg.null_after_callable()
            rebuild.emit(args)
        else:
            if not isinstance(args, SequenceValue):
                raise Unsupported(BreakKind.UNSUPPORTED_CALL, "*args of unknown length at a break")
            prefix: list[Value] = []
            target = callee
            if hooked is not None:
                target, self_value = hooked
                target = _Constant(target)
                prefix = [] if self_value is None else [self_value]
            if self.exits:
                prefix = self._in_blocks_prefix(rebuild) + [target] + prefix  # loads run_in_blocks
            else:
                rebuild.emit(target)
            cg.null_after_callable()
            rebuild.emit(TupleValue(prefix + list(args.items)))
        for value in kwargs:
            rebuild.emit(value)
        cg.call_ex(bool(kwargs))
        self._unpack_in_blocks()

    def _hooked(self, callee: Value) -> tuple[Any, Value | None] | None:
        """A callee that should run through the frame hook: (hook, bound self or None).

        A module call becomes a call of its class's `forward` through a hook, with the module as self:
        the same as `module(...)` because its hooks are guarded absent (NOTE [Module calls at breaks]); a
        module with hooks, of `call_with_hooks` or `call_with_backward_hooks` (NOTE [Module hooks]).
        """
        function = callee.func if isinstance(callee, BoundMethodValue) else callee
        routed = routed_callee(self.hooks, callee)  # checkpoint, warnings.warn, Function.apply (apply_at_break.py)
        if routed is not None:
            return routed
        if isinstance(function, UserFunctionValue) and logging_call(function.fn):
            return log, callee  # NOTE [Logging past the hook]
        if isinstance(function, UserFunctionValue) and (names_its_caller(function.fn) or modelled(function.fn)
                                                         or makes_generator(function.fn)
                                                         or torch_internals(function.fn)
                                                         or traceback_module(function.fn)):
            return None
        if python_loops.comprehension_function(callee):  # NOTE [Comprehensions called at breaks]
            return self.hooks.comprehension_call(), callee
        if isinstance(callee, UserFunctionValue) and hookable(callee):
            if getattr(callee.fn, "__framejit_module_called__", False):  # NOTE [Nested breaks through module calls]
                return self.hooks.module_forward(callee.fn), None
            return self.hooks.function(callee.fn), None
        if isinstance(callee, BoundMethodValue) and isinstance(callee.func, UserFunctionValue) and hookable(callee.func):
            return self.hooks.function(callee.func.fn), callee.self_value
        function = callee.func if isinstance(callee, BoundMethodValue) else callee
        if isinstance(function, UserFunctionValue) and closure_from_outside(function) \
                and (function is callee or callee.source is not None or isinstance(callee, BoundMethodValue)):
            # a bound method made while tracing (`func.__get__(obj, cls)`) is rebuilt from its function's
            # source and its self, so the run-time function object reaches call_through_hook too
            return self.hooks.call_through_hook(), callee  # NOTE [Closures called at breaks] in convert.py
        if (call := object_call(self.tx, callee)) is not None:  # NOTE [Callable objects at breaks]
            return self.hooks.function(call), callee
        if isinstance(callee, NNModuleValue) and callee.source is not None and not _forward_on_instance(self.tx, callee):
            forward = type(callee.obj).forward
            if isinstance(forward, types.FunctionType) and module_call_default(type(callee.obj)):
                from .calls import _guard_call_path  # the routing relies on torch's own __call__, _call_impl: pinned
                _guard_call_path(self.tx, type(callee.obj))
                from .module_hooks import callee_at_break
                target = callee_at_break(self.tx, callee)  # NOTE [Module hooks]
                if target is forward:  # NOTE [Module calls past the hook] in caller_frames.py
                    return self.hooks.module_forward(target), callee
                return None if target is None else (self.hooks.function(target), callee)
        return None

    def _emit_branch(self, rebuild: Reconstructor) -> None:
        inst, cg = self.site.inst, self.cg
        if self.exits:  # the truth test (Tensor.__bool__) runs inside the blocks
            cg.push_null()
            for value in self._in_blocks_prefix(rebuild):
                rebuild.emit(value)
            cg.load_const(operator.truth)
            rebuild.emit(self.top[0])
            cg.call(4)
            self._unpack_in_blocks()
        else:
            rebuild.emit(self.top[0])
        taken = Label()
        cg.insts += emit.conditional_jump(inst.name, taken)
        self._resume(rebuild, inst.index + 1, produced=0)
        cg.insts.append(taken)
        self._resume(rebuild, inst.arg, produced=1 if inst.name in _OR_POP else 0)

    def _emit_for_iter(self, rebuild: Reconstructor) -> None:
        """A carried loop's step in Python (NOTE [Loops carried across breaks]): the resume function of the
        body with the iterator and the item, or the one after the loop once the iterator is exhausted."""
        inst, cg, iterator = self.site.inst, self.cg, self.stack[-1]
        cg.push_null()
        cg.load_const(carried_loops.loop_iterator)
        rebuild.emit(iterator)
        cg.call(1)
        cg.store_fast("___loop")
        rebuild.preloaded[id(iterator)] = "___loop"  # the body's resume function gets this same iterator
        rebuild._kept.append(iterator)
        cg.push_null()
        cg.load_const(carried_loops.loop_next)
        cg.load_fast("___loop")
        cg.call(1)
        cg.store_fast("___item")
        cg.push_null()
        cg.load_const(carried_loops.loop_done)
        cg.load_fast("___item")
        cg.call(1)
        done = Label()
        cg.insts += emit.conditional_jump("POP_JUMP_IF_TRUE", done)
        cg.load_fast("___item")
        body = self._resume(rebuild, inst.index + 1, produced=1)
        carried_loops.inherit_steps(self.tx.output, body, iterator, len(self.below) - 1)
        cg.insts.append(done)
        self.below = self.stack[:-1]
        self._resume(rebuild, inst.arg, produced=0)

    def _emit_load(self, inst: Inst) -> bool:
        """The load at the break, as a plain load of one value; True when CPython would have pushed a
        NULL below it (a method load, or a global loaded for a call)."""
        if inst.name == "LOAD_ATTR":
            self.cg.insts.append(inst.instr.copy())
            return False
        if inst.name == "LOAD_METHOD":
            self.cg.load_attr(inst.arg)
            return True
        push_null, name = inst.arg
        self.cg.insts.append(emit.load_global(name))
        return push_null

    def _resume(self, rebuild: Reconstructor, index: int, produced: int, hooked: bool = True,
                with_null: bool = False) -> Any:
        """Call the resume function at `index` with the stack below the instruction, the `produced` values
        it left (with the NULL of a method or global load for a call when `with_null`) and the locals."""
        cg = self.cg
        temps = [f"___result{i}" for i in range(produced)]
        for name in reversed(temps):
            cg.store_fast(name)
        made = ("value",) * produced
        layout = tuple(_slot_kind(v) for v in self.below) + (emit.with_null(made) if with_null else made)
        code, target = origin(self.fn.__code__, index)
        successors = () if hooked or self.site.loop else self._tail_successors()
        loop = self._python_loop() if not hooked and self.site.loop else None
        names = self._names_at(index) if hooked else self._tail_names()
        hook = self.hooks.resume(code, target, layout, names, hooked, successors, loop, tuple(self.cell_args))
        if hooked and local_liveness.in_loop(code, target):  # NOTE [Resume functions take the same locals on
            hook.entry_budget = 2  # every pass]: it serves the first pass and the later ones
        # NOTE [Symbols carried into resume functions]
        inherit_symbols(hook, {**{f"L['{STACK_PREFIX}{i}']": v for i, v in enumerate(self.below)},
                               **{f"L['{n}']": self._local(n) for n in names if n not in self.cell_args
                                  and (n in self.tx.locals or n in self.cell_values)},
                               **{f"L['{n}'].cell_contents": self._local(n) for n in self.cell_args
                                  if self._local(n) is not None}}, self.tx.output)
        first, rest = leading_first(code, names)  # NOTE [The instance comes first] in resume.py
        nargs = self._load_resume_callee(hook, hooked, layout, first, rest)
        if first in names:
            self._emit_passed(rebuild, first)
        elif first is not None:  # unbound at the break: the prologue deletes it
            cg.load_const(None)
        callee_slot = self._tail_callee() if not hooked else None
        for position, value in enumerate(self.below):
            if callee_slot is not None and position == callee_slot[0]:
                self._emit_hooked_callee(rebuild, *callee_slot[1:])
            elif value is not NULL:
                emit_stack_value(rebuild, value)
        for name in temps:
            cg.load_fast(name)
        for name in rest:
            self._emit_passed(rebuild, name)
        if self.blocks:  # the grad mode the prologue sets after re-entering the blocks
            cg.load_const(self.tx.output.grad_enabled) if not hooked else cg.load_fast("___grad")
        if not self.settles:  # NOTE [Arguments handed to resume functions]: the frame keeps no local
            cg.insts += lifetimes.release_marker()
        cg.call(nargs)
        cg.return_value()
        return hook

    def _load_resume_callee(self, hook: Any, hooked: bool, layout: tuple, first: Any, rest: list) -> int:
        """Start the call of the resume function `hook`; the number of arguments it takes (NOTE [Arguments
        handed to resume functions])."""
        cg = self.cg
        nargs = sum(kind != "null" for kind in layout) + (first is not None) + len(rest) + bool(self.blocks)
        cg.push_null()
        if self.settles:
            cg.load_const(settling(hook, self.settles))  # NOTE [Joints kept across a plain break]
        elif hooked and type(hook).__name__ == "FrameHook":  # a plain function of nargs parameters
            cg.load_const(lifetimes.caller(hook, nargs))
        else:
            cg.load_const(hook)
        return nargs

    def _emit_passed(self, rebuild: Reconstructor, name: str) -> None:
        """Load the value of local `name` passed to a resume function."""
        value = self._passed(name)
        if self.site.frame_reader:  # stored before the call (NOTE [Breaks at calls that read frames])
            self.cg.load_fast(name)
        elif name in self.cell_args:  # NOTE [Cells passed to resume functions]
            self._emit_local(rebuild, name)
        elif isinstance(value, LazyArg):
            self.cg.load_fast(value.name)
        else:
            rebuild.emit(value)


    def _python_loop(self) -> tuple:
        """(FOR_ITER index, hook after the loop, stack layout there) of a loop run as Python (NOTE [Loops
        run as Python] in python_loops.py): the stack below the loop's iterable or iterator."""
        loop = self.site.loop
        if self.site.inst.name in ("GET_ITER", "FOR_ITER"):
            slot = len(self.stack) - 1
        else:  # the resume point inside the body: the loop's iterator is the last one on the stack
            slot = max(i for i, v in enumerate(self.stack) if _slot_kind(v) in ITERATOR_KINDS)
        if loop.name == "CALL":  # its function under the range (NOTE [Comprehensions over symbolic ranges]),
            slot -= 1 if loop.arg == 0 else 3  # and a generator expression's consumer and NULL under that
        exit_at = python_loops.loop_exit(loop, normalize(self.fn.__code__).insts)
        after_block = exit_at != block_loops.natural_exit(loop)
        layout = tuple(_slot_kind(v) for v in self.stack[:slot]) + (
            ("value",) if loop.name == "CALL" and not after_block else ())
        code, exit_index = origin(self.fn.__code__, exit_at)
        names = self._tail_names()  # its trampoline passes the tail function's locals
        comp = inlined_comprehensions.at_loop(code, origin(self.fn.__code__, loop.index)[1])
        if after_block:  # NOTE [Loops run as Python at the end of a with-block], [Comprehensions ending a with-block]:
            depth = block_loops.with_depth_exited(normalize(self.fn.__code__).insts, loop)  # torch state blocks,
            if depth < 1 or layout[-depth:] != ("block",) * depth:  # exited before the trampoline
                raise Unsupported(BreakKind.DYNAMIC_CONTROL_FLOW, "a loop run as Python at the end of a with-block "
                                  "over a context manager that is not a torch state block")
            layout = layout[:-depth]
            slot -= depth
        if loop.name == "CALL" and "block" not in layout:  # NOTE [Comprehensions over symbolic ranges]
            pass  # a NULL under it is passed as a comprehension's is (NOTE [Breaks inside inlined comprehensions])
        elif comp is not None and "block" not in layout:  # NOTE [Breaks inside inlined comprehensions]
            exit_index, layout, names = inlined_comprehensions.after_loop(code, comp, layout, names)
        elif any(kind in ("null", "block") for kind in layout):
            raise Unsupported(BreakKind.DYNAMIC_CONTROL_FLOW, "a loop run as Python with a NULL or a block "
                              "under it")
        cells = tuple(n for n in self.cell_args if n in names)
        hook = self.hooks.resume(code, exit_index, layout, names, cells=cells)
        if self._over_symbolic_range() and (loop.name == "CALL" or comp is not None and "block" not in layout):
            result = block_loops.stored_result(normalize(self.fn.__code__).insts, loop) if after_block else \
                f"{STACK_PREFIX}{len(layout) - 1}" if loop.name == "CALL" or comp.result_on_stack else comp.result_var
            callees = self.stack[slot + depth:slot + depth + 2] if after_block else self.stack[slot:slot + 2]
            keyed = python_loops.keyed_result(code, loop, comp, callees)
            carried_loops.changing_result(hook, result, keyed)  # NOTE [Comprehension results of changing length]
            # NOTE [Symbols carried into resume functions]: the loop runs in Python, its exit calls `hook`
            inherit_symbols(hook, {**{f"L['{STACK_PREFIX}{i}']": v for i, v in enumerate(self.stack[:slot])},
                                   **{f"L['{n}']": self._local(n) for n in names
                                      if n not in self.cell_args and n in self.tx.locals}}, self.tx.output)
        else:  # NOTE [Loops over sequences of changing length]: what is opaque at the loop stays so after it
            hook.dynamic_ints = hook.dynamic_ints | {f"L['{n}']" for n in names if n in self.tx.locals and
                                                     type(self._local(n)) is carried_loops.OpaqueSequenceValue}
        python_loop_records.record(*origin(self.fn.__code__, loop.index), self._over_symbolic_range())  # NOTE [Loop
        return origin(self.fn.__code__, loop.index)[1], hook, layout  # bodies run outside graphs] there

    def _over_symbolic_range(self) -> bool:
        """The break is at the GET_ITER of a range whose length is symbolic (a comprehension over it runs as
        Python: NOTE [Comprehensions over symbolic ranges]), not at a break in a loop's body."""
        from .sym_arith import SymRangeValue, symbolic_length
        iterable = self.stack[-1] if self.site.inst.name == "GET_ITER" and self.stack else None
        return isinstance(iterable, SymRangeValue) and symbolic_length(self.tx, iterable)

    def _tail_callee(self) -> tuple[int, Any, Value | None] | None:
        """For a tail function whose instruction is a call: (stack position of the callee, its hook, the
        bound self or None) when the callee goes through a frame hook (NOTE [Calls in tail functions])."""
        inst = self.site.inst
        if inst.name == "CALL":
            position = len(self.stack) - inst.arg - 2
        elif inst.name == "CALL_FUNCTION_EX":
            position = len(self.stack) - (4 if inst.arg & 1 else 3)
        else:
            return None
        first, second = self.stack[position], self.stack[position + 1]
        position, callee = (position + 1, second) if first is NULL else (position, first)
        hooked = self._hooked(callee)
        return None if hooked is None else (position, *hooked)

    def _emit_hooked_callee(self, rebuild: Reconstructor, hook: Any, self_value: Value | None) -> None:
        """NOTE [Calls in tail functions]: the call at a break inside a try block runs in the plain tail
        function, where no hook can be put around it; the callee's stack slot is given its hook instead
        (`functools.partial(hook, self)` when the hook takes the callee's self, a module or a function
        object: NOTE [Module calls at breaks], [Closures called at breaks]), so the callee is captured as
        its own frame, as at a break outside try blocks."""
        if self_value is None:
            self.cg.load_const(hook)
            return
        self.cg.push_null()
        self.cg.load_const(functools.partial)
        self.cg.load_const(hook)
        rebuild.emit(self_value)
        self.cg.call(2)

    def _tail_successors(self) -> tuple:
        """For a tail function (NOTE [Breaks inside try blocks]): the edges out of the break instruction,
        each with the hooked resume function it trampolines to and the stack layout there; () when the
        rest of the frame must stay plain (a NULL or a re-entered block on the stack, or an instruction
        whose stack effect is not known here)."""
        inst = self.site.inst
        tail = self._tail_names()
        if inst.name == "CALL":
            edges = [("next", inst.index + 1, inst.arg + 2, 1)]
        elif inst.name == "CALL_FUNCTION_EX":
            edges = [("next", inst.index + 1, 4 if inst.arg & 1 else 3, 1)]
        elif inst.name in _CONDITIONAL:
            edges = [("next", inst.index + 1, 1, 0), ("jump", inst.arg, 1, 0)]
        elif inst.name in _OR_POP:
            edges = [("next", inst.index + 1, 1, 0), ("jump", inst.arg, 0, 0)]
        elif inst.name in _SIMPLE and inst.name != "RAISE_VARARGS":
            consumed, produced = _SIMPLE[inst.name](inst.arg)
            edges = [("next", inst.index + 1, consumed, produced)]
        else:
            return ()
        successors = []
        for edge, index, consumed, produced in edges:
            after = self.stack[:len(self.stack) - consumed]
            layout = tuple(_slot_kind(v) for v in after) + ("value",) * produced
            if any(kind in ("null", "block") for kind in layout):
                return ()
            code, target = origin(self.fn.__code__, index)
            successors.append((edge, self.hooks.resume(code, target, layout, tail, cells=tuple(self.cell_args)),
                               layout))
        return tuple(successors)


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
    from .state_blocks import restore_default_dtype
    restore_default_dtype(cg, output)  # NOTE [Default dtype changes]


def _user_exit(value: Value) -> bool:
    """A user context manager's bound `__exit__` (what BEFORE_WITH leaves on the stack for it)."""
    return isinstance(value, BoundMethodValue) and isinstance(value.func, UserFunctionValue) and \
        value.func.fn.__name__ == "__exit__"


def _never_suppresses(value: Value) -> bool:
    """A torch block, or a user `__exit__` whose every return is a falsy constant: an exception raised
    in the block always propagates, so running the step through `run_in_blocks` is exact."""
    if isinstance(value, ExitValue):
        return True
    insts = normalize(value.func.fn.__code__).insts  # 3.12's RETURN_CONST c reads as LOAD_CONST c; RETURN_VALUE
    targets = jump_targets(insts)
    for inst in insts:
        if inst.name == "RETURN_VALUE" and (inst.index in targets or inst.index == 0 or
                                            insts[inst.index - 1].name != "LOAD_CONST" or insts[inst.index - 1].arg):
            return False
    return not value.func.fn.__code__.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE)


def _passed_cell(cell: Any, name: str) -> bool:
    """A real cell this frame got as an argument (NOTE [Cells passed to resume functions])."""
    from .sources import LocalSource
    return isinstance(cell, RealCell) and cell.source == LocalSource(name)


def emit_stack_value(rebuild: Reconstructor, value: Value) -> None:
    """Load a stack value below the break's instruction for a resume function's stack argument."""
    if isinstance(value, IteratorValue) and value.owner is None and value.reverse_from is None and \
            not (value.source is not None and value.made_at is None) and value.made_at is None and \
            value.lent_at is None and not claimed(value) and id(value) not in rebuild.preloaded:
        rebuild.emit(ListValue(value.items[value.index:]))  # what the iterator has left, as a list
    else:  # a list's, dict's or set's own iterator, a reversed one, the caller's own iterator (a tuple's, a
        # range's, moved by the replay: as a list of what it had left, an `objs = [it, print()]` held a list
        # where eager holds `it`), a generator's (NOTE [Live iteration], [Reversed iterators from outside],
        # [Eager generators])
        rebuild.emit(value)


def _slot_kind(value: Value) -> str:
    if value is NULL:
        return "null"
    if isinstance(value, ExitValue):
        return "block"
    if isinstance(value, carried_loops.CarriedIteratorValue):
        return "carried"  # NOTE [Iterators passed unread] in resume.py
    return "iter" if isinstance(value, IteratorValue) else "value"



def _forward_on_instance(tx, callee: NNModuleValue) -> bool:
    """True when the module instance has its own `forward`, `_call_impl` or `_compiled_call_impl` (then it
    is called as it is); otherwise those absences, and the class's `forward`, are guarded (NOTE [Lookup
    facts])."""
    from . import lookup
    module, out = callee.obj, tx.output
    own = ("forward", "_call_impl", "_compiled_call_impl")  # the last two replace the call (calls.py)
    if any(name in module.__dict__ for name in own):
        return True
    index, forward = lookup.mro_lookup(type(module), "forward")
    for name in own:
        lookup.guard_not_in_instance(out, callee.source, module, name)
    if index is not None:
        lookup.guard_entry_identity(out, lookup.guard_found_on_class(out, type(module), "forward", index), forward)
    return False

__all__ = ["BreakCodegen", "BreakSite", "restore_grad_mode"]


def _at_line(cg: Codegen, start: int, inst: Inst) -> Codegen:
    """NOTE [The break's line]: the step written at a break (and the resume call after it) carries the
    line of the instruction it stands for, so what reads its caller's line sees the user's line, as in
    eager: a warning's location (`warnings.warn` at a break), logging records, `sys._getframe(1).f_lineno`,
    tracebacks of an exception the step raises. The code before it (graph call, replayed effects) keeps
    the function's first line."""
    if inst.lineno is not None:
        for instr in cg.insts[start:]:
            if isinstance(instr, Instr) and instr.lineno in (None, bytecode.UNSET):
                instr.lineno = inst.lineno
    return cg

