"""A tensor subclass's own `__torch_function__`, inlined where eager calls it.

NOTE [Inlined __torch_function__]: a subclass of torch.Tensor whose only departure from a plain tensor is its
own `__torch_function__` (a Python classmethod; torch's own `__torch_dispatch__`, no attribute hooks, no
override of another Tensor name: `inlines_torch_function`) is a graph input whose TensorValue carries the
class (as NOTE [Tensor subclasses traced as tensors]) but is a `GatedTensorValue`: while an instruction is
traced, reading its fake tensor (its metadata, or passing it to a graph op) is a graph break unless subclass
dispatch is off in the trace (`_STATE.disabled`). So every operation the trace does not route through the
user's function breaks and runs in Python, as eager runs it: routing is an allow-list, never a guess.
Routed (`route_call`): a call of a torch C function, a Tensor method, a torch Python function or an operator
(arith handlers) with such a tensor among its arguments (top level, or in a top-level list/tuple), and a read
of a Tensor getter answered from metadata or tensor-valued (`x.shape`, `x.dtype`, `x.T`: `gated_attr`). What eager
passes to `__torch_function__` (the `func` object: `TensorBase.add` for `x + 1`, `Tensor.__rsub__` for
`2 - x`; `types`; the `args` tuple; `kwargs` None or a dict) is read by calling the same callable on probe
tensors (`_probe`: meta tensors of a class whose `__torch_function__` records its arguments and stops; a
symbolic int goes in as a unique int object mapped back by identity), so it
is eager's own dispatch that answers, not a model of it; a torch Python function must record itself as
`func` (nothing ran before its `has_torch_function` check), else the call breaks. Then the user's function is
inlined with those values. `super().__torch_function__(...)` / `torch.Tensor.__torch_function__` are answered
by `default_torch_function` (torch's code: NotImplemented unless every type is a base of cls; `func` run with
subclass dispatch off; each Tensor of the result that is not a `cls` re-wrapped by `as_subclass(cls)`, an
`aten.alias` node as eager's alias, except torch's default no-wrap functions), and
`with torch._C.DisableTorchFunctionSubclass():` inside the inlined function is a block of the trace.
Anything the inlined function does that the trace cannot follow (a break, an exception it raises) is a break
at the routed operation itself (a new Unsupported: no nested break resumes inside the user's function), so
the operation runs in Python and eager's code runs the user's function; no trace-time dispatch state outlives
the routed call. While dispatch is off in the trace it is off for real too (`_disable`), so framejit's own
reads of real inputs there (the storage of an input written in place) run no user code, and
`torch._C._is_torch_function_enabled()` answers False as in eager's `super().__torch_function__`.
Guards: the exact type (tensor guard) and the class-dict lookup facts of
`__torch_function__` (`guard_subclass`: a replaced function recompiles), the inlined function's code by the
usual inlining guards; the input is made, and its guards read it, with subclass dispatch off
(`make_input`, `metadata_expr`), so no guard or tracing step calls the user's function, and a guard that
subclass dispatch is on (an input first met with it off, under an outside `DisableTorchFunctionSubclass`,
is a break: eager runs no __torch_function__ there).
Also routed: item stores (`x[i] = v`, `x[a:b] = v`: operator.setitem, eager's Tensor.__setitem__), `len(x)`
(sym_arith.length), iteration (`iterate_gated`: torch's Tensor.__iter__, which checks no __torch_function__
itself, inlined, so its `self.dim()` and `self.unbind(0)` are routed as eager calls them), and the `len(x)`
length hint CPython asks after iter() where it draws a whole iterable (`length_hint_gated`: list(), tuple(),
`[*x]`, `f(*x)`). Attribute stores on such tensors: NOTE [Attributes stored on tensors] (tensor_attrs.py).
Not routed (a break): other getters (`x.grad`, `x.data`, `x.is_leaf`, `x._base`), several overloaded classes
in one call, arguments that are not constants, tensors, symbolic ints or lists/tuples of them.
"""
from __future__ import annotations

import contextlib

from typing import Any

import torch

from .breaks import BreakKind, Unsupported
from .values.base import Value
from .values.tensor import TensorValue

