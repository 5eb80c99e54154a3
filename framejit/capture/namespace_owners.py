"""Functions and modules read beside their own `__dict__` (NOTE [Functions and modules beside their dicts]).

NOTE [Functions and modules beside their dicts]: a function's or module's attributes live in its `__dict__`,
the same storage as NOTE [Instance dicts as dicts] describes for instances; but functions and modules are
values guarded by identity, not objects deduplicated by identity (values/builder._has_identity), so the
dict reached as a dict (`f(x, fn, fn.__dict__)`, `f(x, m, vars(m))` passed from outside) and the attribute
stores on the owner were two unrelated states: `fn.k = v; d["k"] = v + 1; return x + fn.k` read v where eager
reads v + 1, and the replay stored v last (hhuntG4 MED-4). Now a user function or module read through a source
records its dict as an owned one (`instance_dict_owners`, with the owner's source and the real owner): the
dict value is then marked as an instance dict (a write through it is a graph break: it runs in Python, and
later reads come after it), a dict wrapped after a store on its owner is a break, and the NO_ALIASING guard
(`OutputGraph.distinct_objects_guard`) also pins on later calls that the trace's dicts are not such an owner's
dict. Library modules and functions (torch, math, ...: NOTE [Library modules]) are left out: fixed for the
process, and never written by the trace.
"""
from __future__ import annotations

import collections
import functools
import types
from typing import Any

import torch

from .breaks import BreakKind, Unsupported
from .sources import Source


def link_namespace_owner(out, obj: Any, source: Source) -> None:
    """`obj`, a function or module, was read through `source`: link its `__dict__` (see the NOTE)."""
    from .values.builder import is_library_module
    if issubclass(type(obj), types.ModuleType) and is_library_module(obj):
        return
    module = getattr(obj, "__module__", None) if type(obj) is types.FunctionType else None
    if type(module) is str and module.split(".")[0] in ("torch", "math", "functools", "typing", "collections",
                                                        "dataclasses", "enum", "abc", "types", "numpy"):
        return
    d = getattr(obj, "__dict__", None)
    if type(d) is not dict:
        return
    owners = out.__dict__.setdefault("instance_dict_owners", {})
    if id(d) in owners:
        return
    owners[id(d)] = (d, source, obj)
    out.__dict__.setdefault("namespace_owners", []).append((source, d))
    mark_held_dict(out, d, source, "the dict")


def mark_held_dict(out, d: dict, source: Source, what: str) -> None:
    """`d`, the `__dict__` of the object at `source`, linked just now: if the trace already holds it as a dict,
    mark that value (a write through it is a break from now on), or break if it was written through already."""
    seen = out._by_object.get(id(d))
    if seen is not None and seen[0] is d:
        if id(seen[2]) in out.side_effects.containers:
            raise Unsupported(BreakKind.SIDE_EFFECT, f"{what} of {source.describe()} was written through a dict "
                                                     "before its attributes were read")
        seen[2].instance_dict_of = source


def check_owner_stores(out, owner: Any, source: Source) -> None:
    """The dict of `owner` (a function or module) is read as a dict: a break when the trace stored an attribute
    on the owner, replayed after the graph, which the dict would not show (see the NOTE)."""
    effects = out.side_effects
    d = owner.__dict__
    if effects.stores_on(owner) or any(key[0] == id(d) for key in effects.globals):  # a module's: globals
        raise Unsupported(BreakKind.SIDE_EFFECT, f"the dict of {source.describe()} read while stores to its "
                                                 "attributes are not replayed yet")


def aliasing_exprs(out) -> list[str]:
    """The objects that OutputGraph.distinct_objects_guard pins as distinct: the trace's objects, and when it
    holds a dict, the instance dicts of its objects and of the functions and modules it read (NOTE [Instance
    dicts as dicts], NOTE [Functions and modules beside their dicts]) that are not one of its dicts now."""
    by_object = out._by_object
    exprs = [src.expr(out.names) for _, src, _ in by_object.values()]
    if not any(type(obj) is dict for obj, _, _ in by_object.values()):
        return exprs
    from .values.builder import instance_dict
    of = out.name_of(instance_dict, "instance_dict")
    exprs += [f"{of}({src.expr(out.names)})" for obj, src, _ in list(by_object.values())
              if type(obj) is not dict and instance_dict(obj) is not None and id(instance_dict(obj)) not in by_object]
    return exprs + [f"{of}({src.expr(out.names)})" for src, d in out.__dict__.get("namespace_owners", ())
                    if id(d) not in by_object]


