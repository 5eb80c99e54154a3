"""Turn one call of a frame into a compiled Entry: trace, compile the graph, generate the function,
compile the guards.

`convert_frame` never raises for framejit's own reasons: an unsupported step yields an *eager entry*
(the original function, guarded by the facts read up to that step, so the same path is never traced
twice), and an error in the user's code yields an eager entry too, so that eager execution raises the
user's real exception. Only `fullgraph=True` lets `Unsupported` reach the caller.
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import sys
import time
import traceback
import types
from typing import Any, Callable

import torch

from .. import config, logs
from ..guards import COST_ID, GuardFunction, compile_guards
from .backend_call import BackendCompilerFailed, backend_name, call_backend
from .tensor_subclasses import plain_tensor, subclass_boundary
from .torch_function_inline import fresh_trace
from .set_tables import check_set_rebuilds
from .tensor_attrs import drop_dead_stores
from .breaks import BreakKind, GraphBreak, Unsupported, UserException
from .codegen import GRAPH_OUT, Codegen, FunctionShape, Reconstructor, frame_signature, make_function
from .frame_locals import frame_reader_break, reads_own_locals
from .caught_exceptions import emit_final_locals, final_locals, final_values  # NOTE [Locals of a frame in a traceback]
from .graph_errors import on_graph_error  # NOTE [Effects before a failing graph]
from . import break_sites, cached_calls, closure_cells, frame_cache, inlined_comprehensions, persisted_code, python_loops
from . import deferred_readers, made_classes, step_breaks, unread_inputs
from .function_regions import function_regions
from .flex import graph_root  # NOTE [Flex attention in the graph]
from .higher_order import checkpoint_regions
from .reentrant_checkpoint import frame_binding, reentrant_regions
from .reentrant_recall import RetraceWithBreak
from .python_draws import has_draws
from .raising_floats import floats_then_draws  # NOTE [Rebuilt floats that raise]
from .input_versions import input_writes, keep_versions  # NOTE [Version counts of written inputs]
from .handler_reruns import restore_plan, restoring  # NOTE [Failing graphs inside handlers]
from .requests import STATS, CompileRequest, Entry, rerun_state
from .dynamic_misses import RaisedAtSymbolicOp, failed_trace, mark_break_results, raising_calls_run_eagerly
from .deep_traces import raise_if_too_deep
from .shapes import ConstraintViolationError, check_marked_dims
from .signal_exceptions import raised_by_signal_handlers
from .size_graphs import runs_as_its_own_code
from .values import Value

# NOTE [Warm path imports]: the translator, its handlers and the graph builder are imported by the
# functions that trace (`_tracing`), not by this module: a process whose frames all come from the frame
# cache runs without ever importing them.


def traced_lazily_from_now(e: Unsupported, output) -> bool:
    decisions = getattr(output, "lazy_decisions", None)  # NOTE [Lazy generators decided per frame]
    return decisions is not None and decisions.retry(e)


def _tracing():
    from . import graph, graph_break, normalize, translator
    return graph, graph_break, normalize, translator

def convert_frame(fn: types.FunctionType, args: tuple, kwargs: dict, request: CompileRequest,
                  dynamic_floats: frozenset = frozenset(), dynamic_dims: dict | None = None,
                  dynamic_ints: frozenset = frozenset()) -> Entry:
    """Trace, compile and guard one call of `fn`. Never raises for framejit's own reasons: an internal
    error is logged and the frame runs eagerly (with fullgraph=True it is an Unsupported).
    `dynamic_floats`: float arguments that become graph inputs (NOTE [Dynamic floats])."""
    start = time.perf_counter()
    STATS["frames_traced"] += 1
    from .lazy_generators import LazyDecisions  # NOTE [Lazy generators decided per frame]
    decisions = LazyDecisions(fn.__code__)
    with raised_by_signal_handlers():  # NOTE [Signal handlers during compilation]
        for _attempt in range(_LAZY_RETRIES):  # NOTE [Generators with finalizers traced lazily] in lazy_generators.py
            try:
                entry = _convert_once(fn, args, kwargs, request, dynamic_floats, dynamic_dims, dynamic_ints, decisions)
                break
            except (_RetryLazy, RetraceWithBreak):  # NOTE [Cells written after the call] in reentrant_recall.py
                continue
        else:
            entry = _convert_once(fn, args, kwargs, request, dynamic_floats, dynamic_dims, dynamic_ints, decisions,
                                  retry=False)
    STATS["compile_time_s"] += time.perf_counter() - start
    return entry


_LAZY_RETRIES = 4  # a wrapper generator over one that finalizes becomes lazy after it: one trace each


class _RetryLazy(Exception):
    """A generator with finalizers changed state when run ahead: trace the frame again, with it lazy."""


def _convert_once(fn, args: tuple, kwargs: dict, request: CompileRequest, dynamic_floats: frozenset,
                  dynamic_dims: dict | None, dynamic_ints: frozenset, decisions: Any, retry: bool = True) -> Entry:
    shape = FunctionShape.of(fn.__code__)
    output = _tracing()[0].OutputGraph()
    output.retry_lazy = retry
    output.frame_call = (args, kwargs)  # NOTE [State changed between the forward and the backward]
    decisions.used = set()
    output.lazy_decisions = decisions
    output.dynamic_floats = dynamic_floats
    output.dynamic, output.dynamic_dims, output.dynamic_ints = request.dynamic, dynamic_dims or {}, dynamic_ints
    output.fullgraph, output.root_flags = request.fullgraph, fn.__code__.co_flags
    output.entry_exception = sys.exc_info()[1] is not None  # NOTE [sys.exc_info while tracing] in stdlib.py
    from .default_device import sole_device_mode_device, traced_without_mode  # NOTE [Default device mode]
    output.default_device = output.entry_default_device = sole_device_mode_device()
    try:
        with _quiet_fake_tensor_errors(), traced_without_mode(output.default_device), cached_calls.conversion(), \
                _saved_hooks_held_back(), fresh_trace():  # NOTE [Saved-tensors hooks while tracing], [Gated
            # values counted per trace] in torch_function_inline.py
            entry = _convert(fn, shape, args, kwargs, request, output)  # NOTE [Cached calls counted as eager counts them]
    except (_RetryLazy, RetraceWithBreak):
        raise
    except ConstraintViolationError as e:  # NOTE [Broken mark_dynamic contracts] in shapes.py
        failed_trace(e, fn, shape, output, _guard_function)  # NOTE [A failed trace records its sizes]
        raise
    except (Unsupported, BackendCompilerFailed, RaisedAtSymbolicOp):  # NOTE [Backend failures raise] in
        raise  # backend_call.py, NOTE [Calls that raise at a symbolic op] in dynamic_misses.py
    except Exception as e:  # a framejit bug: the user's program must not see it
        if request.fullgraph:
            raise Unsupported(BreakKind.INTERNAL_ERROR, f"{type(e).__name__}: {e}") from e
        raise_if_too_deep(e, fn.__code__.co_qualname)  # NOTE [Traces out of stack] in deep_traces.py
        logs.log("eager_fallback", "%s runs eagerly after an internal error: %s",
                 fn.__code__.co_qualname, "".join(traceback.format_exception(e)[-3:]).strip())
        entry = _eager_entry(fn, shape, output, graph_break=GraphBreak(BreakKind.INTERNAL_ERROR, f"{type(e).__name__}: {e}"))
    return entry


# NOTE [Quiet fake-tensor errors]: when an op fails on fake tensors (a shape mismatch in the user's code),
# torch's fake-tensor module logs the meta kernel's whole traceback at ERROR level before raising. While
# tracing, that failure is the user's exception, which the frame then raises (or catches) eagerly, where
# eager prints nothing: so those records are dropped while a frame is traced.
class _DropErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


@contextlib.contextmanager
def _quiet_fake_tensor_errors():
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    drop = _DropErrors()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


# NOTE [Saved-tensors hooks while tracing]: saved-tensors hooks the caller (or a graph break inside the
# frame) pushed stay in force while a frame is traced, and the fake-tensor runs of the traced ops that
# autograd records called the user's pack hook on fake tensors: `with saved_tensors_hooks(pack, unpack):
# y = (x * x).sum()` (a break at the push, the rest traced) logged "pack" 6 times on the first call where eager
# logs it twice. While a frame is converted torch's tracing flag is set (what torch.compile does), so
# `_top_saved_tensors_default_hooks(False)` answers None and autograd calls no hook; hooks in force at a call
# still see the real run (NOTE [Saved-tensors hooks at the call] in saved_hooks.py).
@contextlib.contextmanager
def _saved_hooks_held_back():
    prior = torch._C._autograd._saved_tensors_hooks_set_tracing(True)
    try:
        yield
    finally:
        torch._C._autograd._saved_tensors_hooks_set_tracing(prior)


def _refuse_untraceable_frame(fn, output) -> None:
    """Raise the break of a frame that runs eagerly as a whole before any of it is traced."""
    if _dual_level() >= 0:  # NOTE [Frames under forward-mode AD]
        dual_break = Unsupported(BreakKind.UNSUPPORTED_CALL, "called inside a forward-mode AD dual level: runs eagerly "
                                 "(tangents of its tensors are not traced)")
        dual_break.frame_eager = True
        raise dual_break
    modes = _active_modes()
    if modes is not None:  # NOTE [Torch function and dispatch modes]
        mode_break = Unsupported(BreakKind.UNSUPPORTED_CALL, f"called under {modes}: runs eagerly")
        mode_break.frame_eager = True
        mode_break.callees_plain = True  # NOTE [Callees of frames run eagerly]: they would meet the mode
        raise mode_break
    reader = reads_own_locals(fn)
    if reader is not None and deferred_readers.traced_despite_readers(fn):
        output.readers_deferred = True  # NOTE [Locals readers decided where they are reached]
    elif reader is not None:  # NOTE [Frames that read their locals]
        locals_break = Unsupported(BreakKind.UNSUPPORTED_CALL, f"{reader}() reads the frame's locals: runs eagerly")
        locals_break.frame_eager = True
        raise locals_break
    frame_break = frame_reader_break(fn.__code__)
    if frame_break is not None:  # NOTE [Frames read through the frame stack]
        raise frame_break
    if fn.__builtins__ is not _tracing()[3].builtins_of(fn.__globals__):  # NOTE [Builtins of a function]
        builtins_break = Unsupported(BreakKind.UNSUPPORTED_VALUE, "its module's __builtins__ was swapped after "
                                     "it was defined (functions made from the globals now would differ)")
        builtins_break.frame_eager = True
        raise builtins_break


def _convert(fn, shape: FunctionShape, args: tuple, kwargs: dict, request: CompileRequest, output) -> Entry:
    code = fn.__code__
    _global_guards(output)
    tx = _root_translator(fn, args, kwargs, output)
    try:
        _refuse_untraceable_frame(fn, output)
        ret = tx.run()
        entry = _compile_entry(fn, shape, output, ret, request, final_locals(tx))
        STATS["frames_compiled"] += 1
    except Unsupported as e:
        if output.retry_lazy and traced_lazily_from_now(e, output):  # NOTE [Generators with finalizers traced lazily]
            raise _RetryLazy() from None
        if request.fullgraph:
            raise
        entry = None if getattr(e, "frame_eager", False) else _break_entry(  # NOTE [Generators with finalizers]
            fn, shape, args, kwargs, request, e, output)
        entry = entry or _eager_entry(
            fn, shape, output, graph_break=e.graph_break, routed=not getattr(e, "callees_plain", False))
        _log_break(fn, e.graph_break)
    except UserException as e:
        given_up = getattr(e, "handler_given_up", None)  # NOTE [Handlers given up in the root frame]
        if given_up is not None and request.fullgraph:
            raise given_up from None
        moved = None if request.fullgraph else \
            getattr(e, "generator_cm_break", None) or getattr(e, "callee_break", None)
        if moved is not None:  # NOTE [Exceptions in generator context manager blocks] in generator_ctx.py,
            # NOTE [Exceptions caught in callees] in translator.py
            entry = _break_entry(fn, shape, args, kwargs, request, moved, output)
            if entry is not None:
                _log_break(fn, moved.graph_break)
                return entry
        if getattr(e, "symbolic", False) and not request.fullgraph and raising_calls_run_eagerly():
            logs.log("eager_fallback", "%s: this call runs eagerly and leaves no entry: the traced code raised %s at "
                     "an op on symbolic values (%s)", code.co_qualname, type(e.exc).__name__, e.exc)
            raise RaisedAtSymbolicOp() from None  # NOTE [Calls that raise at a symbolic op] in dynamic_misses.py
        # NOTE [Exceptions raised by the traced code]: break before the root instruction that raises and let
        # plain Python raise it there (inside a try block, where the frame's exception table sees it): the
        # code before it stays captured; the frame ran wholly eagerly only where no break can be taken
        entry = _break_entry(fn, shape, args, kwargs, request, e, output)
        if entry is not None:  # only the rest, from the raising instruction on, runs as Python
            logs.log("graph_breaks", "%s: the traced code raised %s: %s; break before the raising instruction",
                     code.co_qualname, type(e.exc).__name__, e.exc)
        else:
            entry = _eager_entry(fn, shape, output, user_error=e.exc)
            logs.log("eager_fallback", "%s runs eagerly: the traced code raised %s: %s", code.co_qualname,
                     type(e.exc).__name__, e.exc)
        if given_up is not None and entry.graph_break is None:
            entry.graph_break = given_up.graph_break  # counted as the frame's break
            _log_break(fn, given_up.graph_break)
    return entry


def _argnames_in_signature_order(code: types.CodeType) -> list[str]:
    """The parameter names of `code` in the order a signature binds them: positional, `*args`,
    keyword-only, `**kwargs`. The code object lists keyword-only ones before `*args` (`def f(*items, flag)`
    has co_varnames `('flag', 'items')`); pairing those with `bound.arguments` swapped the two."""
    names = list(FunctionShape.of(code).argnames)
    positional, rest = names[:code.co_argcount], names[code.co_argcount:]
    keyword_only, rest = rest[:code.co_kwonlyargcount], rest[code.co_kwonlyargcount:]
    var_positional = [rest.pop(0)] if code.co_flags & inspect.CO_VARARGS else []
    return positional + var_positional + keyword_only + rest


def _root_translator(fn: types.FunctionType, args: tuple, kwargs: dict, output):
    bound = frame_signature(fn).bind(*args, **kwargs)
    bound.apply_defaults()
    translator = _tracing()[3]
    code = fn.__code__
    # inspect names a comprehension's implicit `.0` argument `implicit0`: the frame's locals are named as
    # its code names them, in the signature's order (NOTE [Locals that are not identifiers] in sources.py)
    names = _argnames_in_signature_order(code)
    f_locals = {name: translator.LazyArg(value, name) for name, value in zip(names, bound.arguments.values())}
    cells = closure_cells.root_cells(fn, translator.RealCell)  # NOTE [Cells read through the function called]
    closure_cells.seen(output, cells.values())  # NOTE [Aliased cells are guarded]
    return translator.Translator(output, code, fn.__globals__, fn.__builtins__, f_locals, cells)


# NOTE [Autocast off in one call]: the trace depends on whether autocast is on for "cpu" and "cuda". When it
# is off everywhere (nearly every call), one guard line checks `torch._C._is_any_autocast_enabled() is
# False` instead of two `torch.is_autocast_enabled(device) is False` lines: every device it covers
# includes "cpu" and "cuda", so it implies both facts, in one call without argument parsing (measured,
# loaded, 3.11: ~125 ns vs ~180 ns for each per-device call). Autocast entered later on a device the
# trace does not read (xpu, hpu, ...) fails it once; the new trace sees autocast on somewhere and guards
# "cpu" and "cuda" one by one as before, so it is not retraced again.
def _global_guards(output) -> None:
    grad = output.name_of(torch._C.is_grad_enabled, "is_grad_enabled")
    output.add_guard("GRAD_MODE", f"{grad}() is {output.grad_enabled}", None,
                     expected=f"grad mode {output.grad_enabled}", actual=f"{grad}()", cost=COST_ID)
    inference = output.name_of(torch._C.is_inference_mode_enabled, "is_inference_mode_enabled")
    output.add_guard("INFERENCE_MODE", f"{inference}() is {output.inference_mode}", None,
                     expected=f"inference mode {'on' if output.inference_mode else 'off'}", actual=f"{inference}()",
                     cost=COST_ID)
    dtype = torch._C.get_default_dtype()  # torch._C's functions: NOTE [Grad mode read from torch._C]
    get_dtype = output.name_of(torch._C.get_default_dtype, "get_default_dtype")
    output.add_guard("DEFAULT_DTYPE", f"{get_dtype}() is {output.name_of(dtype, 'default_dtype')}", None,
                     expected=str(dtype), actual=f"{get_dtype}()", cost=COST_ID)
    # autocast entered by the caller changes op dtypes: trace under it and pin it
    if not torch._C._is_any_autocast_enabled():  # NOTE [Autocast off in one call]
        any_autocast = output.name_of(torch._C._is_any_autocast_enabled, "is_any_autocast_enabled")
        output.add_guard("AUTOCAST", f"{any_autocast}() is False", None, expected="autocast off on every device",
                         actual=f"{any_autocast}()", cost=COST_ID)
    else:
        _autocast_guards(output)
    output.ambient_autocast = len(output.autocast_stack)
    _mode_guards(output)
    forward_ad = output.name_of(torch.autograd.forward_ad, "forward_ad")  # NOTE [Frames under forward-mode AD]
    output.add_guard("GLOBAL_STATE", f"{forward_ad}._current_level == {_dual_level()}", None,
                     expected=f"forward-AD level {_dual_level()}", actual=f"{forward_ad}._current_level", cost=COST_ID)


# NOTE [Frames under forward-mode AD]: inside `forward_ad.dual_level()` a tensor may carry a tangent, which fake
# tensors do not: traced, `unpack_dual(d.sin()).tangent` folded to a constant None, and a backend other than
# eager computes no tangents at all (review revV V2: a dual tensor passed to a compiled function gave None
# every call; `make_dual` after a break inside the function, None on the first call). A frame entered while a
# dual level is open runs eagerly (counted and logged as any eager frame), and every entry is guarded on the
# level it was made at, so an entry traced outside a level is never served inside one. Entering a level inside
# a traced frame is a break already (enter_dual_level changes state outside the graph): the rest of the frame
# runs as such an eager resume function.
def _dual_level() -> int:
    return torch.autograd.forward_ad._current_level


def _autocast_guards(output) -> None:
    """Autocast on somewhere: "cpu" and "cuda" each pinned (on or off), with the dtype of each one on."""
    is_autocast = output.name_of(torch.is_autocast_enabled, "is_autocast_enabled")
    for device_type in ("cpu", "cuda"):
        enabled = torch.is_autocast_enabled(device_type)
        output.add_guard("AUTOCAST", f"{is_autocast}({device_type!r}) is {enabled}", None,
                         expected=f"autocast({device_type}) {'on' if enabled else 'off'}",
                         actual=f"{is_autocast}({device_type!r})", cost=COST_ID)
        if enabled:
            autocast_dtype = torch.get_autocast_dtype(device_type)
            get_autocast = output.name_of(torch.get_autocast_dtype, "get_autocast_dtype")
            output.add_guard("AUTOCAST", f"{get_autocast}({device_type!r}) is {output.name_of(autocast_dtype)}",
                             None, expected=str(autocast_dtype), cost=COST_ID)
            output.autocast_stack.append((device_type, autocast_dtype, True, None))


# NOTE [Torch function and dispatch modes]: a TorchFunctionMode or TorchDispatchMode the caller entered
# (`with M(): compiled(x)`) may change what every torch call returns, and a compiled graph run by a backend
# (onnxrt, triton) never calls the mode: an entry traced without a mode, reused under one, returned
# `sin(x)` where the mode made eager return `cos(x)`. Every entry guards that the number of modes is the
# one it was made with, and a frame called under a mode runs eagerly (its own, guarded, eager entry), except
# under `torch.set_default_device` alone (NOTE [Default device mode] in default_device.py).
MODE_STACKS = (("function", torch._C._len_torch_function_stack), ("dispatch", torch._C._len_torch_dispatch_stack))


def _mode_guards(output) -> None:
    device = output.entry_default_device  # NOTE [Default device mode]: the stack is popped now (NOTE [Device blocks])
    for kind, length_fn in MODE_STACKS:
        length = output.name_of(length_fn, f"len_torch_{kind}_stack")
        depth = length_fn() + (kind == "function" and device is not None)
        output.add_guard("TORCH_MODES", f"{length}() == {depth}", None,
                         expected=f"{depth} torch {kind} modes", actual=f"{length}()", cost=COST_ID)
    if device is not None:
        from .default_device import sole_device_mode_device
        query = output.name_of(sole_device_mode_device, "sole_device_mode_device")
        output.add_guard("TORCH_MODES", f"{query}() == {output.name_of(device, 'device')}", None,
                         expected=f"torch.set_default_device({str(device)!r})", actual=f"{query}()", cost=COST_ID)


def _active_modes() -> str | None:
    active = [kind for kind, length_fn in MODE_STACKS if length_fn()]  # a sole DeviceContext is popped by now
    return " and ".join(f"a Torch{kind.capitalize()}Mode" for kind in active) or None


def _guard_function(fn: types.FunctionType, shape: FunctionShape, output, graphs: list | None = None) -> GuardFunction:
    if graphs is not None:  # a compiled entry (a plain break's, or a frame's without breaks)
        unread_inputs.relax(output, graphs)  # NOTE [Tensors passed through unread]
    output.distinct_objects_guard()
    from .hook_handles import guard_hook_ids  # NOTE [Hook ids that never leave the trace]
    guard_hook_ids(output, output.__dict__.get("hook_id_roots"))
    from .process_ids import finish  # NOTE [Ids as keys inside the trace]
    finish(output, output.__dict__.get("hook_id_roots"))
    from .shapes import marker_guards, shape_guards  # NOTE [Symbolic shapes]
    output.guards.extend(shape_guards(output))
    output.guards.extend(marker_guards(output))  # NOTE [Broken mark_dynamic contracts]
    from .handler_reruns import rewind_guards  # NOTE [Rewound histories]
    rewind_guards(output)
    guard = compile_guards(output.guards, shape.params_source(), output.names.namespace,
                           fn.__defaults__, fn.__kwdefaults__, name=f"guard_{fn.__code__.co_name}")
    guard.inlined_codes = frozenset(output.inlined_codes)  # NOTE [Disable after compiling] in hook.py
    if logs.enabled("guards"):
        logs.log("guards", "guards for %s (%s:%d):\n%s", fn.__code__.co_qualname, fn.__code__.co_filename,
                 fn.__code__.co_firstlineno, guard.source)
    return guard


# NOTE [Eager entries whose guards fail to build]: an eager entry is framejit's last resort (NOTE [Eager
# frames]), and convert_frame makes one after an internal error; yet it too generates a guard function, and
# the error may lie there (a guard function that was not valid Python: NOTE [Locals that are not
# identifiers] in sources.py). Then the entry gets a guard that accepts every call, so the frame runs
# eagerly from then on without being traced again, and its eager-frame record says why. With
# fullgraph=True an internal error raises Unsupported before any eager entry is made (convert_frame).
def _eager_entry(fn, shape, output, graph_break=None, user_error=None, routed=True) -> Entry:
    STATS["eager_entries"] += 1
    from .eager_frames import record  # NOTE [Eager frames]
    try:
        guard, unguarded = _guard_function(fn, shape, output), ""
    except Exception as e:  # NOTE [Eager entries whose guards fail to build]
        guard = compile_guards([], "*___args, **___kwargs", {}, name=f"accept_all_{fn.__code__.co_name}")
        unguarded = f"; its guards could not be generated ({type(e).__name__}: {e}): it runs eagerly on every call"
        logs.log("eager_fallback", "%s: its guards could not be generated, it runs eagerly on every call: %s",
                 fn.__code__.co_qualname, "".join(traceback.format_exception(e)[-3:]).strip())
    if graph_break is not None:
        why_not = getattr(output, "no_break_reason", None)
        record(fn.__code__, f"[{graph_break.kind.value}] {graph_break.explanation}" +
               (f"; no graph break could be taken there: {why_not}" if why_not else "") + unguarded,
               graph_break.location)
    else:
        record(fn.__code__, (f"the traced code raised {type(user_error).__name__}: {user_error}" if user_error
               is not None else "no graph could be built") + unguarded)
    from .resume import eager_function  # NOTE [Unbound hidden from eager runs]
    entry = Entry(guard, eager_function(fn), [], graph_break, user_error, routes_callees=routed)
    entry.runs_eagerly = True  # NOTE [Opaque sequences that cannot be carried] in carried_loops.py
    return entry


def _compile_entry(fn, shape: FunctionShape, output, ret: Value, request: CompileRequest, final=None) -> Entry:
    graph_break = _tracing()[1]
    kept = final_values(final or {})  # NOTE [Locals of a frame in a traceback]
    drop_dead_stores(output, [ret, *kept])  # NOTE [Stores on tensors that die in the frame]
    output.hook_id_roots = [ret, *output.side_effects.values()]  # the trace returned (NOTE [Hook ids that ...])
    outputs = break_sites.live_tensors([ret, *output.side_effects.values(), *kept])
    graphs = []
    cg = Codegen()
    output_index: dict[int, int] = {}
    rebuild = Reconstructor(cg, output_index, GRAPH_OUT, fn.__globals__)  # NOTE [Draws from the random module]
    gm = compiled = binding = None
    rebuild.output = output
    check_set_rebuilds([ret, *output.side_effects.values(), *kept], output)  # before the backend compiles
    if outputs or output.op_count:
        output.output(outputs)
        gm = torch.fx.GraphModule(graph_root(output), output.graph)
        function_regions(gm)  # NOTE [Custom autograd functions in the graph]
        reentrant_regions(gm, (output, shape, fn, False))  # NOTE [Reentrant checkpoint in the graph]
        checkpoint_regions(gm)  # NOTE [Checkpointed regions]
        graphs.append(gm)
        compiled = subclass_boundary(restoring(keep_versions(  # NOTE [Tensor subclasses traced as tensors]
            _backend_compile(gm, output, request, fn), gm, input_writes(output), output.output_versions),
            restore_plan(output)), output, outputs)
        binding = frame_binding(gm)  # NOTE [State changed between the forward and the backward]
        compiled = binding.graph(compiled) if binding is not None else compiled
        output_index.update({id(v.node): i for i, v in enumerate(outputs)})
    floats_then_draws(rebuild, [ret, *output.side_effects.values(), *kept], output, bool(output.side_effects),
                      graph=(compiled, output.inputs))  # NOTE [Rebuilt floats that raise]: floats before the graph
    rebuild.preload([ret, *output.side_effects.values(), *kept], sourced=bool(output.side_effects))
    output.side_effects.emit(rebuild)
    graph_break.restore_grad_mode(cg, output)
    rebuild.emit(ret)
    emit_final_locals(cg, rebuild, fn.__code__, final or {})
    cg.return_value()
    transformed = _transformed(shape, cg, fn, remake=True)
    _log_bytecode(fn, transformed)
    check_marked_dims(output)  # NOTE [Broken mark_dynamic contracts]
    entry = Entry(_guard_function(fn, shape, output, graphs), transformed, graphs, backend_outputs=output.backend_outputs,
                  rerun=rerun_state(gm, output.mutated_inputs, restore_plan(output) is not None))
    if binding is not None:
        binding.guard(entry, *output.frame_call)
    entry.on_graph_error = on_graph_error(fn, shape, output, gm is not None, entry.rerun is not None)
    if request.artifacts is not None and config.cache_enabled and not has_draws(output):
        try:
            # side-effect replay is code no plan describes: persisted as it is (NOTE [Persisted break code])
            with frame_cache.closures(fn, output.inlined):  # NOTE [Closure cells by path] in locators.py
                code = persisted_code.dump_code(fn, cg, compiled, None) if output.side_effects else None
                entry.persisted = frame_cache.persist(fn, output, ret, gm, compiled, output_index, request, code=code,
                                                      code_of=lambda: persisted_code.dump_code(fn, cg, compiled, None))
            entry.persisted.guard_source = entry.guard.source
        except frame_cache.NotPersistable as e:
            logs.log("cache", "frame entry of %s kept in memory only: %s", fn.__code__.co_qualname, e)
    from .kept_joints import passes_arguments_only_to_graphs  # NOTE [Joints kept across a plain break]
    entry.passes_arguments_only_to_graphs = passes_arguments_only_to_graphs(output, ret)
    if entry.persisted is not None:  # NOTE [Clean entries of a warm process]
        entry.persisted.clean = entry.passes_arguments_only_to_graphs
    return entry


def _refused(first, reason: str) -> None:
    """No break taken for the frame `first` traced: `reason` is what explain() reports (NOTE [Eager frames])."""
    first.no_break_reason = reason


def _moves_earlier(e: Exception, site) -> bool:
    """A break could not be taken at `site` because of `e`, which names an earlier instruction to break at
    instead (NOTE [Breaks moved earlier]); not one that makes the frame eager (NOTE [Generators with
    finalizers traced lazily] in lazy_generators.py: the resume function would keep the generator alive)."""
    earlier = getattr(e, "root_index", None)
    refused = getattr(e, "finalizes", getattr(e, "frame_eager", False))  # a run-ahead generator (its run changed
    # nothing) breaks where it was made, as before c54dc4e (review revT T3)
    return isinstance(e, Unsupported) and not refused and earlier is not None and earlier < site.inst.index


def _finalizer_suspended(output, first) -> bool:
    """At a break: a generator with finalizers made by the trace is suspended (NOTE [Generators with
    finalizers traced lazily]): the frame runs eagerly."""
    from .lazy_generators import suspended_finalizers
    if suspended_finalizers(output):
        _refused(first, "a generator with finalizers is suspended at the break")
        return True
    return False


def _transformed(shape: FunctionShape, cg, fn, remake: bool = False) -> types.FunctionType:
    """The transformed function of `cg`, unless it hands out a class made per call (NOTE [Classes made per
    call] in made_classes.py: Unsupported; `remake`: made again at entry where it can be)."""
    made_classes.check_code(cg, remake)
    return make_function(shape, cg, fn.__globals__, fn.__defaults__, fn.__kwdefaults__)


def _break_entry(fn, shape: FunctionShape, args: tuple, kwargs: dict, request: CompileRequest,
                 exc: Unsupported | UserException, first) -> Entry | None:
    """The entry for a frame that breaks at `exc` (graph_break.py), or None to run it eagerly."""
    graph_break = _tracing()[1]
    symbolic = bool(first.dynamic or first.dynamic_dims or first.dynamic_ints)
    loop_exc = inlined_comprehensions.moved_break(fn.__code__, exc) or \
        python_loops.moved_break(fn.__code__, exc, symbolic)  # NOTE [Loops run as Python]
    if loop_exc is not None:
        return _break_entry(fn, shape, args, kwargs, request, loop_exc, first)
    nested = _nested_break_entry(fn, shape, args, kwargs, request, exc, first)  # NOTE [Nested graph breaks]
    site = None if nested is not None else _resumable_site(fn, exc, first)
    if site is None:
        return nested
    if getattr(first, "readers_deferred", False) and deferred_readers.break_reaches_reader(fn, site.inst.index):
        return _refused(first, "locals() can run after it")  # NOTE [Locals readers decided where they are reached]
    output = _retrace_output(first)
    from .tensor_hooks import mark_result_node_reads  # NOTE [Autograd nodes of a graph's results]
    mark_result_node_reads(exc, output)
    tx = _root_translator(fn, args, kwargs, output)
    tx.stop_at = site.inst.index
    try:
        if tx.run() is not None or _finalizer_suspended(output, first):
            return None
        comp = getattr(exc, "comprehension", None)  # NOTE [Breaks inside inlined comprehensions]
        if comp is not None and inlined_comprehensions.body_binds_unbound(fn.__code__, comp, tx.locals):
            return _break_entry(fn, shape, args, kwargs, request, exc.moved_from, first)
        if site.loop is not None and comp is None and (  # NOTE [Locals first bound in a loop run as Python]
                not step_breaks.loop_runs_as_python(fn.__code__, site, tx.stack, exc.moved_from) or
                python_loops.body_binds_locals_read_after(fn.__code__, site.loop, tx.locals)):
            return _break_entry(fn, shape, args, kwargs, request, exc.moved_from, first)
        recorder = persisted_code.Recorder(_BoundHooks(request.hooks, fn))  # NOTE [Persisted break code]
        gen = graph_break.BreakCodegen(fn, site, tx, request, recorder)
        mark_break_results(gen, exc)  # NOTE [Results of calls that broke inside] in dynamic_misses.py
        compiled, output_index, graphs = _compile_before_break(fn, shape, gen, output, request)
        cg = gen.emit(compiled, output_index, output.inputs)
        transformed = _transformed(shape, cg, fn)
    except (Unsupported, UserException) as e:
        if site.loop is not None:  # the loop cannot run as Python here: break where the trace did
            return _break_entry(fn, shape, args, kwargs, request, exc.moved_from, first)
        if _moves_earlier(e, site):
            # NOTE [Breaks moved earlier]: the break could not be taken here because a value live at it
            # must break where it was made (a generator or a lazy combinator escaping: NOTE [Eager
            # generators]): break there instead, an earlier instruction, so the trace ends sooner each time
            return _break_entry(fn, shape, args, kwargs, request, e, first)
        logs.log("eager_fallback", "%s: no graph break taken (%s); the frame runs eagerly", fn.__code__.co_qualname, e)
        first.no_break_reason = str(getattr(e, "graph_break", None) or e).split("\n")[0]  # NOTE [Eager frames]
        return None
    except (BackendCompilerFailed, RetraceWithBreak):
        raise
    except Exception as e:  # an internal error while generating the break: run the frame eagerly
        if site.loop is not None:  # NOTE [Loops run as Python]: break where the trace did instead
            logs.log("graph_breaks", "%s: the loop cannot run as Python (%s: %s)", fn.__code__.co_qualname,
                     type(e).__name__, e)
            return _break_entry(fn, shape, args, kwargs, request, exc.moved_from, first)
        logs.log("eager_fallback", "%s: graph break failed (%s: %s); the frame runs eagerly",
                 fn.__code__.co_qualname, type(e).__name__, e)
        return None
    return _finish_break_entry(fn, shape, exc, output, request, transformed,
                               (gen, compiled, cg, output_index, graphs, recorder))


def _nested_break_entry(fn, shape: FunctionShape, args: tuple, kwargs: dict, request: CompileRequest,
                        exc: Unsupported | UserException, first) -> Entry | None:
    """The entry for a frame whose break `exc` happened inside inlined calls, broken there (NOTE [Nested graph
    breaks] in nested_breaks.py), or None to break at the root's call instead."""
    from . import nested_breaks, nested_persist
    from .nested_frames import NestedStop
    if not nested_breaks.worth_trying(fn, exc):
        return None
    output = _retrace_output(first)
    output.nest_stop = exc.nest_path
    from .tensor_hooks import mark_result_node_reads  # NOTE [Autograd nodes of a graph's results]
    mark_result_node_reads(exc, output)
    tx = _root_translator(fn, args, kwargs, output)
    try:
        try:
            tx.run()
            return None  # the trace did not reach the break's frames
        except NestedStop as stop:
            inner = stop.tx
        if _finalizer_suspended(output, first) or getattr(first, "readers_deferred", False):
            return None
        frames, site = nested_breaks.plan(fn, inner, exc)
        if request.artifacts is not None and config.cache_enabled:  # NOTE [Nested breaks persisted]
            nested_persist.check(frames, fn)
        recorder = persisted_code.Recorder(_BoundHooks(request.hooks, fn))  # NOTE [Nested breaks persisted]
        gen = nested_breaks.NestedBreakCodegen(fn, frames, site, request, recorder)
        compiled, output_index, graphs = _compile_before_break(fn, shape, gen, output, request)
        cg = gen.emit(compiled, output_index, output.inputs)
        transformed = _transformed(shape, cg, fn)
    except (BackendCompilerFailed, RetraceWithBreak):
        raise
    except Exception as e:  # out of scope or unsupported: the plain break at the root's call
        logs.log("graph_breaks", "%s: no nested break (%s: %s)", fn.__code__.co_qualname, type(e).__name__, e)
        return None
    return _finish_break_entry(fn, shape, exc, output, request, transformed,
                               (gen, compiled, cg, output_index, graphs, recorder))