_DEFAULT_TF = torch.Tensor.__torch_function__.__func__


class _State:
    active = 0    # instructions being traced (Translator.step)
    real: list = []  # the DisableTorchFunctionSubclass objects entered while dispatch is off in the trace
    live = 0      # gated values made so far in this process: route_call's fast exit
    making_input = 0
    routing = 0   # depth of inlined __torch_function__ calls


    @property
    def disabled(self) -> int:
        """Depth of subclass dispatch turned off in the trace; it is off for real then too, so framejit's own
        reads of real tensors there (an input's storage when it is written) run no __torch_function__."""
        return len(self.real)


_STATE = _State()


def _disable() -> None:
    real = torch._C.DisableTorchFunctionSubclass()
    real.__enter__()
    _STATE.real.append(real)


def _restore(depth: int) -> None:
    while len(_STATE.real) > depth:
        _STATE.real.pop().__exit__(None, None, None)


class GatedTensorValue(TensorValue):
    """A tensor of a class with an inlined __torch_function__: its fake is readable only where subclass
    dispatch is off (NOTE [Inlined __torch_function__])."""

    @property
    def fake(self) -> torch.Tensor:
        if _STATE.active and not _STATE.disabled:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"an operation on a {self.cls.__qualname__} (its own "
                              "__torch_function__) that framejit does not route through it")
        return self._fake

    @fake.setter
    def fake(self, value: torch.Tensor) -> None:
        self._fake = value

    def describe(self) -> str:
        return f"{self.cls.__qualname__}({self.node.name})"


def inlines_torch_function(cls: type) -> bool:
    from .tensor_subclasses import _DEFAULT_TD, _DISABLED_TF, _SAFE_NAMES, _TENSOR_NAMES, _user_layers, \
        torch_dispatch_of
    if not isinstance(cls, type) or not issubclass(cls, torch.Tensor) or torch_dispatch_of(cls) is not _DEFAULT_TD:
        return False
    if issubclass(cls, torch.nn.Parameter):
        return False
    tf = next((vars(k)["__torch_function__"] for k in cls.__mro__ if "__torch_function__" in vars(k)), None)
    if not isinstance(tf, classmethod) or tf.__func__ in (_DEFAULT_TF, _DISABLED_TF) or \
            type(tf.__func__).__name__ != "function":
        return False
    hooks = ("__getattribute__", "__getattr__", "__setattr__")
    return not any(n in vars(k) for k in _user_layers(cls) for n in hooks) and not any(
        n in _TENSOR_NAMES and n not in _SAFE_NAMES for k in _user_layers(cls) for n in vars(k))


def gate(value: Any) -> Any:
    """`value` as a GatedTensorValue when its class inlines its __torch_function__."""
    if type(value) is TensorValue and inlines_torch_function(value.cls):
        value.__class__ = GatedTensorValue  # its fake stays in `_fake`
        _STATE.live += 1
    return value


def make_input(out, obj: torch.Tensor, source) -> TensorValue:
    """A graph input of such a class, made (and guarded) with subclass dispatch off: no user code runs."""
    if not _STATE.real:  # eager runs no subclass __torch_function__ under an outside DisableTorchFunctionSubclass
        if not torch._C._is_torch_function_enabled():
            raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"a {type(obj).__qualname__} with subclass "
                              "__torch_function__ dispatch turned off")
        from ..guards import COST_ID
        on = out.name_of(torch._C._is_torch_function_enabled, "torch_function_enabled")
        out.add_guard("TORCH_FUNCTION_STATE", f"{on}()", source, expected="subclass __torch_function__ dispatch on",
                      cost=COST_ID)
    _STATE.making_input += 1
    try:
        with torch._C.DisableTorchFunctionSubclass():
            return gate(out.add_input(obj, source))
    finally:
        _STATE.making_input -= 1


def requires_grad_of(t: torch.Tensor) -> bool:
    """`t.requires_grad` read by a guard without the subclass's __torch_function__."""
    with torch._C.DisableTorchFunctionSubclass():
        return t.requires_grad


class Stepping:
    """Around one instruction's handler: the gate is shut (NOTE [Inlined __torch_function__])."""

    def __enter__(self) -> None:
        _STATE.active += 1

    def __exit__(self, *exc: Any) -> None:
        _STATE.active -= 1


