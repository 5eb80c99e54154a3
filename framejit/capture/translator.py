"""The instruction loop: symbolic execution of one code object over abstract values.

A Translator walks the canonical instructions (normalize.py) of one code object with an abstract stack,
abstract locals and cells, dispatching each instruction to its handler (handlers/). Calls into user
Python code create a child Translator that shares the OutputGraph (inlining). Control flow is followed,
not merged: every condition is decided while tracing, from Python values or tensor metadata that are
guarded, so one trace is one straight path through the program (loops unroll).

Invariants: handlers touch the translator only through push/pop/peek, locals, jump and the helpers
below; anything a handler cannot model raises Unsupported, anything the user's code gets wrong raises
UserException; the translator adds the user's stack to both on the way out.
"""
from __future__ import annotations

import builtins
import collections
import inspect
import os
import sys
import types
from typing import Any

from .. import config
from ..guards import COST_ID
from . import closure_cells, hash_order, lookup, signal_exceptions
from .attributes import getattr_value
from .breaks import DISABLED, BreakKind, Unsupported, UserException, UserFrame
from .break_locations import user_frame
from .calls import call_value
from .context import break_in_outside_autocast
from .tensor_attrs import store_on_tensor
from .caught_exceptions import Handling, attribute_error_context, caught_in_frame, follow_handler, give_up_handlers, \
    leaving_callee, reraised_here
from .graph import OutputGraph
from .handlers import HANDLERS, UNSUPPORTED_OPCODES
from .library_substitutes import library_substitute
from .modules import SUBSTITUTES, call_iteration_method, disabled_reason, graph_break, is_iteration_method, made_module_site
from .module_hooks import TRACE_TIME, plan_module_call
from .generator_ctx import break_before_generator_cms, exception_in_generator_cms
from .lazy_generators import LazyGeneratorValue, check_finalizers_at_return, finalizer_break, finalizers_pending, \
    lazy_from_now, lazy_gen_attr, make_lazy_generator, raised_with_suspended_finalizers, seen_on_close, wants_lazy
from .getattribute import custom_setattr
from .generator_reach import check_random_run_aheads, check_run_ahead_effects, \
    drawn_under_other_state, generator_roots, keep_random_run_ahead, reachable_values, run_ahead_effects, torch_state
from .values.iterator_claims import Claim, claim, collect_steps, root_index
from .stdlib import forced_break
from .import_calls import import_break
from .frame_locals import frame_reader_break
from .nested_frames import attach_stack as _attach_stack, stop_for, stopped  # NOTE [Nested graph breaks]
from .torch_function_inline import STEPPING
from .normalize import Inst, has_handlers, normalize
from .sources import ClosureSource, GlobalSource, ItemSource, AttrSource, LocalSource, ObjectSource, Ref
from .values import (ConstantValue, DictValue, IteratorValue, NewObjectValue, NNModuleValue, ObjectValue,
                     PartialValue, TupleValue, UserFunctionValue, Value)
from .values.base import LazyArg
from .values.builder import LIBRARY_MODULE_PREFIXES, wrap, wrap_unguarded

_ASYNC_FLAGS = inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
MAX_TRACE_STEPS = 500_000
_FRAMEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

DISABLED.add(graph_break.__code__)  # the substitutes' way to break (modules.graph_break)


class RealCell:
    """A closure cell that exists outside the trace (a free variable of a real function)."""

    __slots__ = ("cell", "name", "source")

    def __init__(self, cell: types.CellType, name: str, source=None) -> None:
        self.cell = cell
        self.name = name
        self.source = source  # where the cell is found (`fn.__closure__[i]`) when the function came
        # from a source guarded by its code, not its identity (NOTE [Closures guarded by code])


