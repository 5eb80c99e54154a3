"""Hook handles made while tracing: `RemovableHandle.__init__` answered at trace time.

NOTE [Hooks registered in the trace]: `module.register_forward_hook(hook)` (and the pre-hook, global-hook
and state-dict variants) makes a `torch.utils.hooks.RemovableHandle`, whose `__init__` keeps weak references
to the hook dicts (NOTE [Weak references made in the trace]) and takes the next id from the class counter
`RemovableHandle.next_id`, then stores the hook under that id in the module's dict. The dict stores are
ordinary recorded writes into dicts from outside, replayed after the graph, so the hook exists after the
call as in eager; later calls see it through the hook-dict key guards of every module call
(NOTE [Module hooks]), and the trace's own later calls of the module read the dict as the trace left it
(`module_hooks.hook_table`).

The id is the one mutable input: the trace reads the counter, hands out n, n+1, ... and records one
finishing call per id that advances the counter as eager does (NOTE [Finishing calls]; the ids taken so far
are counted from those calls, so a trace rolled back to a checkpoint hands them out again).

NOTE [Hook ids that never leave the trace]: the ids are baked into what the trace made (the handle's `id`,
the hook dicts' keys), so in general the entry guards `RemovableHandle.next_id == n`. But the common
library pattern registers a hook, calls the module and removes the hook within the call: then no id
outlives the trace and any starting id gives the same result (ids are unique, so n is no live key of any
dict; the replay advances the counter relatively). That guard made such a frame trace on every call until
the recompile limit ran it eagerly. It is left out when, at the end of a trace that returns normally, no
handle made in the trace is reachable from the return value or the replayed effects, no dict the replay
writes still holds a taken id as a key, no code but torch's own hook code read a handle's `id`
(`note_id_read`), and no dict key equal to a taken id was read as a value (`note_key_read`); a trace that
ends at a graph break keeps the guard. "torch's own hook code" is RemovableHandle.remove
(which only tests and deletes its key) and the register functions of torch/nn/modules/module.py (which
only file the id as a key), not the whole files: __getstate__ returns the id (h.__getstate__()[1] was
baked in, found by a review of 722e8b0). A handle's `__dict__` (h.__dict__["id"], vars(h)) counts as a
read of its id, and a hook dict's keys read (list(m._forward_hooks), its keys, items, str) expose the taken
ids as keys: both returned the first call's ids on every call before. Keys are read where a dict key
becomes a value (`values.mappings.key_value`, `DictValue.as_constant`): while a trace holds taken ids
(`HOOK_IDS_LIVE`) such a read of one marks them escaped, except the item stores and deletes of
STORE_SUBSCR/DELETE_SUBSCR, which only record the key for the replay. A taken id used as a key by the
program (`5 in m._forward_hooks`, `m._forward_hooks.get(5)` with a literal that equals this call's id,
`note_key_lookup`, in identity_keys.dict_key: any int at least the first id taken, since the next call
hands out the next ids) escapes as well: the outside dict's guard `5 in d` is checked before the call
registers the hook, so it said absent on every call (red team h12red3). Dicts being built are not lookups.
A subclass of RemovableHandle is inlined as written.
"""
from __future__ import annotations

from torch.utils.hooks import RemovableHandle

from .breaks import BreakKind, Unsupported
from .values import ConstantValue, NewObjectValue, SequenceValue, TupleValue, Value
from .values.mappings import HOOK_IDS_LIVE
from .weak_refs import weak_ref


def advance_hook_id() -> None:
    """The finishing call for one hook id handed out by the trace (NOTE [Hooks registered in the trace])."""
    RemovableHandle.next_id += 1


def advance_tensor_hook_id() -> None:
    """The finishing call for the id of a tensor hook registered after the graph: relative to the counter at
    entry, so it needs no guard (NOTE [Tensor hooks registered after the graph] in tensor_hooks.py)."""
    RemovableHandle.next_id += 1


def _taken(out, functions=(advance_hook_id, advance_tensor_hook_id)) -> int:
    return sum(1 for function, _ in out.side_effects.finishing_calls if function in functions)


def _take_id(tx) -> int:
    n = RemovableHandle.next_id + _taken(tx.output)
    HOOK_IDS_LIVE.update(out=tx.output, ids=range(RemovableHandle.next_id, n + 1))  # NOTE [Hook ids that never ...]
    tx.output.side_effects.record_finishing_call(advance_hook_id, [], walks_unchanged=True)
    return n