STEPPING = Stepping()


# NOTE [Gated values counted per trace]: `live` (route_call's and operator_call's fast exit) counted the gated
# values made so far in the PROCESS, so after one trace of a subclass every later trace of any function took
# the routing path, which reads the classes of every call's arguments: later frames recompiled where they did
# not before (a list appended per call: 6 compiles for 1) and a user's __getattribute__ saw `__class__` reads
# (the fresh-clone CI's order-dependent failures after test_constant_reprs). Gated values live in one trace,
# so each frame's trace starts the count at 0 (restored after: a trace inside another keeps the outer's).
@contextlib.contextmanager
def fresh_trace():
    saved, _STATE.live = _STATE.live, 0
    try:
        yield
    finally:
        _STATE.live = saved


class _Disabled:
    """Subclass dispatch off in the trace (a `with DisableTorchFunctionSubclass()` block, a default
    __torch_function__'s call of func)."""

    def __enter__(self) -> None:
        self.depth = _STATE.disabled
        _disable()

    def __exit__(self, *exc: Any) -> None:
        _restore(self.depth)


def ungated() -> _Disabled:
    """A step of framejit's own that reads a gated tensor where eager runs no __torch_function__."""
    return _Disabled()


def disabled_ctx(args: list, kwargs: dict, ctx_class: type) -> Any:
    """`torch._C.DisableTorchFunctionSubclass()` made in the trace: a block only inside an inlined
    __torch_function__ (a break in it is a break at the routed operation, so no block outlives the call)."""
    if args or kwargs or not _STATE.routing:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "DisableTorchFunctionSubclass outside an inlined "
                          "__torch_function__")
    return ctx_class("tf_subclass", None, torch._C.DisableTorchFunctionSubclass)


def gated_attr(tx, t: Any, name: str) -> Any:
    """A Tensor attribute read of a gated tensor, for subclass_attr: a method is read as for any tensor (None:
    eager runs no __torch_function__ for it); a getter calls the user's function in eager with
    `<getset>.__get__`: routed for metadata answered from the fake (`x.shape`, `x.dtype`) and tensor-valued
    ones (`x.T`), read as for a tensor where subclass dispatch is off; any other getter (`x.grad`, `x.data`,
    whose guards would read the real attribute through the user's function) is a break."""
    if not isinstance(t, GatedTensorValue) or name == "__class__":
        return None
    attr = getattr(torch.Tensor, name, None)
    if attr is None or (callable(attr) and not isinstance(attr, property)):
        return None
    from .attributes import TENSOR_METADATA, TENSOR_VALUED_ATTRS
    if name not in TENSOR_METADATA and name not in TENSOR_VALUED_ATTRS and not (name == "grad" and t.source is not None):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"Tensor.{name} of a {t.cls.__qualname__} (its getter "
                          "runs the subclass's __torch_function__)")
    if _STATE.disabled:
        return None
    import operator
    recorded = _probe(tx, t.cls, operator.attrgetter(name), [t], {})
    if recorded is None or not _is_getset_read(recorded[0]):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"Tensor.{name} of a {t.cls.__qualname__}: an "
                          "unexpected __torch_function__ call")
    return inline_torch_function(tx, t.cls, *recorded)


_GETSET = type(torch._C.TensorBase.__dict__["shape"])


def _is_getset_read(fn: Any) -> bool:
    """`<getset of TensorBase>.__get__`, the func eager passes for a Tensor attribute read."""
    owner = getattr(fn, "__self__", None)
    return getattr(fn, "__name__", None) == "__get__" and isinstance(owner, _GETSET) and \
        owner.__objclass__ is torch._C.TensorBase


def enter_disabled(out) -> int:
    saved = _STATE.disabled
    _disable()
    return saved


def exit_disabled(out, saved: int) -> None:
    _restore(saved)


# ---- which calls are routed ------------------------------------------------------------------------------
def _items(v: Any) -> list:
    items = getattr(v, "items", None)
    return [v] + (list(items) if type(items) in (list, tuple) else [])


