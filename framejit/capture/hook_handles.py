"""Hook handles made while tracing: `RemovableHandle.__init__` answered at trace time.

NOTE [Hooks registered in the trace]: `module.register_forward_hook(hook)` (and the pre-hook, global-hook
and state-dict variants) makes a `torch.utils.hooks.RemovableHandle`, whose `__init__` keeps weak references
to the hook dicts (NOTE [Weak references made in the trace]) and takes the next id from the class counter
`RemovableHandle.next_id`, then stores the hook under that id in the module's dict. The dict stores are
ordinary recorded writes into dicts from outside, replayed after the graph, so the hook exists after the
call as in eager; later calls see it through the hook-dict key guards of every module call
(NOTE [Module hooks]), and the trace's own later calls of the module read the dict as the trace left it
(`module_hooks.hook_table`).

The id is the one mutable input: the trace reads the counter once, guards `RemovableHandle.next_id == n`
(the ids and dict keys the replay writes are fixed), hands out n, n+1, ... and records a finishing call
that leaves the counter where eager leaves it (NOTE [Finishing calls]; the ids taken so far are found from
those calls, so a trace rolled back to a checkpoint hands them out again). A program that registers a
hook in every call therefore traces each call anew (as it did when the registration was a break).
A subclass of RemovableHandle is inlined as written.
"""
from __future__ import annotations

from torch.utils.hooks import RemovableHandle

from .breaks import BreakKind, Unsupported
from .values import ConstantValue, NewObjectValue, SequenceValue, TupleValue, Value
from .weak_refs import weak_ref


def set_next_hook_id(n: int) -> None:
    """The finishing call of a trace that handed out hook ids below `n` (NOTE [Hooks registered in the trace])."""
    RemovableHandle.next_id = n


def _take_id(tx) -> int:
    side_effects = tx.output.side_effects
    taken = [objects[0].as_constant() for function, objects in side_effects.finishing_calls
             if function is set_next_hook_id]
    if taken:
        n = taken[-1]
    else:
        n = RemovableHandle.next_id
        h = tx.output.name_of(RemovableHandle, "RemovableHandle")
        tx.output.add_guard("HOOK_IDS", f"{h}.next_id == {n!r}", None, expected=repr(n), actual=f"{h}.next_id")
    side_effects.record_finishing_call(set_next_hook_id, [ConstantValue(n + 1)], walks_unchanged=True)
    return n


def _extra_refs(tx, extra: Value) -> TupleValue:
    """`extra_dict_ref`: one ref for a dict, one per item of a list, none otherwise (as __init__ decides)."""
    cls = extra.python_type()
    if issubclass(cls, dict):
        return TupleValue([weak_ref(tx, extra)])
    if issubclass(cls, list):
        if not isinstance(extra, SequenceValue):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, "RemovableHandle() with extra dicts the trace cannot list")
        return TupleValue([weak_ref(tx, d) for d in extra.items])
    return TupleValue([])


def removable_handle_init(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """`RemovableHandle.__init__(self, hooks_dict, *, extra_dict=None)` while tracing."""
    if len(args) != 2 or set(kwargs) - {"extra_dict"} or not isinstance(args[0], NewObjectValue) or \
            args[0].cls is not RemovableHandle:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "RemovableHandle.__init__ called in an unusual way")
    handle, hooks_dict = args
    hooks_ref = weak_ref(tx, hooks_dict)
    extra_refs = _extra_refs(tx, kwargs.get("extra_dict", ConstantValue(None)))
    tx.store_attr(handle, "hooks_dict_ref", hooks_ref)
    tx.store_attr(handle, "id", ConstantValue(_take_id(tx)))
    tx.store_attr(handle, "extra_dict_ref", extra_refs)
    return ConstantValue(None)
