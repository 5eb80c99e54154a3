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

import types
from typing import Any

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
