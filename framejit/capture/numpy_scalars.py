"""NumPy scalar arguments that change value: graph inputs with NumPy's semantics, not one entry per value.

NOTE [Dynamic NumPy scalars]: a NumPy scalar argument (`np.int64(i)`, a `np.float32` learning rate, a
loop index from `np.arange`) was a constant guarded by value, so each new value recompiled the frame
until the recompile limit ran it eagerly (PyTorch's test_unspec.py test_no_recompilations: 8 compiles
of `{"a": x + 1, "b": y / 2}` over 10 values, then eager), while a Python int or float becomes symbolic
or a graph input once it changes (NOTE [Dynamic ints], [Dynamic floats]).

Now, when a recompile is caused by a NumPy int or float (int8..int64, uint8..uint32, float32, float64)
that changed value, the hook marks its source like an int's (`dynamic_ints`; under dynamic=True an
argument is dynamic from the first call, as ints are), and later traces wrap it as an `NdarrayValue`
scalar whose tensor is a 0-d graph input (`scalar_input`: the value as a 0-d array, same dtype), guarded
by its exact type only. NumPy's semantics then come from NOTE [NumPy as torch]: `y / 2`, `y * 2**62`,
`-y`, `y > 3` are torch._numpy graph nodes over the 0-d tensor (int64 wraps, true division is float64,
a comparison is np.bool_, NEP 50 promotion; NOTE [NumPy dtype oracle] breaks where torch._numpy's dtype
would differ), and a result leaving the graph is rebuilt as the NumPy scalar eager makes.

Where eager hands the scalar to torch (a tensor operator, a torch function or tensor method argument)
torch reads it as the Python number it equals (`int(y)`, `float(y)`: a np.float32 widens exactly), so
there the value is that number, a second graph input made on first use from the same argument
(`torch_number`: a symbolic int, 0 and 1 specialised as for any int, or a float input), as it is for
`int(y)` and `float(y)`. Exception: torch.tensor/as_tensor/asarray infer a dtype from a NumPy scalar
inside a list or alone (`torch.tensor([np.float64(.5)])` is float64, of a Python float float32), so a NumPy
scalar nested in their data, or a constant one as their data, is a break (`check_data_arguments`; that was a
wrong dtype for constants before; a dynamic one alone is torch_call_on_arrays' copy of its 0-d tensor).
A dynamic NumPy integer is that int also where torch or Python take its __index__: a tensor index (alone, in
a tuple or a slice: `index_numbers`), `range()` (`integer_number`), and sizes and other arguments of torch
functions (`torch.arange(n)`, `torch.zeros(n)`, `torch.full(shape, y)`: `torch_call_arguments`), which before
were one entry per value (`x[i]`, `x[:, i]`: a guard on the int's value; `torch.arange(i)`, `range(i)`: a
break, then a resume function guarding the value or the range; 7-9 traces over 8 values where Python ints
make 2). A NumPy scalar computed in the graph (`-y`, `y * 3`) is data: an index or a size by it is a break.
Any other use that needs the value (str, a branch on it) is a break, as for a NumPy scalar computed from an
array; the value, carried into the resume function, is specialised there and
becomes dynamic there when it changes. np.bool_, complex, float16 and wider types stay constants guarded
by value (NumPy's float16 and longdouble arithmetic is not torch's).

Known difference: NumPy warns (RuntimeWarning) on int overflow and on division by zero of scalars; the
graph computes the same values silently.
"""
from __future__ import annotations

import operator
import sys
from typing import Any

import torch

from .breaks import BreakKind, Unsupported
from .sources import CallSource, Ref, Source
from .values import SequenceValue, Value


def _dynamic_types() -> tuple:
    np = sys.modules.get("numpy")
    if np is None:
        return ()
    return (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.float32, np.float64)


def scalar_input(value: Any) -> torch.Tensor:
    """The graph input for a dynamic NumPy scalar: its value as a 0-d tensor of its dtype."""
    import numpy as np
    return torch.from_numpy(np.asarray(value))


def numpy_scalar_text(text: str) -> bool:
    """`text` (a guard's expected value) is the repr of a NumPy scalar that may become dynamic."""
    return any(text.startswith(f"np.{t.__name__}(") for t in _dynamic_types())


def wrap_dynamic_scalar(out, obj: Any, source: Source, argument: bool) -> Value | None:
    """A dynamic NumPy scalar read through `source` (NOTE [Dynamic NumPy scalars]), or None when it is
    not one: marked dynamic by the hook, or an argument under dynamic=True."""
    if type(obj) not in _dynamic_types():
        return None
    if not (out.dynamic_ints and source.describe() in out.dynamic_ints or out.dynamic is True and argument):
        return None
    from .numpy_support import NdarrayValue
    out.guard_type(source, type(obj))
    before = len(out.guards)
    tensor = out.add_input(scalar_input(obj), CallSource(Ref(scalar_input, "___np_scalar_input"), source))
    del out.guards[before:]  # the exact type pins dtype and shape; the input is made anew per call
    value = NdarrayValue(tensor, source, scalar=True)
    value.number_of = (out, source, obj)
    return value