# NOTE [Module tables beside the trace's dicts]: an nn.Module keeps its parameters, buffers, children and hooks
# in dicts (and a set) of its instance dict (`_parameters`, `_buffers`, `_modules`, `_forward_hooks`, ...: its
# tables), which the trace reads through sources (`m._buffers['buf']`, DictSlotSource; the hook dicts' key
# guards), not as dict values. A dict the trace holds (an argument `bufs`, an attribute) that is a table when
# traced is linked to it by identity (attributes.traced_slot reads the module's entries through the held
# value; module_hooks._written reads a hook dict the trace wrote through it), but on a later call the two
# could differ, or a trace made while `bufs` was an unrelated dict serve a call passing `m._buffers`:
# `bufs["buf"] = t; return m.buf + 1` read the old buffer (eager 7, framejit 1: review revAH HIGH),
# `mods["lin"] = Identity()` then `m.lin(x)` called the old Linear, a hook put in through `hooks` ran on a call
# where `hooks` was another dict. When the trace has side effects and holds a dict or set, a guard
# (`codegen_runtime.tables_as_traced`) pins each table of the trace's modules, and each global hook dict of
# torch.nn.modules.module (read by every module call), to be the held object it was when traced, or none of
# them (as distinct_objects_guard pins the instance dicts apart). Only tables of a held object's type are
# checked: nn.Module makes each table once, of one type.
_HELD_KINDS = (dict, collections.OrderedDict, set)


@functools.cache
def module_tables() -> tuple[tuple[str, type], ...]:
    """The names and types of the dicts and sets nn.Module.__init__ puts in a module's instance dict."""
    return tuple((k, type(v)) for k, v in vars(torch.nn.Module()).items() if type(v) in _HELD_KINDS)


@functools.cache
def shared_tables() -> tuple[tuple[str, type], ...]:
    """The names and types of torch.nn.modules.module's global hook dicts (read when a module is called)."""
    from torch.nn.modules import module as nn_module
    return tuple((k, type(v)) for k, v in vars(nn_module).items() if k.startswith("_global_") and type(v) in _HELD_KINDS)


def module_tables_guard(out) -> str | None:
    """The guard expression of NOTE [Module tables beside the trace's dicts], or None when none is needed."""
    from .codegen_runtime import dict_overridden, real_instance_dict, tables_as_traced
    entries = list(out._by_object.values())
    held = [(obj, src) for obj, src, _ in entries if type(obj) in _HELD_KINDS]
    kinds = {type(obj) for obj, _ in held}
    names = tuple(name for name, kind in module_tables() if kind in kinds)  # a table only aliases its own type
    modules = [(obj, src) for obj, src, _ in entries if issubclass(type(obj), torch.nn.Module)]
    if not names or not modules:
        return None
    index = {id(obj): i for i, (obj, _) in enumerate(held)}
    plain, exact = [], []
    for module, src in modules:
        d = real_instance_dict(module) or {}
        pins = tuple((n, index.get(id(d.get(n)), -1)) for n in names)
        if dict_overridden(type(module)) or any(i >= 0 for _, i in pins):  # (the module's type is guarded)
            exact.append(f"({src.expr(out.names)}, {pins!r})")
        else:
            plain.append(src.expr(out.names))
    from torch.nn.modules import module as nn_module
    shared = tuple((n, index.get(id(vars(nn_module)[n]), -1)) for n, kind in shared_tables() if kind in kinds)
    helds = "".join(f"{src.expr(out.names)}, " for _, src in held)
    return (f"{out.name_of(tables_as_traced, 'tables_as_traced')}(({helds}), {names!r}, "
            f"({''.join(e + ', ' for e in plain)}), ({''.join(e + ', ' for e in exact)}), {shared!r})")
