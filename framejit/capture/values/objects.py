"""Objects that live outside the trace: nn.Modules, Python modules, classes and other user objects.

Each holds the real object (read-only while tracing) and its Source; attribute reads are resolved by
protocol.getattr following Python's lookup order and produce guarded values.
"""
from __future__ import annotations

import types
from typing import Any

from ..sources import Source
from .base import MADE_ORDER, Value


class ObjectValue(Value):
    """A user object read from outside (its type is guarded)."""

    def __init__(self, obj: Any, source: Source | None = None) -> None:
        self.obj = obj
        self.source = source

    def python_type(self) -> type:
        return type(self.obj)

    def describe(self) -> str:
        return f"{type(self).__name__}({type(self.obj).__name__})"


class NNModuleValue(ObjectValue):
    """A torch.nn.Module instance: calling it inlines its forward; parameters become graph inputs."""


class PyModuleValue(ObjectValue):
    """A Python module such as torch, torch.nn.functional or math."""

    def python_type(self) -> type:
        return types.ModuleType


class ClassValue(ObjectValue):
    """A class object (user classes, nn.Module subclasses, dataclasses, namedtuples, enums)."""

    def python_type(self) -> type:
        return type(self.obj)

    def is_constant(self) -> bool:
        return True

    def as_constant(self) -> Any:
        return self.obj


class NewObjectValue(Value):
    """An instance of a user class created while tracing; its attributes live in `attrs`."""

    def __init__(self, cls: type, attrs: dict[str, Value] | None = None) -> None:
        self.cls = cls
        self.attrs = dict(attrs or {})
        self.serial = next(MADE_ORDER)  # NOTE [Values made in order]

    def python_type(self) -> type:
        return self.cls

    def describe(self) -> str:
        return f"New({self.cls.__name__})"
