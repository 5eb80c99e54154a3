"""Traceable stand-ins for library methods whose original code cannot be traced as written.

NOTE [ModelOutput.__post_init__]: transformers' `ModelOutput` (an OrderedDict subclass that is a
dataclass) fills its dict in `__post_init__` from the fields that are not None, after a framework probe
(`is_tensor`, which reads `repr(type(x))`) and an iterator protocol for a first field holding key/value
pairs. The stand-in below computes the same dict for the case models use: when the first field is a
tensor or another field is set, every non-None field is stored, in field order, through `self[...] =`
(so the class's own `__setitem__` runs). Anything else (a lone non-tensor first field, which the
original may unpack as pairs; a field name shadowed by a class property) calls `graph_break`, so the
original runs. Its pytree registration is skipped, as the original skips it while compiling.
Substitutes are found by module and qualified name, so transformers is never imported by framejit.
"""
from __future__ import annotations

import dataclasses
import types
from typing import Any

import torch

from .modules import graph_break


def model_output_post_init(self):
    class_fields = dataclasses.fields(self)
    if not len(class_fields):
        raise ValueError(f"{self.__class__.__name__} has no fields.")
    if not all(field.default is None for field in class_fields[1:]):
        raise ValueError(f"{self.__class__.__name__} should not have more than one required field.")
    for field in class_fields:
        if isinstance(getattr(type(self), field.name, None), property):
            graph_break("a ModelOutput field shadowed by a property")
    first_field = getattr(self, class_fields[0].name)
    other_fields_are_none = all(getattr(self, field.name) is None for field in class_fields[1:])
    if other_fields_are_none and not isinstance(first_field, torch.Tensor):
        graph_break("a ModelOutput whose only field is not a tensor")
    for field in class_fields:
        value = getattr(self, field.name)
        if value is not None:
            self[field.name] = value


_BY_NAME: dict[tuple[str, str], Any] = {
    ("transformers.utils.generic", "ModelOutput.__post_init__"): model_output_post_init,
}


def library_substitute(fn: types.FunctionType) -> types.FunctionType | None:
    return _BY_NAME.get((fn.__module__, fn.__qualname__))