def _finish_break_entry(fn, shape: FunctionShape, exc, output, request: CompileRequest, transformed,
                        made: tuple) -> Entry:
    """The Entry of a frame whose break code `transformed` was generated (`made`: what _break_entry made)."""
    gen, compiled, cg, output_index, graphs, recorder = made
    _log_bytecode(fn, transformed)
    check_marked_dims(output)  # NOTE [Broken mark_dynamic contracts]
    plain = type(gen) is _tracing()[1].BreakCodegen  # not a nested break (NOTE [Tensors passed through unread])
    entry = Entry(_guard_function(fn, shape, output, graphs if plain else None), transformed, graphs,
                  graph_break=getattr(exc, "graph_break", None), backend_outputs=output.backend_outputs,
                  rerun=rerun_state(graphs[0] if graphs else None, output.mutated_inputs,
                                    restore_plan(output) is not None))
    entry.on_graph_error = on_graph_error(fn, shape, output, bool(graphs), entry.rerun is not None)
    if output.__dict__.get("reentrant_binding") is not None:  # NOTE [State changed between the forward and the ...]
        output.reentrant_binding.guard(entry, *output.frame_call)
    from .kept_joints import break_entry_settles  # NOTE [Joints kept across several breaks]
    entry.passes_arguments_only_to_graphs, entry.kept_speculation = break_entry_settles(output, gen, compiled)
    if request.artifacts is not None and config.cache_enabled and not has_draws(output):  # NOTE [Persisted
        # break code]; NOTE [Draws from the random module]: not persisted
        _persist_break_entry(entry, fn, output, request, cg, compiled, output_index, graphs, recorder)
    return entry