class Translator:
    def __init__(self, output: OutputGraph, code: types.CodeType, f_globals: dict, f_builtins: Any,
                 f_locals: dict[str, Any], cells: dict[str, Any], parent: "Translator | None" = None) -> None:
        self.output = output
        self.code = code
        self.f_globals = f_globals
        self.f_builtins = f_builtins  # the function's own `__builtins__` (NOTE [Builtins of a function])
        self.locals: dict[str, Any] = dict(f_locals)
        self.cells = cells
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.program = normalize(code)
        self.stack: list[Value] = []
        self.pc = 0
        self.current: Inst | None = None
        self.kw_names: tuple[str, ...] = ()
        self.return_value: Value | None = None
        self.yielded: list[Value] | None = None  # set when this frame is a generator being run eagerly
        self.suspend_at_yield = False  # a generator-based context manager's frame (generator_ctx.py)
        self.delegates_finalizers = False  # ... that yields from a generator with finalizers
        self.suspended = False  # ... stopped at a yield, to be resumed by run() again
        self.stop_at = stop_for(output, parent, code)  # stop before this instruction (a graph break)
        self.handling: list[Handling] = []  # NOTE [Exceptions caught while tracing]

    # ---- the loop -----------------------------------------------------------------------------
    def run(self) -> Value:
        insts = self.program.insts
        self.output.tx_stack.append(self)
        with hash_order.tracing(self.output):  # NOTE [Hash-seeded facts]
            return self._run(insts)

    def _run(self, insts) -> Value:
        limit = self.output.__dict__.get("step_limit", MAX_TRACE_STEPS)  # NOTE [Run-ahead step budget]
        try:
            while self.return_value is None and not self.suspended:
                self.output.steps += 1
                if signal_exceptions.PENDING:  # NOTE [Signal handlers deferred to safe points]
                    signal_exceptions.poll()
                if self.output.steps > limit:
                    raise _step_limit_reached(limit)
                if self.pc == self.stop_at:
                    return stopped(self)
                inst = insts[self.pc]
                self.current = inst
                self.pc += 1
                try:
                    self.step(inst)
                except UserException as e:
                    raised_with_suspended_finalizers(self.output, e)  # NOTE [Generators with finalizers traced lazily]
                    if not follow_handler(self, inst, e):  # NOTE [Exceptions caught while tracing]
                        raise
        except (Unsupported, UserException) as raised:
            left = self.current  # where it leaves the frame (give_up_handlers rewinds to where it was raised first)
            e = give_up_handlers(self, raised) if self.handling or reraised_here(self, raised) else raised
            if self.parent is not None and isinstance(e, UserException):
                e = leaving_callee(self, e, left)  # NOTE [Exceptions caught in callees]
            _attach_stack(e, self)
            if isinstance(e, Unsupported) and self.output.__dict__.get("made_modules"):
                self._note_live_made_modules(e)  # NOTE [Modules made while tracing that outlive the trace]
            if self.parent is None and getattr(e, "root_index", None) is None:
                e.root_index = self.current.index if self.current is not None else None
                if isinstance(e, Unsupported):
                    e.root_index = break_before_generator_cms(self.output, e.root_index)
                else:  # NOTE [Exceptions in generator context manager blocks]
                    e.generator_cm_break = exception_in_generator_cms(self.output, e)
                    if getattr(e, "callee_break", None) is not None:  # NOTE [Exceptions caught in callees]
                        e.callee_break.root_index = break_before_generator_cms(self.output, e.root_index)
            if self.parent is None and getattr(e, "made_site", None) is not None and e.root_index is not None:
                e.root_index = break_before_generator_cms(self.output, min(e.root_index, e.made_site))
            if self.parent is None and (finalizers_pending(self.output) or break_in_outside_autocast(self.output, e)):
                e = _frame_eager(e)  # NOTE [Generators with finalizers traced lazily], [Autocast objects open outside]
            if self.parent is None and getattr(e, "retry_lazy", None) is None:  # a user exception ends it too
                check_random_run_aheads(self.output, e.root_index if isinstance(e, Unsupported) else None)  # NOTE [Random draws of run-ahead generators]
            raise e
        finally:
            self.output.tx_stack.pop()
        if self.parent is None and self.return_value is not None:
            check_finalizers_at_return(self.output)  # NOTE [Generators with finalizers traced lazily]
            check_random_run_aheads(self.output)  # NOTE [Random draws of run-ahead generators]
            made_at = made_module_site(self.output, [self.return_value, *self.output.side_effects.values()])
            if made_at is not None:  # NOTE [Modules made while tracing that outlive the trace]
                e = Unsupported(BreakKind.UNSUPPORTED_VALUE, "a module made in the compiled region is returned or "
                                                             "stored outside it: it is made as Python")
                _attach_stack(e, self)
                e.root_index = made_at
                raise e
        return self.return_value

    def _note_live_made_modules(self, e: Unsupported) -> None:
        """A module made in the trace that a break would carry (this frame's stack, locals and cells, which
        hold the operands the root's call passed down; a replayed effect) must be made where it was: the
        earliest root instruction that made one is `e.made_site`."""
        live = [*self.stack, *(getattr(self, "operands", None) or ()), *self.locals.values(), *self.cells.values()]
        made_at = made_module_site(self.output, live + (self.output.side_effects.values() if self.parent is None
                                                         else []))
        if made_at is not None:
            before = getattr(e, "made_site", None)
            e.made_site = made_at if before is None else min(before, made_at)

    def _handles(self, e: UserException) -> bool:
        """NOTE [Exceptions caught in callees]: the trace follows a try's handler (NOTE [Exceptions caught
        while tracing]) but not a with-block's, and gives up on a handler it cannot trace. An exception
        raised in an inlined callee where that callee's own try/except, try/finally or with-block covers
        the instruction (its handler starts with PUSH_EXC_INFO, or is reached through the cleanups CPython
        runs on the way: 3.12's inlined comprehensions', an except block's; caught_in_frame) may be handled
        there. Where the trace followed that handler to a raise of the same exception type, it still leaves
        the callee as a UserException, so the places that model a caught exception (hasattr, getattr and
        next with a default, Mapping.get over `self[key]`, ...) see what they did before; it
        carries `callee_break`, and if it reaches the root frame (which ran wholly eagerly before), convert
        takes that graph break instead: at the root frame's call into the callee, which then runs through
        its frame hook and is captured as its own frame. Otherwise it leaves as that break (NOTE [Handlers
        of callees given up])."""
        return self.current is not None and caught_in_frame(self.program.insts, self.current)

    def step(self, inst: Inst) -> None:
        handler = HANDLERS.get(inst.name)
        if handler is None:
            reason = UNSUPPORTED_OPCODES.get(inst.name, "no handler for this instruction yet")
            raise Unsupported(BreakKind.UNSUPPORTED_OPCODE, f"{inst.name}: {reason}")
        if getattr(self.output, "opaque_sequences", False):  # NOTE [Sequences of changing length carried across breaks]
            from .carried_loops import check_opaque_operands
            check_opaque_operands(self, inst)
        # the stack before the instruction: a break re-runs it with these operands (_note_live_made_modules)
        self.operands = list(self.stack) if self.output.__dict__.get("made_modules") or self.output.__dict__.get(
            "nest_stop") else None
        with STEPPING:  # NOTE [Inlined __torch_function__]: a gated tensor's fake is not read by an instruction
            handler(self, inst)

    # ---- stack and locals ---------------------------------------------------------------------
    def push(self, value: Value) -> None:
        self.stack.append(value)
        if self.output.side_effects.region_reads is not None:  # NOTE [State the frame writes around a reentrant
            self.output.side_effects.region_reads.saw(value)  # call] (reentrant_reads.py)

    def pop(self) -> Value:
        return self.stack.pop()

    def popn(self, n: int) -> list[Value]:
        values = self.stack[len(self.stack) - n:]
        del self.stack[len(self.stack) - n:]
        return values

    def peek(self, depth: int = 1) -> Value:
        return self.stack[-depth]

    def jump(self, target: int) -> None:
        self.pc = target

    def load_local(self, name: str) -> Value:
        if name in self.cells and name not in self.locals:
            return self.load_cell(name)
        try:
            value = self.locals[name]
        except KeyError:
            raise UserException(UnboundLocalError(
                f"cannot access local variable '{name}' where it is not associated with a value")) from None
        if isinstance(value, LazyArg):
            value = self.locals[name] = wrap(self.output, value.obj, LocalSource(value.name))
        return value

    def load_local_value(self, name: str, value: Any) -> Value:
        """`value` as read from local `name` (wrapping a root argument on its first use)."""
        if isinstance(value, LazyArg):
            value = wrap(self.output, value.obj, LocalSource(value.name))
        return value

    def store_local(self, name: str, value: Value) -> None:
        self.locals[name] = value

    def load_cell(self, name: str) -> Value:
        cell = self.cells[name]
        if isinstance(cell, RealCell):
            stored = self.output.side_effects.cell_value(cell.cell)
            if stored is not None:
                return stored
            try:
                contents = cell.cell.cell_contents
            except ValueError:
                # an empty cell from outside may be filled before the next call (`k = 3` in the enclosing
                # function): that is not guarded, so the load runs in Python (red team 11)
                raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"free variable {name!r} is not bound yet") from None
            if cell.source is not None:
                return wrap(self.output, contents, AttrSource(cell.source, "cell_contents"))
            return wrap(self.output, contents, ClosureSource(Ref(cell.cell, name), name))
        if cell.contents is None:  # CPython's messages (format_exc_unbound): the frame's own cell, or a free one
            if name in self.code.co_cellvars:
                raise UserException(UnboundLocalError(
                    f"cannot access local variable '{name}' where it is not associated with a value"))
            raise UserException(NameError(  # NOTE [Members of caught exceptions]
                f"cannot access free variable '{name}' where it is not associated with a value in enclosing scope",
                name=name))
        if isinstance(cell.contents, LazyArg):
            cell.contents = wrap(self.output, cell.contents.obj, LocalSource(cell.contents.name))
        return cell.contents

    def store_cell(self, name: str, value: Value) -> None:
        cell = self.cells[name]
        if isinstance(cell, RealCell):
            # a cell found through a source (a closure guarded by its code) is written back through it
            self.output.side_effects.store_cell(cell.cell, value, cell.source)
            closure_cells.stored(self.output, cell)  # NOTE [Aliased cells are guarded]
            return
        cell.contents = value
        self.output.side_effects.bump(cell)  # NOTE [Cells generators close over]

    def load_global(self, name: str) -> Value:
        stored = self.output.side_effects.global_value(self.f_globals, name)
        if stored is not None:
            return stored
        self.output.side_effects.check_namespace_read(self.f_globals, name)
        if name in self.f_globals:
            return wrap(self.output, self.f_globals[name], GlobalSource(Ref(self.f_globals, "G"), name))
        builtins_dict = self._builtins()
        self.output.side_effects.check_namespace_read(builtins_dict, name)
        g = self.output.name_of(self.f_globals, "G")
        if name not in builtins_dict:
            # the NameError is a fact like any other: a later `G = 4` (or `builtins.G = 4`) must miss
            b = self.output.name_of(builtins_dict, "B")
            self.output.add_guard("GLOBAL_ABSENT", f"{name!r} not in {g} and {name!r} not in {b}", None,
                                  expected=f"{name} is not defined")
            raise UserException(NameError(f"name '{name}' is not defined", name=name))
        self.output.add_guard("BUILTIN_NOT_SHADOWED", f"{name!r} not in {g}", None, expected=f"{name} is the builtin")
        # the builtin itself may be monkeypatched (`builtins.print = f`): pinned by identity (NOTE [Lookup facts])
        self.output.guard_id(ItemSource(ObjectSource(Ref(builtins_dict, "B")), name), builtins_dict[name])
        return wrap_unguarded(builtins_dict[name])

    # NOTE [Builtins of a function]: CPython fixes a function's builtins when the function is made, from its
    # globals' `__builtins__` at that moment (a module's dict, or the dict itself: builtins_of), and its frames
    # look names up there, not in whatever `__builtins__` the globals hold when it runs. A module whose
    # `__builtins__` is swapped after a function was defined keeps that function on the old builtins, while
    # functions made later (closures made on each call) get the new ones. So the trace reads the frame's own
    # builtins, and only while they are still the ones a function made now would get (else a graph break: the
    # call runs as Python; a root frame runs wholly eagerly, convert.py, since its transformed and resume
    # functions are made from the globals now); and guards that the globals keep that `__builtins__` object.
    def _builtins(self) -> dict:
        if self.f_builtins is not builtins_of(self.f_globals):
            raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{self.code.co_qualname} keeps builtins its module's "
                              "globals no longer hold (__builtins__ swapped after it was defined)")
        g = self.output.name_of(self.f_globals, "G")
        current = self.f_globals.get("__builtins__")
        held = "None" if current is None else self.output.name_of(current, "builtins")
        self.output.add_guard("BUILTINS_MATCH", f"{g}.get('__builtins__') is {held}", None,
                              expected="the module keeps its __builtins__", cost=COST_ID)
        return self.f_builtins

    # ---- Python semantics the handlers need ---------------------------------------------------
    def getattr(self, obj: Value, name: str) -> Value:
        if isinstance(obj, LazyGeneratorValue):  # NOTE [Generators driven by send]
            return lazy_gen_attr(obj, name)
        try:
            return getattr_value(self, obj, name)
        except UserException as e:
            attribute_error_context(e, obj, name)  # NOTE [Members of caught exceptions]
            raise

    def call(self, fn: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
        return call_value(self, fn, args, kwargs)

    def call_method_of(self, obj: Value, name: str, args: list[Value], kwargs: dict[str, Value]) -> Value:
        return self.call(self.getattr(obj, name), args, kwargs)

    # NOTE [Special method lookup]: CPython's protocol calls (len, [], in, iter, truth) find the dunder with
    # _PyType_Lookup on type(o), never in o.__dict__. Reading it as `o.__len__` guarded, and on a retrace
    # used, an instance attribute of that name. call_special_of reads a plain function from the class
    # (its lookup facts guard the class dicts, not the instance) and passes `o` itself.
    def call_special_of(self, obj: Value, name: str, args: list[Value], kwargs: dict[str, Value]) -> Value:
        """`len(o)`, `o[k]`, `k in o`, ...: CPython looks the dunder up on type(o) only, so an instance
        attribute `o.__len__ = f` is ignored (NOTE [Special method lookup]). A plain function found on
        the class is read from the class (class-dict guards only) and called with `o`; other entries
        (staticmethod, descriptors) and modules go through the attribute read."""
        if isinstance(obj, (ObjectValue, NewObjectValue)) and not isinstance(obj, NNModuleValue):
            cls = obj.python_type()
            if isinstance(lookup.mro_lookup(cls, name)[1], types.FunctionType):
                from .values import ClassValue
                return self.call(self.getattr(ClassValue(cls), name), [obj, *args], kwargs)
        return self.call_method_of(obj, name, args, kwargs)

    def store_attr(self, obj: Value, name: str, value: Value) -> None:
        if store_on_tensor(self.output, obj, name, value):
            return  # NOTE [Stores to the .data of inputs] in data_alias.py, NOTE [Attributes stored on tensors]
        if isinstance(obj, DictValue) and obj.source is None and obj.cls is collections.OrderedDict:
            from .modules import store_into_new_ordered_dict  # NOTE [Attributes of OrderedDicts made while
            store_into_new_ordered_dict(self, obj, name, value)  # tracing]
            return
        if isinstance(obj, NewObjectValue):
            setattr_impl = getattr(obj.cls, "__setattr__", object.__setattr__)
            if isinstance(setattr_impl, types.FunctionType):  # e.g. ModelOutput.__setattr__: inlined
                self.inline(UserFunctionValue(setattr_impl), [obj, ConstantValue(name), value], {})
                return
            lookup.guard_plain_store(self.output, obj.cls, name)  # NOTE [Lookup facts]
            if self._store_through_class(obj, name, value):
                return
            obj.attrs[name] = value
            self.output.side_effects.bump(obj)  # NOTE [Eager generators]
            return
        if isinstance(obj, PartialValue) and obj.source is None:
            from .partials import store_partial_attr  # NOTE [Attributes of partials made while tracing]
            store_partial_attr(self, obj, name, value)
            return
        if isinstance(obj, UserFunctionValue):
            from .function_attrs import made_in_trace, store_traced_function_attr
            if made_in_trace(obj):  # NOTE [Attributes of functions made while tracing]
                store_traced_function_attr(self, obj, name, value)
                return
        if getattr(obj, "under_construction", False):  # NOTE [Modules with their own __init__ made while tracing]
            from .modules import store_during_construction
            store_during_construction(self, obj, name, value)
            return
        impl = custom_setattr(self, obj)  # NOTE [Custom __setattr__]: inlined
        if impl is not None:
            self.inline(UserFunctionValue(impl), [obj, ConstantValue(name), value], {})
            return
        from .values import PyModuleValue
        if isinstance(obj, PyModuleValue):  # NOTE [Module attribute stores]
            from .attributes import store_module_attr
            store_module_attr(self, obj, name, value)
            return
        if self._store_through_property(obj, name, value):
            return
        if isinstance(obj, ObjectValue):
            lookup.guard_plain_store(self.output, type(obj.obj), name)
        from .modules import store_into_module  # NOTE [Registering stores into modules]
        if not (isinstance(obj, NNModuleValue) and store_into_module(self, obj, name, value)):
            self.output.side_effects.store_attr(obj, name, value)

    def _store_through_property(self, obj: Value, name: str, value: Value) -> bool:
        """NOTE [Property setters of objects from outside]: `m.temp = v` where `temp` is a property with a
        Python setter on the class of an object (or module) from outside: the default __setattr__ calls the
        setter, which is traced (its stores recorded as usual), the lookup guarded (found on that class, the
        entry by identity). Before, the store was a break. On a module only for a value Module.__setattr__
        hands to object.__setattr__: not a Parameter or Module, and a name in none of its
        _parameters/_buffers/_modules (register_* refuse a name the class already has, so it stays so).
        True when the store was made here."""
        if not isinstance(obj, ObjectValue) or obj.source is None:
            return False
        import torch
        from .descriptors import plain_property_fn, python_data_descriptor  # NOTE [Property subclasses]
        cls = type(obj.obj)
        index, attr = lookup.mro_lookup(cls, name)
        fset = plain_property_fn(self, attr, "__set__")
        if getattr(cls, "__setattr__", None) is object.__setattr__ and fset is None and \
                isinstance(lookup.mro_lookup(type(attr), "__set__")[1], types.FunctionType):
            lookup.guard_entry_identity(self.output, lookup.guard_found_on_class(self.output, cls, name, index), attr)
            return python_data_descriptor(self, obj, attr, "__set__", [value]) is not None
        if fset is None or \
                not (getattr(cls, "__setattr__", None) is object.__setattr__ or
                     lookup.is_module_default(getattr(cls, "__setattr__", None), "__setattr__")):
            return False
        if isinstance(obj, NNModuleValue) and (
                issubclass(value.python_type(), (torch.nn.Parameter, torch.nn.Module)) or
                any(name in (obj.obj.__dict__.get(d) or {}) for d in ("_parameters", "_buffers", "_modules"))):
            return False
        lookup.guard_entry_identity(self.output, lookup.guard_found_on_class(self.output, cls, name, index), attr)
        self.call(UserFunctionValue(fset), [obj, value], {})
        return True

    def _store_through_class(self, obj: Value, name: str, value: Value) -> bool:
        """NOTE [Stores into objects made while tracing]: `o.name = v` on an object made while tracing was
        kept in its traced attributes whatever the class said, so a property's setter never ran (`p.v = 3`
        read back the getter's old value, and the setter's own effects were lost), a custom descriptor's
        `__set__` was skipped, and a class with `__slots__` and no `__dict__` took any name where eager
        raises AttributeError (red team 15). As CPython's generic setattr: a data descriptor on the class
        takes the store (a property's Python setter is called; other descriptors break, except the member
        descriptors of `__slots__`, which are the traced attributes), and without an instance dict a name
        that is no slot raises. True when the store was made here."""
        cls = obj.cls
        _, attr = lookup.mro_lookup(cls, name)
        if isinstance(attr, types.MemberDescriptorType):
            return False  # a __slots__ entry: stored in `attrs`, read back from there (attributes.py)
        if attr is not None and (hasattr(type(attr), "__set__") or hasattr(type(attr), "__delete__")):
            from .descriptors import plain_property_fn, python_data_descriptor  # NOTE [Property subclasses]
            if (fset := plain_property_fn(self, attr, "__set__")) is not None:
                self.call(UserFunctionValue(fset), [obj, value], {})
                return True
            if python_data_descriptor(self, obj, attr, "__set__", [value]) is not None:
                return True
            raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE,
                              f"a store through the descriptor {type(attr).__name__} {name!r} of a {cls.__name__}")
        if getattr(cls, "__dictoffset__", 1) == 0:  # no instance dict: only the slots can be written
            if attr is None:
                # CPython 3.13 added the reason to the message (PyObject_GenericSetAttr)
                tail = " and no __dict__ for setting new attributes" if sys.version_info >= (3, 13) else ""
                raise UserException(AttributeError(f"'{cls.__name__}' object has no attribute '{name}'{tail}"))
            raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"a store of {name!r} into a {cls.__name__} without __dict__")
        return False

    def store_global(self, name: str, value: Value) -> None:
        self.output.side_effects.store_global(self.f_globals, name, value)

    def inline(self, fn: UserFunctionValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
        f = fn.fn
        if is_iteration_method(f):
            return call_iteration_method(self, f, args, kwargs)
        if f not in TRACE_TIME and getattr(f, "__name__", None) == "patched_init":
            from .modules import unwrap_dynamo_tagging_init  # NOTE [Dynamo's tagging Module.__init__]
            inner = unwrap_dynamo_tagging_init(f)
            if inner is not None:
                fn, f = UserFunctionValue(inner), inner
        if f in TRACE_TIME:
            return TRACE_TIME[f](self, args, kwargs)
        if f in SUBSTITUTES:
            fn = UserFunctionValue(SUBSTITUTES[f])
            f = fn.fn
        elif library_substitute(f) is not None:  # NOTE [ModelOutput.__post_init__]
            fn = UserFunctionValue(library_substitute(f))
            f = fn.fn
        forced_break(f)
        import_break(f)  # NOTE [Import machinery at breaks]
        root = self
        while root.parent is not None:
            root = root.parent
        frame_break = frame_reader_break(f.__code__, root.current.index if root.current is not None else -1)
        if frame_break is not None:  # NOTE [Breaks at calls that read frames] in frame_locals.py
            raise frame_break
        child = self.child_frame(fn, args, kwargs)
        if child.code.co_flags & inspect.CO_GENERATOR:
            if wants_lazy(self, f):  # NOTE [Generators driven by send] in lazy_generators.py
                return make_lazy_generator(self, child, f)
            # what its arguments, cells and defaults reach (NOTE [Defaults a run ahead reaches]) and values stored
            # into outside state, read through globals and outside objects (review revY HIGH-2)
            return self._run_generator(child, f, generator_roots(self.output, fn, args, kwargs))
        return child.run()

    def _run_generator(self, child: "Translator", f: Any, roots: list) -> IteratorValue:
        """NOTE [Eager generators]: a generator called inside the compiled region is run to completion at
        once and stands for an iterator over what it yielded. That equals lazy evaluation only when
        nothing can tell the order apart: the generator's body mutates nothing its caller could see (no
        outside container or object, global, cell or tensor written in place: `SideEffects.version` is
        unchanged, and no value made while tracing that its arguments or closure reach), and nothing it
        can see is mutated while the consumer still draws from it (checked at each step). It must not
        escape either (returned, stored, or live at a graph break): eager code would hold a lazy generator
        object. Any of these is a graph break at the call that made the generator, which then runs in
        Python, as is an exception the generator raises. Work a consumer skips by stopping early is pure;
        an endless generator is traced lazily instead (NOTE [Run-ahead step budget])."""
        side_effects, reachable = self.output.side_effects, reachable_values(roots)

        def mutated_since(version: int, touched: int) -> bool:
            return side_effects.version != version or any(
                id(v) in reachable for v in side_effects.touched[touched:])
        start = (side_effects.version, len(side_effects.touched))
        child.yielded, child.yield_draws, child.yield_touched = [], [], []  # draws, touches at each yield
        child.yield_state = state = torch_state(self.output)  # NOTE [Torch state across yields] in handlers/blocks.py
        effects = run_ahead_effects(self.output)  # its grad-mode sets and random draws run where eager runs them
        returned, stepped = collect_steps(lambda: _run_within_budget(self.output, child, f))  # NOTE [Run-ahead step
        # budget]; the iterators it steps are claimed (NOTE [Iterators claimed by a run ahead])
        # NOTE [Generators with finalizers]: a lazy generator whose body has a try/finally or with-block
        # runs that code when it is dropped (a loop's `break`, `del g`, a drained zip). Passed on to a
        # resume function it stays referenced by the call's arguments until that function returns, so
        # `finally` ran after code eager runs after it. Such a generator makes the frame being compiled run
        # eagerly (also when an inlined callee made it: the callee may return it to this frame). One whose
        # run changed state is traced again lazily (NOTE [Generators with finalizers traced lazily]).
        frame_eager = has_handlers(f.__code__) or child.delegates_finalizers
        drew = check_run_ahead_effects(self.output, effects, f, frame_eager, child)  # kept below: RandomRunAhead
        if mutated_since(*start):
            e = Unsupported(BreakKind.SIDE_EFFECT, f"the generator {f.__qualname__} mutates state: it runs "
                            "lazily, as Python")
            e.frame_eager, e.retry_lazy = frame_eager, f.__code__  # NOTE [Generators that mutate state]
            raise lazy_from_now(e, f.__code__) if frame_eager else e  # NOTE [Generators with finalizers traced
            # lazily] in lazy_generators.py
        iterator = IteratorValue(child.yielded)
        iterator.frame_eager = frame_eager
        iterator.return_value = returned  # what `yield from` this generator evaluates to
        iterator.reach_roots = roots  # a generator drawing this one reads what it reads (revAQ HIGH-6)
        iterator.gen_code = f.__code__  # NOTE [Generators ended by close or throw] in generator_ends.py
        iterator.made_at = root_index(self)
        claim(stepped, Claim(iterator, iterator.made_at, f.__code__, frame_eager))
        made = (side_effects.version, len(side_effects.touched))
        record = keep_random_run_ahead(self.output, f, iterator, effects[1], child.yield_draws) if drew else None

        def check() -> None:
            record is not None and record.check()  # NOTE [Random draws of run-ahead generators]
            e = drawn_under_other_state(self.output, state, f"the generator {f.__qualname__}", iterator.made_at)
            if e is not None:  # NOTE [Torch state at each draw] in generator_reach.py: traced again lazily
                e.retry_lazy = f.__code__
            elif mutated_since(*made):
                e = Unsupported(BreakKind.SIDE_EFFECT, f"state mutated while the generator {f.__qualname__} is "
                                "consumed: it runs lazily, as Python")
                e.root_index = iterator.made_at  # break where the generator is made
            if e is not None:
                e.frame_eager = frame_eager  # NOTE [Generators with finalizers]
                raise lazy_from_now(e, f.__code__) if frame_eager else e
        iterator.check = check
        return iterator

    def child_frame(self, fn: UserFunctionValue, args: list[Value], kwargs: dict[str, Value]) -> "Translator":
        """A translator for a call of `fn` from this frame, its arguments bound, not yet run."""
        f = fn.fn
        code = f.__code__
        if fn.closure is None:
            self.output.inlined[f] = None
            if not fn.by_code:
                lookup.guard_code(self.output, f)  # NOTE [Code replaced] in lookup.py
        if code in DISABLED:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, disabled_reason(f, args))
        self.output.inlined_codes.add(code)  # NOTE [Disable after compiling] in hook.py
        if getattr(f, "_torchdynamo_disable", False) or _stored_disable(fn):  # torch.compiler.disable
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{f.__qualname__} is marked torch.compiler.disable")
        if self.depth + 1 > config.inline_depth_limit:
            raise Unsupported(BreakKind.INLINE_LIMIT, f"inlining {f.__qualname__} exceeds depth {config.inline_depth_limit}")
        if code.co_flags & _ASYNC_FLAGS:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{f.__qualname__} is a coroutine or async generator")
        defaults = fn.defaults if fn.defaults is not None else self._wrap_defaults(fn, len(args))
        kwdefaults = fn.kwdefaults if fn.kwdefaults is not None else self._wrap_kwdefaults(fn, kwargs)
        bound = bind_arguments(code, f.__qualname__, args, kwargs, defaults, kwdefaults)
        cells = self._cells_for(fn)
        return Translator(self.output, code, f.__globals__, f.__builtins__, bound, cells, parent=self)

    def _wrap_defaults(self, fn: UserFunctionValue, nargs: int | None = None) -> tuple[Value, ...]:
        from .function_attrs import wrap_defaults  # NOTE [Defaults a call's binding consults]
        return wrap_defaults(self.output, fn.fn, _function_source(fn), nargs)

    def _wrap_kwdefaults(self, fn: UserFunctionValue, passed: Any = None) -> dict[str, Value]:
        from .function_attrs import wrap_kwdefaults  # NOTE [Defaults a call's binding consults]
        return wrap_kwdefaults(self.output, fn.fn, _function_source(fn), passed)

    def _cells_for(self, fn: UserFunctionValue) -> dict[str, Any]:
        code = fn.fn.__code__
        if fn.closure is not None:
            return dict(zip(code.co_freevars, fn.closure))
        real = fn.fn.__closure__ or ()
        if fn.source is not None and fn.by_code:
            base = AttrSource(fn.source, "__closure__")
            cells = {name: RealCell(cell, name, ItemSource(base, i)) for i, (name, cell) in
                     enumerate(zip(code.co_freevars, real))}
            from .handlers.stack import guard_passed_cells
            guard_passed_cells(self, cells.values())  # NOTE [Cells passed to resume functions]
        else:
            cells = {name: RealCell(cell, name) for name, cell in zip(code.co_freevars, real)}
        closure_cells.seen(self.output, cells.values())  # NOTE [Aliased cells are guarded]
        return cells

    # ---- nn.Module support --------------------------------------------------------------------
    def plan_module_call(self, mod: NNModuleValue) -> bool:
        """True when `mod(...)` runs hooks (inline module_hooks.call_with_hooks), False when it is exactly
        `forward(...)`; guarded either way (NOTE [Module hooks])."""
        return plan_module_call(self, mod)

    def guard_module_keys(self, mod: NNModuleValue) -> None:
        if mod.source is None:
            return
        e = mod.source.expr(self.output.names)
        keys = list(mod.obj._modules)
        self.output.add_guard("MODULE_KEYS", f"___list({e}._modules) == {keys!r}", mod.source,
                              expected=repr(keys), actual=f"___list({e}._modules)")

    # ---- provenance ---------------------------------------------------------------------------
    def frame_info(self) -> UserFrame:
        return user_frame(self.code, self.current, self.f_globals.get("__name__"))

    def user_stack(self) -> tuple[UserFrame, ...]:
        """The user's frames, outermost first (framejit's own trampolines are left out)."""
        frames = []
        tx: Translator | None = self
        while tx is not None:
            if not tx.code.co_filename.startswith(_FRAMEJIT_DIR):
                frames.append(tx.frame_info())
            tx = tx.parent
        return tuple(reversed(frames))


