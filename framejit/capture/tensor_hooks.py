"""`tensor.register_hook(fn)` inside compiled code (issue 11).

NOTE [Tensor hooks registered after the graph]: a gradient hook registered on an intermediate (`y = x * 2;
y.register_hook(fn)`) or on an input was a graph break (2 graphs where stock torch.compile makes 1). A tensor
hook does nothing until the backward reaches that tensor, and it applies to the tensor's whole gradient,
whatever uses of the tensor came before or after the registration; so registering it when the graph has
returned, on the same tensor object, is what eager's registration inside the frame does. The tensor becomes
a graph output (an input is reloaded from its source), the hook is rebuilt like any value the replay
needs (a function from outside, a closure of the trace), and `codegen_runtime.register_tensor_hook`
registers it after the graph with the id eager's handle took: the counter at entry plus the ids the trace
handed out before it (NOTE [Hooks registered in the trace]); a finishing call advances the counter after,
and no guard on the counter is needed for it. A break later in the frame replays it before the unsupported
instruction runs (a `backward()` or `torch.autograd.grad` call inside the frame then sees it).

For an intermediate, that is the same tensor only while the graph runs as its own code: a backend's joint
(AOT autograd: onnxrt, triton) returns a new output tensor whose gradient the graph's own uses do not reach.
Such a graph therefore runs as the graph module's own code (convert._backend_compile), and the entry is not
persisted (its runtime differs from what the backend made). A write in place to the tensor (or a view of it) after
the registration is a graph break before the write (`check_hooked_unchanged`), so the hook is registered
before it as in eager (the write gives it a new grad_fn, whose gradient the hook would see otherwise).
Handled here only when the handle is discarded
(the next instruction is POP_TOP; a handle kept, `h = y.register_hook(fn)` for a later `h.remove()`, is a
break as before), the tensor requires grad (else eager's RuntimeError), and the hook is a value the replay
can rebuild; other cases are a graph break.
"""
from __future__ import annotations

from .breaks import BreakKind, Unsupported, UserException
from .values import (BoundMethodValue, ConstantValue, NNModuleValue, ObjectValue, PartialValue, TensorValue,
                     UserFunctionValue, Value)


def register_hook(tx, tensor: TensorValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if len(args) != 1 or kwargs or not _handle_discarded(tx):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "Tensor.register_hook() whose handle is kept")
    hook = args[0]
    if not _rebuildable(hook):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"Tensor.register_hook() of {hook.describe()}")
    if not tensor.fake.requires_grad:
        raise UserException(RuntimeError("cannot register a hook on a tensor that doesn't require gradient"))
    from .hook_handles import _taken, advance_tensor_hook_id
    offset = _taken(tx.output)  # the ids handed out before this one in the trace
    tx.output.side_effects.record_finishing_call(advance_tensor_hook_id, [], walks_unchanged=True)
    if tensor.source is None:
        tx.output.__dict__["hooked_outputs"] = True  # runs as the graph's own code (convert._backend_compile)
        tx.output.__dict__["process_local"] = "the graph registers tensor hooks on its outputs"
    tx.output.side_effects.record_tensor_hook(tensor, hook, offset)
    tx.output.__dict__.setdefault("hooked_fakes", []).append((tensor.fake, tensor.fake._version))
    return ConstantValue(None)


def check_hooked_unchanged(out) -> None:
    """An in-place op just ran while tracing: one that wrote a tensor (or a view of it) after a hook was
    registered on it is a graph break before the op, so the hook is registered where eager registers it (the
    write gives the tensor a new grad_fn; registered after it, the hook would see the new version's gradient)."""
    if any(fake._version != version for fake, version in out.__dict__.get("hooked_fakes", ())):
        raise Unsupported(BreakKind.SIDE_EFFECT, "an in-place write to a tensor after a hook was registered on it")


def _handle_discarded(tx) -> bool:
    insts = tx.program.insts
    return tx.pc < len(insts) and insts[tx.pc].name == "POP_TOP"


def _rebuildable(hook: Value) -> bool:
    if isinstance(hook, UserFunctionValue):
        return True  # from outside (its source) or made in the trace (rebuilt as a closure)
    if isinstance(hook, PartialValue):
        return _rebuildable(hook.func) and all(a.is_constant() or isinstance(a, TensorValue) for a in hook.args)
    if isinstance(hook, BoundMethodValue):
        return isinstance(hook.func, UserFunctionValue) and getattr(hook.self_value, "source", None) is not None
    return isinstance(hook, (ObjectValue, NNModuleValue)) and hook.source is not None
