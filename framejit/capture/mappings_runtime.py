"""Run-time helpers that generated code calls to rebuild values made while tracing: mappings
(capture/mappings.py) and torch grad-mode context managers not yet entered at a graph break.

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




def grad_mode_manager(cls: type, mode: Any, prev: Any) -> Any:
    """A `no_grad()`/`enable_grad()`/`set_grad_enabled(b)`/`inference_mode(b)` object as the traced code
    made it. `set_grad_enabled` acted on the grad mode when it was made (the code after the break runs in
    that mode already), so it is built without running its __init__: its `prev` is the mode it saw."""
    import torch
    if issubclass(cls, torch.set_grad_enabled):
        obj = cls.__new__(cls)
        obj.prev, obj.mode = prev, mode
        return obj
    if issubclass(cls, torch.inference_mode):
        return cls(mode)
    return cls()


def dict_of_view(view: Any) -> dict:
    """The dict a real dict view (`d.keys()`, ...) shows: the one object its `mapping` proxy refers to."""
    import gc
    return gc.get_referents(view.mapping)[0]


VIEW_KINDS = {type({}.keys()): "keys", type({}.values()): "values", type({}.items()): "items",
              type(collections.OrderedDict().keys()): "keys", type(collections.OrderedDict().values()): "values",
              type(collections.OrderedDict().items()): "items"}


__all__ = ["VIEW_KINDS", "dict_of_view", "grad_mode_manager", "make_defaultdict", "view_of"]