def _reads_ids_as_keys(code) -> bool:
    """torch's code that uses a handle's id only as a key of the hook dicts (NOTE [Hook ids that never leave
    the trace]): RemovableHandle.remove and the register functions of torch/nn/modules/module.py."""
    if code is RemovableHandle.remove.__code__:
        return True
    return code.co_filename.replace("\\", "/").endswith("torch/nn/modules/module.py") and \
        code.co_name.startswith(("register_", "_register_"))


def note_id_read(tx, handle: Value, whole_dict: bool = False) -> None:
    """`handle.id` (or `handle.__dict__`, `whole_dict`) read while tracing: by anything but torch's hook
    code, the id may outlive the trace."""
    if isinstance(handle, NewObjectValue) and issubclass(handle.cls, RemovableHandle) and \
            (whole_dict or not _reads_ids_as_keys(tx.code)):
        tx.output.hook_ids_escape = True


def note_key_lookup(tx, key: int) -> None:
    """An int used as a dict key while the trace holds taken hook ids: an id this call or a later one may hand
    out (at least the first id taken) looked up by anything but torch's hook code (`5 in m._forward_hooks`,
    `.get(5)`, `.pop(5)`, `del d[5]` with a literal) answers from this call's ids, which the entry must pin."""
    ids = HOOK_IDS_LIVE["ids"]
    if key >= ids.start and not _reads_ids_as_keys(tx.code):
        out = HOOK_IDS_LIVE["out"]
        if key in ids:
            out.hook_ids_escape = True
        else:  # not one of this call's ids so far: guarded to stay none of them (NOTE [Hook ids as other keys])
            out.__dict__.setdefault("hook_id_keys", set()).add(key)


def guard_hook_ids(out, roots: list | None) -> None:
    """Guards the counter the trace read ids from, unless no id outlives it (NOTE [Hook ids that never leave
    the trace]); `roots` are the return value and the replayed values of a trace that returned, else None."""
    taken = _taken(out)
    if not _taken(out, (advance_hook_id,)):
        return  # none, or only tensor hooks' ids, which the replay takes relative to the counter
    n = RemovableHandle.next_id
    HOOK_IDS_LIVE.clear()  # the trace is over: keys read from now on are framejit's own (codegen)
    h = out.name_of(RemovableHandle, "RemovableHandle")
    if roots is None or out.__dict__.get("hook_ids_escape") or \
            _ids_outlive(out, roots, range(n, n + taken)):
        out.add_guard("HOOK_IDS", f"{h}.next_id == {n!r}", None, expected=repr(n), actual=f"{h}.next_id")
        return
    for key in sorted(out.__dict__.get("hook_id_keys", ())):
        out.add_guard("HOOK_IDS", f"not ({h}.next_id <= {key!r} < {h}.next_id + {taken})", None,
                      expected=f"{key!r} none of the {taken} hook ids this call hands out", actual=f"{h}.next_id")


# NOTE [Hook ids as other keys]: an int key looked up while the trace holds taken hook ids (note_key_lookup) that
# is none of the ids taken so far (`table.get(10**6)`, a registry keyed by ints) answered from the dict as it is;
# what could change that answer is a later call handing out that very int as a hook id (filed in a hook dict the
# lookup reads). Pinning the counter (`next_id == n`) made such a frame trace again on every call until the
# recompile limit (red team h12red, finding 8); the guard is instead that this call's ids,
# next_id .. next_id + taken - 1, do not include the key. A key equal to an id already taken still pins the
# counter (NOTE [Hook ids that never leave the trace]).


def _ids_outlive(out, roots: list, ids: range) -> bool:
    from .modules import _reachable
    from .values import DictValue
    from .values.outside import OutsideDictValue
    written = [c for c, _, _ in out.side_effects._container_writes()]
    for v in _reachable([*roots, *written]):
        if isinstance(v, NewObjectValue) and issubclass(v.cls, RemovableHandle):
            return True
        keys = v.written if isinstance(v, OutsideDictValue) and not v.materialized else \
            v.items if isinstance(v, DictValue) else ()
        if any(type(k) is int and k in ids for k in keys):
            return True
    return False


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