def _gated_class(args: list, kwargs: dict) -> type | None:
    """The class of the gated tensors among the arguments (one class), or None when there are none."""
    found = {v.cls for a in [*args, *kwargs.values()] for v in _items(a) if isinstance(v, GatedTensorValue)}
    if not found:
        return None
    if len(found) > 1:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "an op on tensors of several subclasses with their own "
                          "__torch_function__")
    return found.pop()


def _callable_of(fn: Value, args: list) -> tuple[Any, list] | None:
    """(the Python callable eager calls, its positional arguments) for a call framejit may route."""
    from .function_reads import is_whole_torch_function
    from .values import BuiltinValue, TensorMethodValue, UserFunctionValue
    if isinstance(fn, TensorMethodValue):
        method = getattr(torch.Tensor, fn.name, None)
        return (method, [fn.tensor, *args]) if method is not None else None
    if isinstance(fn, BuiltinValue):
        module = getattr(fn.obj, "__module__", None) or ""
        owner = getattr(fn.obj, "__objclass__", None)
        if module.startswith("torch") or owner in (torch._C.TensorBase, torch.Tensor) or \
                isinstance(getattr(fn.obj, "__self__", None), type(torch._C._VariableFunctions)):
            return fn.obj, list(args)
        return None
    if isinstance(fn, UserFunctionValue) and (is_whole_torch_function(fn.fn) or getattr(
            fn.fn, "__qualname__", "").startswith("Tensor.") and getattr(torch.Tensor, fn.fn.__name__, None) is fn.fn):
        return fn.fn, list(args)
    return None


def route_call(tx, fn: Value, args: list, kwargs: dict) -> Any:
    """For calls.call_value: the value of a call eager routes through an inlined __torch_function__, or None."""
    if not _STATE.live:
        return None
    if getattr(fn, "fn", None) is _DEFAULT_TF or getattr(fn, "obj", None) is _DEFAULT_TF:
        return default_torch_function(tx, args, kwargs)  # super().__torch_function__(...), or called directly
    if _STATE.disabled:
        return None
    found = _callable_of(fn, args)
    if found is None:
        return None
    callable_, positional = found
    cls = _gated_class(positional, kwargs)
    if cls is None:
        return None
    return _dispatch(tx, cls, callable_, positional, kwargs, exact=type(callable_).__name__ == "function")


def operator_call(tx, op: Any, operands: list) -> Any:
    """For the operator handlers: `op(*operands)` routed, or None when no operand is gated."""
    if not _STATE.live or _STATE.disabled:
        return None
    cls = _gated_class(operands, {})
    if cls is None:
        return None
    return _dispatch(tx, cls, op, list(operands), {}, exact=False)


def iterate_gated(tx, t: Value) -> Any:
    """`iter(t)` of a gated tensor: torch's `Tensor.__iter__` inlined (it checks no __torch_function__ itself;
    its `self.dim()` and `self.unbind(0)` are routed as eager calls them), or None for other tensors."""
    if not isinstance(t, GatedTensorValue) or _STATE.disabled:
        return None
    from .values import UserFunctionValue
    return tx.inline(UserFunctionValue(torch.Tensor.__iter__), [t], {})


def length_hint_gated(tx, t: Value, items: list) -> list:
    """`items`, drawn at once from `t` by list(), tuple(), `[*t]` or `f(*t)`: CPython asks `len(t)` as a length
    hint after `iter(t)` (list_extend, PySequence_Tuple), which a gated tensor's class sees too."""
    if isinstance(t, GatedTensorValue) and not _STATE.disabled:
        operator_call(tx, len, [t])
    return items


def _dispatch(tx, cls: type, callable_: Any, args: list, kwargs: dict, exact: bool) -> Any:
    recorded = _probe(tx, cls, callable_, args, kwargs)
    if recorded is None:
        return None  # eager calls no __torch_function__ here (`as_subclass`)
    func, types, call_args, call_kwargs = recorded
    if exact and func is not callable_:
        if _checks_nothing(callable_):  # NOTE [Torch functions without a __torch_function__ check]
            from .values import UserFunctionValue
            return tx.inline(UserFunctionValue(callable_), args, kwargs)
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{getattr(callable_, '__qualname__', callable_)} runs "
                          "code before its __torch_function__ check")
    return inline_torch_function(tx, cls, func, types, call_args, call_kwargs)


