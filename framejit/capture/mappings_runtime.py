"""Run-time helpers that generated code calls to rebuild mapping values (capture/mappings.py).

Kept apart from mappings.py so that the code emitted for a compiled frame imports nothing of the
translator when it runs.
"""
from __future__ import annotations

import collections
from typing import Any


def make_defaultdict(factory: Any, items: dict) -> collections.defaultdict:
    """The defaultdict a DefaultDictValue stands for."""
    return collections.defaultdict(factory, items)


def view_of(d: dict, kind: str) -> Any:
    """`d.keys()`, `d.values()` or `d.items()` of the rebuilt dict (NOTE [Live dict views])."""
    return getattr(d, kind)()




def dict_of_view(view: Any) -> dict:
    """The dict a real dict view (`d.keys()`, ...) shows: the one object its `mapping` proxy refers to."""
    import gc
    return gc.get_referents(view.mapping)[0]


VIEW_KINDS = {type({}.keys()): "keys", type({}.values()): "values", type({}.items()): "items",
              type(collections.OrderedDict().keys()): "keys", type(collections.OrderedDict().values()): "values",
              type(collections.OrderedDict().items()): "items"}


__all__ = ["VIEW_KINDS", "dict_of_view", "make_defaultdict", "view_of"]