def _frame_eager(e: Exception) -> Unsupported:
    """A break or an exception at the root while a generator with finalizers made here has not ended: eager."""
    if isinstance(e, UserException):
        e = finalizer_break(f"{type(e.exc).__name__} raised while a generator with finalizers made here has "
                            "not ended: the frame runs as Python").with_stack(e.user_stack)
    e.frame_eager = True
    return e


def bind_arguments(code: types.CodeType, fname: str, args: list[Value], kwargs: dict[str, Value],
                   defaults: tuple[Value, ...], kwdefaults: dict[str, Value]) -> dict[str, Value]:
    """Bind abstract arguments to the parameters of `code` exactly as CPython does (or raise its TypeError)."""
    def fail(fallback: str) -> UserException:
        return _arity_error(code, fname, args, kwargs, defaults, kwdefaults, fallback)
    names = code.co_varnames
    npos, nkw, nposonly = code.co_argcount, code.co_kwonlyargcount, code.co_posonlyargcount
    pos_names, kw_names = names[:npos], names[npos:npos + nkw]
    index = npos + nkw
    varargs = names[index] if code.co_flags & inspect.CO_VARARGS else None
    varkw = names[index + bool(varargs)] if code.co_flags & inspect.CO_VARKEYWORDS else None
    bound: dict[str, Value] = dict(zip(pos_names, args))
    if len(args) > npos and varargs is None:
        raise fail(f"{fname}() takes {npos} positional arguments but {len(args)} were given")
    if varargs is not None:
        bound[varargs] = TupleValue(list(args[npos:]))
    extra: dict[str, Value] = {}
    for key, value in kwargs.items():
        if key in kw_names or key in pos_names[nposonly:]:
            if key in bound:
                raise fail(f"{fname}() got multiple values for argument '{key}'")
            bound[key] = value
        elif varkw is not None:
            extra[key] = value
        else:
            raise fail(f"{fname}() got an unexpected keyword argument '{key}'")
    first_default = npos - len(defaults)
    for i, name in enumerate(pos_names):
        if name not in bound:
            if i < first_default:
                raise fail(f"{fname}() missing required positional argument: '{name}'")
            bound[name] = defaults[i - first_default]
    for name in kw_names:
        if name not in bound:
            if name not in kwdefaults:
                raise fail(f"{fname}() missing required keyword-only argument: '{name}'")
            bound[name] = kwdefaults[name]
    if varkw is not None:
        bound[varkw] = DictValue(extra)
    return bound