# NOTE [Torch functions without a __torch_function__ check]: some torch Python functions never ask the
# protocol themselves: `F.sigmoid` and `F.tanh` are `return input.sigmoid()` / `input.tanh()`, the
# boolean_dispatch wrappers (`F.max_pool2d`) call the function they pick. Eager runs their bodies as Python,
# and the subclass's __torch_function__ sees the ops inside (`Tensor.sigmoid`), never the function itself:
# the probe records another `func`. Such a call used to break (fullgraph=True raised on `F.sigmoid(x)`);
# now the body is inlined like user code, so each op in it is routed as eager routes it (or breaks). A
# function whose code names a protocol helper (`has_torch_function*`, `handle_torch_function`) but runs
# code before the check still breaks: inlined, its check would be asked of a traced tensor.
def _checks_nothing(fn: Any) -> bool:
    from .function_reads import _PROTOCOL, _code_names
    code = getattr(fn, "__code__", None)
    return code is not None and not (_code_names(code) & _PROTOCOL)


# ---- probes: what eager's dispatch passes ----------------------------------------------------------------
class _Stop(Exception):
    pass


_PROBED: list = []


class _Probe(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        _PROBED.append((func, types, args, kwargs))
        raise _Stop


def _probe(tx, cls: type, callable_: Any, args: list, kwargs: dict) -> tuple | None:
    """(func, types, args, kwargs) as Values, what eager passes to `cls.__torch_function__` when it calls
    `callable_(*args, **kwargs)`; None when eager calls none; a break when the arguments cannot be probed."""
    values: dict[int, Value] = {}
    real_args = [_stand_in(a, values) for a in args]
    real_kwargs = {k: _stand_in(v, values) for k, v in kwargs.items()}
    del _PROBED[:]
    import warnings
    try:
        with warnings.catch_warnings(record=True) as warned:  # a warning before the check: eager warns there
            warnings.simplefilter("always")
            # an empty `**{}` reaches some C functions as an empty dict, where eager's call passes none (None)
            callable_(*real_args, **real_kwargs) if real_kwargs else callable_(*real_args)
    except _Stop:
        if warned:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{getattr(callable_, '__qualname__', callable_)} warns "
                              "before its __torch_function__ check") from None
    except Exception as e:  # eager would fail before (or without) calling __torch_function__
        del _PROBED[:]
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"probing {getattr(callable_, '__qualname__', callable_)} "
                          f"for __torch_function__ raised {type(e).__name__}") from None
    probed, _PROBED[:] = list(_PROBED), []
    if not probed:
        return None
    func, types, call_args, call_kwargs = probed[0]
    if any(t is not _Probe and t is not torch.Tensor for t in types):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "an op whose overloaded types framejit does not model")
    types_value = _tuple([_class_value(cls) if t is _Probe else _class_value(torch.Tensor) for t in types])
    args_value = _back(call_args, values)
    kwargs_value = None if call_kwargs is None else _dict({k: _back(v, values) for k, v in call_kwargs.items()})
    from .values import ConstantValue
    return func, types_value, args_value, ConstantValue(None) if kwargs_value is None else kwargs_value


def _stand_in(v: Value, values: dict) -> Any:
    """The real object a probe call gets for `v`: a meta probe tensor for a gated tensor, a plain meta tensor
    for a plain one, the constant itself, lists and tuples of those."""
    from .values import ListValue, SymNodeValue, TupleValue
    if isinstance(v, GatedTensorValue) or (isinstance(v, TensorValue) and v.cls is torch.Tensor):
        with _Disabled():
            dtype, dim = v.fake.dtype, v.fake.dim()
        real = torch.empty((1,) * dim, dtype=dtype, device="meta")
        real = real.as_subclass(_Probe) if isinstance(v, GatedTensorValue) else real
    elif isinstance(v, SymNodeValue) and isinstance(v.sym, torch.SymInt):  # a symbolic size: a unique int
        real = _SENTINEL + len(values)  # object, mapped back by identity (an equal int alone is a break)
    elif type(v) in (ListValue, TupleValue):
        real = (list if type(v) is ListValue else tuple)(_stand_in(i, values) for i in v.items)
    elif not isinstance(v, TensorValue) and v.is_constant() and (type(v.as_constant()) in _CONSTANTS or
                                                               isinstance(v.as_constant(), type)):
        real = v.as_constant()
        if type(real) in (tuple, list, dict) or real is NotImplemented:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a container constant passed to a routed op")
    else:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{v.describe()} passed to an op on a tensor with its own "
                          "__torch_function__")
    values[id(real)] = (real, v)
    return real


