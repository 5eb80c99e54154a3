"""Callable values: user functions (inlined), bound methods, cells, and library callables (in-graph ops
or Python builtins modelled by protocol.py)."""
from __future__ import annotations

import types
from typing import Any

from ..sources import Source
from .base import Value


class CellValue(Value):
    """A closure cell created while tracing (a variable captured by a nested function)."""

    deleted = False  # emptied by `del` (NOTE [Deleting a closure variable]): a closure over it gets an empty cell
    made_in = None  # (code, name) of the frame variable it is (NOTE [Cells written after the call])

    def __init__(self, contents: Value | None = None) -> None:
        self.contents = contents


class UserFunctionValue(Value):
    """A Python function whose bytecode is inlined when called.

    `closure` holds, per free variable, either a CellValue (cells made while tracing) or None (read
    the real cell of `fn.__closure__`, guarded through its source).
    """

    by_code = False  # guarded by its code, not its identity (NOTE [Closures guarded by code])
    # A function made while tracing (MAKE_FUNCTION): its attribute stores (`__module__`, `__dict__`,
    # `__wrapped__`, ...) and its annotations as MAKE_FUNCTION built them (NOTE [Attributes of functions
    # made while tracing] in function_attrs.py). None for functions from outside.
    attrs: dict[str, Value] | None = None
    annotations: Value | None = None

    def __init__(self, fn: types.FunctionType, source: Source | None = None,
                 closure: tuple[CellValue | None, ...] | None = None,
                 defaults: tuple[Value, ...] | None = None,
                 kwdefaults: dict[str, Value] | None = None) -> None:
        self.fn = fn
        self.source = source
        self.closure = closure
        self.defaults = defaults
        self.kwdefaults = kwdefaults

    def python_type(self) -> type:
        return types.FunctionType

    def describe(self) -> str:
        return f"Function({self.fn.__qualname__})"

    def attr_values(self) -> list[Value]:
        """The values its attribute stores and annotations hold (reached through the function)."""
        return [*(self.attrs or {}).values(), *([self.annotations] if self.annotations is not None else [])]


class BoundMethodValue(Value):
    """`obj.method`: a function value plus the abstract `self` it is bound to."""

    def __init__(self, func: Value, self_value: Value, source: Source | None = None) -> None:
        self.func = func
        self.self_value = self_value
        self.source = source

    def python_type(self) -> type:
        return types.MethodType

    def describe(self) -> str:
        return f"BoundMethod({self.func.describe()} of {self.self_value.describe()})"


class TensorMethodValue(Value):
    """`tensor.name` where name is a method of torch.Tensor: calling it adds a call_method node."""

    def __init__(self, tensor: Value, name: str) -> None:
        self.tensor = tensor
        self.name = name

    def python_type(self) -> type:
        return types.BuiltinMethodType

    def describe(self) -> str:
        return f"TensorMethod({self.name})"


class BuiltinValue(Value):
    """A library callable that protocol.call models: torch.* and F.* functions, Python builtins,
    math/operator functions, and some classes (torch.Size, tuple, list, dict, ...)."""

    def __init__(self, obj: Any, source: Source | None = None) -> None:
        self.obj = obj
        self.source = source

    def python_type(self) -> type:
        return type(self.obj)

    def is_constant(self) -> bool:
        return True

    def as_constant(self) -> Any:
        return self.obj

    def describe(self) -> str:
        return f"Builtin({getattr(self.obj, '__qualname__', None) or getattr(self.obj, '__name__', repr(self.obj))})"


class PartialValue(Value):
    """functools.partial(func, *args, **kwargs) with abstract arguments."""

    def __init__(self, func: Value, args: list[Value], kwargs: dict[str, Value], source: Source | None = None,
                 keywords: dict | None = None, real: Any = None):
        self.func = func
        self.args = args
        self.kwargs = kwargs
        self.source = source
        self.keywords = keywords  # the real partial's `keywords` dict (a partial from outside), read when called
        self.real = real  # that partial itself (NOTE [Partials of partials] in partials.py)