def _arity_error(code: types.CodeType, fname: str, args: list, kwargs: dict, defaults: tuple, kwdefaults: dict,
                 fallback: str) -> UserException:
    """The TypeError of a call whose arguments do not fit, in CPython's words (NOTE [Arity errors as CPython
    words them] in arity_errors.py)."""
    from .arity_errors import cpython_message
    message = cpython_message(code, fname, len(args), kwargs, len(defaults), kwdefaults)
    return UserException(TypeError(message or fallback))


def builtins_of(f_globals: dict) -> Any:
    """The builtins a function made now with these globals gets (CPython's _PyEval_BuiltinsFromGlobals; NOTE
    [Builtins of a function]): the `__builtins__` entry (a module's dict), else the
    builtins module's (CPython takes the running frame's: the same unless that frame's were swapped too)."""
    held = f_globals.get("__builtins__")
    if held is None:
        return builtins.__dict__
    return held.__dict__ if isinstance(held, types.ModuleType) else held


__all__ = ["DISABLED", "LazyArg", "RealCell", "Translator", "bind_arguments", "builtins_of"]


def _stored_disable(fn: UserFunctionValue) -> bool:
    """`_torchdynamo_disable` stored on a function made while tracing (NOTE [Attributes of functions made
    while tracing]): not on the real object the trace holds, so read from its abstract `__dict__`."""
    instance_dict = (fn.attrs or {}).get("__dict__")
    flag = instance_dict.items.get("_torchdynamo_disable") if instance_dict is not None else None
    return flag is not None and (not flag.is_constant() or bool(flag.as_constant()))