def _resumable_site(fn, exc: Unsupported | UserException, first):
    """The break site of `exc` in `fn`'s code, or None (with the reason in `first.no_break_reason`) where no
    resume function can continue from it."""
    site = break_sites.break_site(fn.__code__, exc)
    if site is None:
        first.no_break_reason = "the instruction is not one a frame can resume after"  # NOTE [Eager frames]
        return None
    if break_sites.super_without_instance(fn.__code__, site.inst.index):  # NOTE [Zero-argument super() at breaks]
        first.no_break_reason = "zero-argument super() at or after the break needs the frame's own first local " \
            "and __class__ cell"
        return None
    return site


def _compile_before_break(fn, shape: FunctionShape, gen, output, request) -> tuple:
    """The graph of the trace up to the break, outputting the tensors live there, compiled by the backend:
    (compiled or None when there is nothing to run, {id(node): output index}, [the GraphModule] or [])."""
    outputs = break_sites.live_tensors(gen.values())
    if not outputs and not output.op_count:
        return None, {}, []
    from .tensor_hooks import mark_results_across_break  # NOTE [Autograd state observed after a break]
    mark_results_across_break(output, outputs, gen)
    output.output(outputs)
    gm = torch.fx.GraphModule(graph_root(output), output.graph)
    function_regions(gm)  # NOTE [Custom autograd functions in the graph]
    reentrant_regions(gm, (output, shape, fn, True))  # NOTE [Reentrant checkpoint in the graph]
    checkpoint_regions(gm)  # NOTE [Checkpointed regions]
    compiled = subclass_boundary(restoring(keep_versions(  # NOTE [Tensor subclasses traced as tensors]
        _backend_compile(gm, output, request, fn, at_break=True), gm, input_writes(output), output.output_versions),
        restore_plan(output)), output, outputs)
    output.reentrant_binding = frame_binding(gm)  # NOTE [State changed between the forward and the backward]
    if output.reentrant_binding is not None:
        compiled = output.reentrant_binding.graph(compiled)
    return compiled, {id(v.node): i for i, v in enumerate(outputs)}, [gm]


