"""Dropouts that do nothing answer with their input object, as eager's do (NOTE below, used by graph.call)."""
from __future__ import annotations

from typing import Any

import torch

from .values import ConstantValue, TensorValue, Value


# NOTE [Dropouts that return their input]: eager's dropout returns its input object itself when it does
# nothing (`training=False`, or p == 0: aten's _dropout returns `input`), so `F.dropout(y, 0.5, training=False)
# is y` holds. The fake run mirrored that with static sizes, but with symbolic sizes fake tensors run the
# decomposition, which returns `input.clone()`: the identity answered False (review revK K8). Such a call is
# answered with its input value when p and training are constants (a p outside [0, 1] raises in eager: left to
# the op); its node stays in the graph, unused, as stock's graphs keep eval dropouts.
_DROPOUT_PARAMS = {"dropout": ("input", "p", "training", "inplace"), "dropout_": ("input", "p", "train")}


def dropout_identity(kind: str, target: Any, args: tuple, kwargs: dict) -> Value | None:
    if kind != "call_function" or target not in (torch.nn.functional.dropout, torch.dropout, torch.dropout_):
        return None
    names = _DROPOUT_PARAMS["dropout" if target is torch.nn.functional.dropout else "dropout_"]
    if len(args) > len(names) or any(k not in names for k in kwargs):
        return None
    bound = {**dict(zip(names, args)), **kwargs}
    default_p = 0.5 if target is torch.nn.functional.dropout else None
    values = []
    for name, default in (("p", default_p), (names[2], True)):
        value = bound.get(name)
        if value is None:
            if default is None:
                return None
            values.append(default)
        elif isinstance(value, ConstantValue) and isinstance(value.value, (bool, int, float)):
            values.append(value.value)
        else:
            return None
    p, training = values
    source = bound.get("input")
    if not isinstance(source, TensorValue) or not 0 <= p <= 1 or (training and p != 0):
        return None
    return source