def _function_source(fn: UserFunctionValue):
    """Where an inlined function's defaults are read and guarded from: its source, or, for a function
    found without one (a method read from its class's dict, whose identity that lookup guards), the
    function object itself; None for library functions (NOTE [Library modules]) and functions made in
    the frame (their defaults are values of the trace)."""
    if fn.source is not None:
        return fn.source
    module = getattr(fn.fn, "__module__", None) or ""
    if fn.closure is not None or module.split(".")[0] in LIBRARY_MODULE_PREFIXES:
        return None
    return ObjectSource(Ref(fn.fn, fn.fn.__name__ if fn.fn.__name__.isidentifier() else "fn"))


def _step_limit_reached(limit: int) -> Unsupported:
    if limit >= MAX_TRACE_STEPS:
        return Unsupported(BreakKind.TRACE_LIMIT,
                           f"tracing took more than {MAX_TRACE_STEPS} instructions (an unbounded loop?)")
    e = Unsupported(BreakKind.TRACE_LIMIT, "a generator took more instructions than its step budget "
                    "(an endless generator?)")
    e.step_budget = limit  # NOTE [Run-ahead step budget]: claimed by the generator that set this limit
    return e


# NOTE [Run-ahead step budget]: a generator run ahead of its consumer (NOTE [Eager generators]) runs to its end,
# so an endless one (`while True: yield t + i`, drawn twice by `next`) ran until MAX_TRACE_STEPS: 500,000 steps,
# minutes on the first call where eager is instant. Its run ahead may take RUN_AHEAD_STEPS instructions (a
# limit on the OutputGraph, `step_limit`, read when a frame starts running, nested generators taking the
# smaller); past that the trace gives up with the generator's code as `retry_lazy` (convert.py): the frame is
# traced again with it lazy (NOTE [Generators driven by send]), its body stepped in the consumer's order,
# so only what is drawn is traced. When that retry is not taken (a lazy trace of it failed before, or retries
# are spent), it is a break at the call that made the generator, as any untraceable step of its body. A lazy
# generator drained by a combinator (zip, enumerate, islice: values/containers.drain_lent) may take DRAIN_STEPS,
# past which it is a break before the call that made it; it is drawn ahead of its consumer only as NOTE [Lazy
# generators drawn ahead] in values/containers.py allows (zip and islice draw only what CPython's can draw:
# NOTE [Combinators over endless generators]).
RUN_AHEAD_STEPS = 5_000