def _retrace_output(first):
    """A fresh OutputGraph for tracing a frame again up to its break, with the first trace's settings."""
    output = _tracing()[0].OutputGraph()
    output.frame_call = first.frame_call  # NOTE [State changed between the forward and the backward]
    output.retry_lazy = getattr(first, "retry_lazy", False)  # NOTE [Cells written after the call]
    output.dynamic_floats = first.dynamic_floats
    output.dynamic, output.dynamic_dims, output.dynamic_ints = first.dynamic, first.dynamic_dims, first.dynamic_ints
    output.fullgraph, output.entry_exception = first.fullgraph, first.entry_exception
    output.root_flags = getattr(first, "root_flags", None)  # NOTE [Unbind along a symbolic length]
    output.readers_deferred = getattr(first, "readers_deferred", False)
    output.lazy_decisions = getattr(first, "lazy_decisions", None)  # NOTE [Lazy generators decided per frame]
    output.entry_default_device = output.default_device  # NOTE [Device blocks]: the mode stack at entry
    _global_guards(output)
    return output


def _persist_break_entry(entry, fn, output, request, cg, compiled, output_index, graphs, recorder) -> None:
    """Store a frame's break entry (its code, graph and break) in the frame cache, or log why not."""
    try:
        with frame_cache.closures(fn, output.inlined):  # NOTE [Closure cells by path] in locators.py
            code = persisted_code.dump_code(fn, cg, compiled, recorder)
            entry.persisted = frame_cache.persist(fn, output, None, graphs[0] if graphs else None, compiled,
                                                  output_index, request, code=code)
        entry.persisted.guard_source = entry.guard.source
        frame_cache.persist_break(entry.persisted, entry.graph_break, fn, output)  # for a warm process
    except frame_cache.NotPersistable as e:
        logs.log("cache", "frame entry of %s kept in memory only: %s", fn.__code__.co_qualname, e)