_SENTINEL = 2 ** 62 + 12345
_CONSTANTS = (int, float, bool, complex, str, type(None), type(Ellipsis), slice, torch.dtype, torch.device,
              torch.layout, torch.memory_format, torch.Size)


def _back(obj: Any, values: dict) -> Value:
    """The Value for an object the probe's __torch_function__ received."""
    from .values import ConstantValue
    known = values.get(id(obj))
    if known is not None and known[0] is obj:
        return known[1]
    if type(obj) in (tuple, list):
        items = [_back(i, values) for i in obj]
        return _tuple(items) if type(obj) is tuple else _list(items)
    if isinstance(obj, torch.Tensor) or type(obj) not in _CONSTANTS and not isinstance(obj, type) or \
            type(obj) is int and _SENTINEL <= obj < _SENTINEL + len(values):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a routed op's dispatch made an argument framejit cannot map")
    return ConstantValue(obj)


def _tuple(items: list) -> Value:
    from .values import TupleValue
    return TupleValue(list(items))


def _list(items: list) -> Value:
    from .values import ListValue
    return ListValue(list(items))


def _dict(items: dict) -> Value:
    from .values import DictValue
    return DictValue(dict(items))


def _class_value(cls: type) -> Value:
    """The class of a tensor the trace holds (its type is guarded where the tensor came in)."""
    from .sources import ObjectSource, Ref
    from .values import ClassValue
    return ClassValue(cls, ObjectSource(Ref(cls, cls.__name__)))


# ---- the inlined function and torch's default one ---------------------------------------------------------
def inline_torch_function(tx, cls: type, func: Any, types: Value, args: Value, kwargs: Value) -> Any:
    """`cls.__torch_function__(func, types, args, kwargs)` inlined; anything it does that the trace cannot
    follow is a break at the routed operation (NOTE [Inlined __torch_function__])."""
    from .tensor_subclasses import guard_subclass, torch_function_of
    from .values import UserFunctionValue
    from .values.builder import wrap_unguarded
    guard_subclass(tx.output, cls)
    tf = torch_function_of(cls)
    saved = _STATE.disabled
    _STATE.routing += 1
    try:
        result = tx.inline(UserFunctionValue(tf), [_class_value(cls), wrap_unguarded(func), types, args, kwargs],
                           {})
    except Unsupported as e:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__qualname__}.__torch_function__ does something "
                          f"framejit cannot trace: {str(e).splitlines()[0][:200]}") from None
    except Exception as e:  # the user's function raises: the operation runs in Python and raises there
        from .breaks import UserException
        if not isinstance(e, UserException):
            raise
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__qualname__}.__torch_function__ raises") from None
    finally:
        _restore(saved)  # a block the user's function left by a break or an exception
        _STATE.routing -= 1
    from .values import ConstantValue  # (is_constant() of a symbolic int would specialise it)
    if isinstance(result, ConstantValue) and result.as_constant() is NotImplemented:  # eager tries the reflected operator, or
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__qualname__}.__torch_function__ returned "
                          "NotImplemented")  # raises TypeError: Python does either at the break
    return result