def _run_within_budget(output, child, f: Any) -> Any:
    outer = output.__dict__.get("step_limit", MAX_TRACE_STEPS)  # NOTE [Run-ahead step budget]
    budget = min(outer, output.steps + RUN_AHEAD_STEPS)
    output.step_limit = budget
    try:
        return _run_generator_body(child, f, budget if budget < outer else None)
    finally:
        output.step_limit = outer


def _run_generator_body(child, f: Any, budget: int | None = None) -> Any:
    """Run the generator's body to its end (NOTE [Eager generators]); its return value. An exception it raises
    or a step that cannot be traced is a break at the call that made the generator."""
    try:
        return seen_on_close(child.run(), child, f)  # NOTE [Handlers that see the exception on close]
    except UserException as raised:
        # eager raises it only once the consumer reaches it, after using the items before it (and a
        # StopIteration leaving a generator is a RuntimeError, PEP 479): a handler around the call must
        # not see it here (NOTE [Exceptions caught while tracing])
        e = Unsupported(BreakKind.EXCEPTION_RAISED, f"the generator {f.__qualname__} raises "
                        f"{type(raised.exc).__name__}: it runs lazily, as Python")
        e.frame_eager = has_handlers(f.__code__) or child.delegates_finalizers
        e.retry_lazy = f.__code__  # NOTE [StopIteration leaving a generator body]: raised at the step, lazily
        raise (lazy_from_now(e, f.__code__) if e.frame_eager else e) from None
    except Unsupported as e:
        if getattr(e, "state_across_yield", False):  # NOTE [Torch state across yields] in handlers/blocks.py
            raise lazy_from_now(e, f.__code__)
        if budget is not None and getattr(e, "step_budget", None) == budget:  # NOTE [Run-ahead step budget]
            e.retry_lazy = f.__code__
        # a step of the body cannot be traced (a print in its finally): the break lands at the call
        # that made the generator, which then lives on in the resume function's arguments
        # (NOTE [Generators with finalizers])
        if has_handlers(f.__code__) or child.delegates_finalizers:
            e.frame_eager = True
        raise