class _BoundHooks:
    """Hooks as BreakCodegen needs them: resume functions bound to the frame's globals and closure."""

    def __init__(self, hooks, fn: types.FunctionType) -> None:  # hook.Hooks
        self.hooks = hooks
        self.fn = fn

    def function(self, fn: types.FunctionType):
        return self.hooks.function(fn)

    def module_call(self):
        return self.hooks.module_call()

    def module_forward(self, forward: types.FunctionType):
        return self.hooks.module_forward(forward)

    def call_through_hook(self):
        return self.hooks.call_through_hook  # NOTE [Closures called at breaks]

    def resume(self, code, index, layout, names, hooked=True, successors=(), python_loop=None, cells=()):
        return self.hooks.resume(code, index, layout, names, self.fn, hooked, successors, python_loop, cells)


def _backend_compile(gm: torch.fx.GraphModule, output, request: CompileRequest, fn: types.FunctionType,
                     at_break: bool = False) -> Callable:
    check_marked_dims(output)  # NOTE [Broken mark_dynamic contracts]: raised before the backend compiles a graph
    if runs_as_its_own_code(gm, rows=at_break):
        gm.runs_as_own_code = True  # read by frame_cache._persist
        return gm.forward  # NOTE [Graphs that only read sizes] / [... select rows]: not a compilation
    example_inputs = [plain_tensor(inp.tensor) for inp in output.inputs]  # NOTE [Tensor subclasses traced as tensors]
    STATS["graphs"] += 1
    if logs.enabled("graph_code"):
        logs.log("graph_code", "%s", gm.print_readable(print_output=False))
    if logs.enabled("graph"):
        logs.log("graph", "%s", gm.graph)
    code = fn.__code__
    name = backend_name(request.backend, request.version_key)
    where = f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})"

    def compile_part(part: torch.fx.GraphModule, part_inputs: list) -> Callable:
        compiled = call_backend(part, part_inputs, request.backend, request.options, name, where)
        STATS["backend_compiles"] += 1
        output.backend_outputs.append(describe_backend_output(part, compiled))
        if logs.enabled("output_code"):
            logs.log("output_code", "%s", output.backend_outputs[-1])
        return compiled

    from .op_warnings import close_graph, compiling, located_forward, with_replay  # NOTE [Warnings of graph ops]
    close_graph(output)
    located = located_forward(gm)
    eager_forward = located or gm.forward  # bound now: the graph's own code, whatever the backend does to gm later
    from .ddp_buckets import compile_in_buckets, guard_ddp  # NOTE [Graphs split at DDP's buckets]
    guard_ddp(output, example_inputs)  # NOTE [Entries guarded on DDP]
    compiled = compiling(gm, lambda: compile_in_buckets(gm, example_inputs, compile_part) or
                         compile_part(gm, example_inputs))
    from .tensor_hooks import own_code_reason  # NOTE [Tensor hooks registered after the graph] (tensor_hooks.py)
    compiled_is_own = getattr(compiled, "__self__", None) is gm  # the eager backend
    reason = own_code_reason(output, gm, example_inputs, compiled_is_own)
    if reason:
        if not compiled_is_own:
            STATS["graphs_own_code"] += 1
            logs.log("eager_fallback", "%s: graph %d runs as its own code: %s", where, STATS["graphs"], reason)
        return eager_forward
    if located is not None:  # NOTE [Warnings of graph ops]: a backend that returns gm runs its code too
        compiled = eager_forward if compiled_is_own or compiled is gm else with_replay(gm, compiled, eager_forward)
    from .saved_hooks import hook_aware  # NOTE [Saved-tensors hooks at the call]
    from .kept_joints import speculated  # NOTE [Joints kept across a plain break]
    return speculated(output, hook_aware(gm, compiled, eager_forward, output.grad_enabled, example_inputs),
                      eager_forward, where)