def default_torch_function(tx, args: list, kwargs: dict) -> Value:
    """`torch.Tensor.__torch_function__(cls, func, types, args=(), kwargs=None)` (a classmethod: `cls` first),
    as torch's code: NotImplemented unless every type is a base of cls; else func with subclass dispatch off,
    its result re-wrapped by `_convert` unless func is a default no-wrap function."""
    from .values import ClassValue, ConstantValue, DictValue, TupleValue
    names = ("cls", "func", "types", "args", "kwargs")
    if len(args) > 5 or set(kwargs) - set(names[len(args):]):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch.Tensor.__torch_function__ with unusual arguments")
    bound = dict(zip(names, args), **kwargs)
    cls, func, types = bound.get("cls"), bound.get("func"), bound.get("types")
    call_args = bound.get("args", TupleValue([]))
    call_kwargs = bound.get("kwargs", ConstantValue(None))
    if not (isinstance(cls, ClassValue) and func is not None and func.is_constant() and isinstance(types, TupleValue)
            and all(isinstance(t, ClassValue) for t in types.items) and type(call_args) is TupleValue
            and (isinstance(call_kwargs, DictValue) or call_kwargs.is_constant() and call_kwargs.as_constant() is None)):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch.Tensor.__torch_function__ of values framejit does not model")
    klass, fn = cls.obj, func.as_constant()
    if not all(isinstance(t.obj, type) and issubclass(klass, t.obj) for t in types.items):
        return ConstantValue(NotImplemented)
    kw = dict(call_kwargs.items) if isinstance(call_kwargs, DictValue) else {}
    if not all(type(k) is str for k in kw):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch.Tensor.__torch_function__ with non-string keywords")
    from .calls import call_value
    from .values.builder import wrap_unguarded
    with _Disabled():
        if _is_getset_read(fn):  # `x.shape` routed: read with dispatch off
            if len(call_args.items) != 1 or kw:
                raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a Tensor getter called with unusual arguments")
            from .attributes import getattr_value
            result = getattr_value(tx, call_args.items[0], fn.__self__.__name__)
        elif getattr(fn, "__objclass__", None) is torch._C.TensorBase and call_args.items and \
                isinstance(call_args.items[0], TensorValue) and getattr(torch.Tensor, fn.__name__, None) is fn:
            from .values import TensorMethodValue  # `TensorBase.size(x, 0)` as `x.size(0)`
            result = call_value(tx, TensorMethodValue(call_args.items[0], fn.__name__), list(call_args.items[1:]), kw)
        else:
            result = call_value(tx, _callable_value(fn, wrap_unguarded), list(call_args.items), kw)
        if fn in torch.overrides.get_default_nowrap_functions():
            return result
        return _convert(tx, result, klass, [a for a in call_args.items if isinstance(a, TensorValue)])


def _callable_value(fn: Any, wrap_unguarded) -> Value:
    from .values import BuiltinValue, UserFunctionValue
    if type(fn).__name__ == "function":
        return UserFunctionValue(fn)
    value = wrap_unguarded(fn)
    return value if not value.is_constant() or isinstance(value, BuiltinValue) else BuiltinValue(fn)


def _convert(tx, value: Value, cls: type, args: list) -> Value:
    """torch's `_convert(ret, cls)`: a Tensor that is not a `cls` becomes `ret.as_subclass(cls)` (an alias);
    tuples and lists are rebuilt with their items converted. An op that returned one of its tensor arguments
    itself (`x.float()` of a float32 x: the fake op returns the same fake) returns that argument's value: eager's
    ret is that object (its identity and attributes), already a `cls` or re-wrapped."""
    from .values import ListValue, TupleValue
    if isinstance(value, TensorValue):
        same = next((a for a in args if a.fake is value.fake), None)
        value = same if same is not None else value
        if issubclass(value.cls, cls):
            return value
        made = tx.output.call("call_function", torch.ops.aten.alias.default, (value,), {})
        made.cls, made.wrap_grad = cls, tx.output.grad_enabled
        return gate(made)
    if isinstance(value, (TupleValue, ListValue)) and issubclass(value.cls, (tuple, list)):
        if value.cls not in (tuple, list, torch.Size) and \
                getattr(value.cls, "__module__", None) != "torch.return_types":
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"torch's _convert of a {value.cls.__qualname__} result")
        items = [_convert(tx, v, cls, args) for v in value.items]  # `type(ret)(...)`: a torch.return_types kept
        return TupleValue(items, None, value.cls) if isinstance(value, TupleValue) else ListValue(items, None, value.cls)
    return value


def _register() -> None:
    from .module_hooks import TRACE_TIME
    TRACE_TIME[_DEFAULT_TF] = default_torch_function


_register()