def torch_number(value: Value) -> Value | None:
    """The Python number a dynamic NumPy scalar argument is to torch and to int()/float() (a graph
    input made on first use), or None for any other value."""
    info = getattr(value, "number_of", None)
    if info is None:
        return None
    out, source, obj = info
    import numpy as np
    convert, add = (int, out.add_int_input) if isinstance(obj, np.integer) else (float, out.add_float_input)
    number_source = CallSource(Ref(convert, f"___{convert.__name__}"), source)
    known = out.cached(number_source)
    return known if known is not None else add(convert(obj), number_source)


def integer_number(value: Value) -> Value | None:
    """The int a dynamic NumPy integer scalar is to `range()` and to an index (its __index__): torch_number,
    or None for any other value (a NumPy float there raises in eager, as before)."""
    info = getattr(value, "number_of", None)
    import numpy as np
    return torch_number(value) if info is not None and isinstance(info[2], np.integer) else None


def index_numbers(key: Value) -> Value:
    """A tensor index `key` with each dynamic NumPy integer in it (alone, in a tuple, a slice bound) replaced
    by its int (NOTE [Dynamic NumPy scalars]: torch indexes by its __index__, as it would by that int)."""
    from .values import SliceValue, TupleValue
    number = integer_number(key)
    if number is not None:
        return number
    if type(key) is TupleValue and any(getattr(i, "number_of", None) for i in _index_leaves(key)):
        return TupleValue([index_numbers(i) for i in key.items], cls=key.cls)
    if isinstance(key, SliceValue) and any(integer_number(p) is not None for p in key.parts):
        return SliceValue(*(integer_number(p) or p for p in key.parts))
    return key


def _index_leaves(key: Value) -> list[Value]:
    from .values import SliceValue
    return [p for i in key.items for p in (i.parts if isinstance(i, SliceValue) else [i])]


def torch_call_arguments(fn: Any, args: list[Value], kwargs: dict[str, Value]) -> tuple | None:
    """(args, kwargs) of a torch function call other than torch.tensor/as_tensor/asarray/from_numpy whose
    only NumPy values are dynamic NumPy scalars (top level), each replaced by its number (NOTE [Dynamic NumPy
    scalars]: `torch.arange(n)`, `torch.full((2,), y)`); None otherwise (the NumPy path decides as before)."""
    from .numpy_support import NdarrayMethodValue, NdarrayValue
    if any(fn is f for f in (*_DATA_FUNCTIONS, torch.from_numpy)):
        return None
    values = [*args, *kwargs.values()]
    if not all(getattr(v, "number_of", None) is not None for v in values
               if isinstance(v, (NdarrayValue, NdarrayMethodValue))):
        return None
    def number(v: Value) -> Value:
        made = torch_number(v) if isinstance(v, NdarrayValue) else None
        return made if made is not None else v
    return [number(a) for a in args], {k: number(v) for k, v in kwargs.items()}


def tensor_operator(tx, fn: Any, a: Value, b: Value) -> Value | None:
    """The operator `fn(a, b)` with a dynamic NumPy scalar beside a tensor, with the scalar replaced by
    its number (eager's tensor operators read it so; NumPy defers to the tensor's reflected operator), or
    None when neither operand is one."""
    na, nb = torch_number(a), torch_number(b)
    if na is None and nb is None:
        return None
    a, b = (na if na is not None else a), (nb if nb is not None else b)
    if fn in _COMPARISONS:
        from .comparisons import compare
        return compare(tx, fn, a, b)
    from .protocol import binary
    return binary(tx, fn, a, b)


_COMPARISONS = (operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne)


_DATA_FUNCTIONS = (torch.tensor, torch.as_tensor, torch.asarray)


def check_data_arguments(kind: str, target: Any, args: tuple, kwargs: dict) -> None:
    """torch.tensor/as_tensor/asarray of a NumPy scalar constant or of a sequence holding a NumPy scalar: a
    break (the dtype is inferred from the NumPy type, which a Python number in its place would change:
    `torch.tensor(np.float64(.5))` is float64 in eager, and was float32 compiled)."""
    if kind != "call_function" or not any(target is f for f in _DATA_FUNCTIONS):
        return
    data = args[0] if args else kwargs.get("data")
    if (isinstance(data, SequenceValue) or data is not None and data.is_constant()) and _holds_numpy_scalar(data):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{target.__name__} of a sequence holding a NumPy scalar "
                          "(its dtype comes from the NumPy type; NOTE [Dynamic NumPy scalars])")


def _holds_numpy_scalar(v: Value) -> bool:
    if isinstance(v, SequenceValue):
        return any(_holds_numpy_scalar(i) for i in v.items)
    from .numpy_support import NdarrayValue
    if isinstance(v, NdarrayValue):
        return True
    return v.is_constant() and type(v.as_constant()).__module__ == "numpy"