def describe_backend_output(gm: torch.fx.GraphModule, compiled: Callable) -> str:
    """A readable account of what the backend made of `gm` (for dumps and the output_code log)."""
    if getattr(compiled, "__self__", None) is gm:
        return f"eager: the graph runs as its Python code\n{gm.code}"
    source = getattr(compiled, "source", None)
    if isinstance(source, str):
        return f"{type(compiled).__name__} ({getattr(compiled, 'source_path', '')}):\n{source}"
    summary = getattr(compiled, "summary", None)
    if callable(summary):
        try:
            return f"{type(compiled).__name__}: {summary()}"
        except Exception:  # a description must never fail compilation
            pass
    return f"{type(compiled).__module__}.{type(compiled).__qualname__}"


def _log_break(fn: types.FunctionType, graph_break: GraphBreak) -> None:
    if logs.enabled("graph_breaks"):
        frame = graph_break.user_stack[-1] if graph_break.user_stack else None
        where = f"{frame.filename}:{frame.lineno}\n    {frame.line}" if frame else "<unknown>"
        logs.log("graph_breaks", "graph break in %s at %s\n  reason: [%s] %s\n  hint: %s",
                 fn.__code__.co_qualname, where, graph_break.kind.value, graph_break.explanation, graph_break.hint)


def _log_bytecode(fn: types.FunctionType, transformed: types.FunctionType) -> None:
    if logs.enabled("bytecode"):
        from ..dump import disassemble
        logs.log("bytecode", "original bytecode of %s:\n%s\ntransformed:\n%s", fn.__code__.co_qualname,
                 disassemble(fn.__code__), disassemble(transformed.__code__))


__all__ = ["convert_frame", "describe_backend_output"]
