"""A tensor subclass's own `__torch_function__`, inlined where eager calls it.

NOTE [Inlined __torch_function__]: a subclass of torch.Tensor whose only departure from a plain tensor is its
own `__torch_function__` (a Python classmethod; torch's own `__torch_dispatch__`, no attribute hooks, no
override of another Tensor name: `inlines_torch_function`) is a graph input whose TensorValue carries the
class (as NOTE [Tensor subclasses traced as tensors]), but of the class `GatedTensorValue`: while an
instruction is traced, reading its fake tensor (its metadata, or passing it to any graph op) is a graph break
unless subclass dispatch is off in the trace (`_STATE.disabled`). So every operation the trace does not route
through the user's `__torch_function__` breaks and runs in Python, as before (0 graphs). Routed, with the
`func` object eager passes (checked against eager with a logging subclass):
- a call of a torch C function or a Tensor method (`x.add(1)`: `Tensor.add`; `y.add_(x)` with y plain too):
  that callable (`torch_function_call`, `tensor_method_call`); a torch Python function that checks
  `has_torch_function*` (`F.relu`, `torch.split`) is inlined: `has_torch_function*` answer True and its
  `handle_torch_function(public_api, relevant, *args, **kwargs)` calls the user's function with exactly
  what it forwards (`torch.split` adds `dim=`);
- an operator (`x * 2`, `2 - x`, `x += 1`, `x < y`, `-x`, `x[i]`): the func, args and kwargs eager's own
  dispatch produces, read by running the operator on probe tensors whose `__torch_function__` records its
  arguments and stops (`operator_call`): `Tensor.mul` for `x * 2` and `2 * x`, `Tensor.__rsub__` for `2 - x`;
- a read of a Tensor getset attribute (`x.shape`, `x.T`): `<getset>.__get__` with args `(x,)`. Methods are
  read without a call (as eager: `x.sum` runs nothing), `as_subclass` and torch's ignored functions too.
The user's `__torch_function__` is inlined with `cls`, `func` (a constant), `types` (the overloaded classes),
`args` (a tuple) and `kwargs` (a dict), as torch calls it; only one overloaded class is modelled (a second
one is a break). `super().__torch_function__` / `torch.Tensor.__torch_function__` (`default_torch_function`)
answers NotImplemented when a type is not a base of `cls`, else runs `func` with subclass dispatch off
(results plain, no routing, fakes readable) and re-wraps each Tensor of the result that is not a `cls` as
eager's `_convert` does (`as_subclass(cls)`: an `aten.alias` node when the result is an existing value, else
the new result's class), except for torch's default no-wrap functions. `with DisableTorchFunctionSubclass():`
in the trace turns dispatch off for the block; `K(t)` with a Python `__new__` is inlined (construct_subclass).
`x.grad` / `x.data` of such an input breaks (their guards would read the real attribute through the user's
function). Guards read such inputs' metadata through `as_subclass(torch.Tensor)` and `requires_grad` with
subclass dispatch off, and a root trace runs under DisableTorchFunctionSubclass (graph.py reads the storages
of inputs), so neither tracing nor guards call the user's function (eager never does).
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch

from .breaks import BreakKind, Unsupported
from .values.base import Value
from .values.tensor import TensorValue

_DEFAULT_TF = torch.Tensor.__torch_function__.__func__
_GETSET = type(torch._C.TensorBase.__dict__["shape"])


class _State:
    active = 0    # instructions being traced (Translator.step)
    disabled = 0  # depth of default __torch_function__ calls (subclass dispatch off)
    making_input = 0


_STATE = _State()


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
    from .tensor_subclasses import _DEFAULT_TD, _DISABLED_TF, _user_layers, torch_dispatch_of
    if not isinstance(cls, type) or not issubclass(cls, torch.Tensor) or torch_dispatch_of(cls) is not _DEFAULT_TD:
        return False
    tf = next((vars(k)["__torch_function__"] for k in cls.__mro__ if "__torch_function__" in vars(k)), None)
    if not isinstance(tf, classmethod) or tf.__func__ in (_DEFAULT_TF, _DISABLED_TF) or \
            type(tf.__func__).__name__ != "function":
        return False
    from .tensor_subclasses import _SAFE_NAMES, _TENSOR_NAMES
    hooks = ("__getattribute__", "__getattr__", "__setattr__")
    return not any(n in vars(k) for k in _user_layers(cls) for n in hooks) and not any(
        n in _TENSOR_NAMES and n not in _SAFE_NAMES for k in _user_layers(cls) for n in vars(k))


def gate(value: TensorValue) -> TensorValue:
    """`value` as a GatedTensorValue when its class inlines its __torch_function__."""
    if inlines_torch_function(value.cls) and type(value) is TensorValue:
        fake = value.__dict__.pop("fake")
        value.__class__ = GatedTensorValue
        value.fake = fake
    return value


def make_input(out, obj: torch.Tensor, source) -> TensorValue:
    """A graph input of such a class, made (and guarded) with subclass dispatch off: no user code runs."""
    _STATE.making_input += 1
    try:
        with torch._C.DisableTorchFunctionSubclass():
            return gate(out.add_input(obj, source))
    finally:
        _STATE.making_input -= 1


def requires_grad_of(t: torch.Tensor) -> bool:
    with torch._C.DisableTorchFunctionSubclass():
        return t.requires_grad


def enter_disabled(out) -> int:
    """`with torch._C.DisableTorchFunctionSubclass():` entered in the trace; returns the depth to restore."""
    saved = _STATE.disabled
    _STATE.disabled = saved + 1
    return saved


def exit_disabled(out, saved: int) -> None:
    _STATE.disabled = saved


@contextlib.contextmanager
def ungated():
    """A step of framejit's own that reads a gated tensor where eager runs no __torch_function__."""
    _STATE.disabled += 1
    try:
        yield
    finally:
        _STATE.disabled -= 1


@contextlib.contextmanager
def start_trace(root: bool):
    """Around a frame's trace: a root trace starts with subclass dispatch on in the trace (a trace given up
    inside a block leaves no state), and reads real tensors with subclass dispatch off (eager runs no
    __torch_function__ there: graph.py reads the storages of inputs)."""
    if not root:
        yield
        return
    _STATE.disabled = _STATE.active = 0
    with torch._C.DisableTorchFunctionSubclass():
        yield


class Stepping:
    """Around one instruction's handler: the gate is shut (NOTE [Inlined __torch_function__])."""

    def __enter__(self) -> None:
        _STATE.active += 1

    def __exit__(self, *exc: Any) -> None:
        _STATE.active -= 1


STEPPING = Stepping()


# ---- dispatch: inline the user's __torch_function__ ------------------------------------------------------
def _tensor_args(args: list, kwargs: dict) -> list[TensorValue]:
    found = []
    for v in [*args, *kwargs.values()]:
        items = getattr(v, "items", None)
        for item in ([v] + (list(items) if type(items) in (list, tuple) else [])):
            if isinstance(item, TensorValue):
                found.append(item)
    return found


def _overloaded(args: list, kwargs: dict) -> list[type]:
    """The classes torch's dispatch collects (a subclass before its bases), of tensors not plain Tensor."""
    from .tensor_subclasses import _DISABLED_TF, torch_function_of
    classes: list[type] = []
    for v in _tensor_args(args, kwargs):
        cls = v.cls
        if cls in (torch.Tensor, torch.nn.Parameter) or torch_function_of(cls) is _DISABLED_TF or cls in classes:
            continue
        at = next((i for i, c in enumerate(classes) if issubclass(cls, c)), len(classes))
        classes.insert(at, cls)
    return classes


def routed(args: list, kwargs: dict) -> type | None:
    """The class whose __torch_function__ eager calls for these arguments, when it is one framejit inlines and
    subclass dispatch is on; None when eager calls none (or calls torch's default one only)."""
    if _STATE.disabled:
        return None
    classes = _overloaded(args, kwargs)
    if not any(inlines_torch_function(c) for c in classes):
        return None
    if len(classes) != 1:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "an op on tensors of several subclasses "
                          f"({', '.join(c.__qualname__ for c in classes)}) with their own __torch_function__")
    return classes[0]


def inline_torch_function(tx, cls: type, func: Any, args: list, kwargs: dict) -> Any:
    """`cls.__torch_function__(func, (cls,), tuple(args), kwargs)` inlined."""
    from .values import DictValue, TupleValue, UserFunctionValue
    from .values.builder import wrap_unguarded
    tf = torch_function_of_cls(cls)
    call_args = [class_value(cls), wrap_unguarded(func), TupleValue([class_value(cls)]), TupleValue(list(args)),
                 DictValue(dict(kwargs))]
    saved = _STATE.disabled
    try:
        result = tx.inline(UserFunctionValue(tf), call_args, {})
    finally:
        _STATE.disabled = saved  # a with-block of DisableTorchFunctionSubclass left by a break
    if result.is_constant() and result.as_constant() is NotImplemented:  # eager tries a reflected operator, or
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__qualname__}.__torch_function__ returned "
                          "NotImplemented")  # raises TypeError: Python does either at the break
    return result


def class_value(cls: type) -> Any:
    """The class of a tensor the trace holds (its type is guarded where the tensor came in)."""
    from .sources import ObjectSource, Ref
    from .values import ClassValue
    return ClassValue(cls, ObjectSource(Ref(cls, cls.__name__)))


def construct_subclass(tx, cls: type, args: list, kwargs: dict) -> Any:
    """For calls.call_class, `cls(*args, **kwargs)` of a torch class: for a class that inlines its
    __torch_function__ and defines a Python `__new__`, that inlined (`__init__` must be torch's); else a graph op."""
    from .values import UserFunctionValue
    if not inlines_torch_function(cls):
        return tx.output.call("call_function", cls, tuple(args), kwargs)
    from .tensor_subclasses import _user_layers
    new = next((vars(k)["__new__"] for k in _user_layers(cls) if "__new__" in vars(k)), None)
    if not isinstance(new, staticmethod) or type(new.__func__).__name__ != "function" or \
            any("__init__" in vars(k) for k in _user_layers(cls)):
        return tx.output.call("call_function", cls, tuple(args), kwargs)
    made = tx.inline(UserFunctionValue(new.__func__), [class_value(cls), *args], kwargs)
    if not (isinstance(made, TensorValue) and made.cls is cls):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{cls.__qualname__}.__new__ made no {cls.__qualname__}")
    return made


def torch_function_of_cls(cls: type) -> Any:
    from .tensor_subclasses import torch_function_of
    return torch_function_of(cls)


class TorchFunctionCall(Value):
    """A callable whose call eager routes through the overloaded arguments' __torch_function__ with `func`;
    called where subclass dispatch is off (or no argument has one), it is `fallback` called as usual."""

    def __init__(self, func: Any, fallback: Any) -> None:
        self.func = func
        self.fallback = fallback

    def python_type(self) -> type:
        return type(self.func)

    def call_in_trace(self, tx, args: list, kwargs: dict) -> Any:
        from .values import ConstantValue, UserFunctionValue
        if self.func in _HAS_TORCH_FUNCTION:
            return ConstantValue(routed(_has_tf_args(self.func, args), kwargs) is not None)
        if self.func is torch.overrides.handle_torch_function:
            return handle_torch_function(tx, args, kwargs)
        if self.func is _DEFAULT_TF:  # `torch.Tensor.__torch_function__(...)`, read as a torch callable
            return default_torch_function(tx, args, kwargs)
        cls = routed(args, kwargs)
        if cls is None:
            return _plain_call(tx, self, args, kwargs)
        if type(self.func).__name__ == "function":  # its body calls handle_torch_function with what it forwards
            return tx.inline(UserFunctionValue(self.func), args, kwargs)
        return inline_torch_function(tx, cls, self.func, args, kwargs)


def torch_function_call(tx, fn: Any, args: list, kwargs: dict) -> Any:
    """For calls.py: a TorchFunctionCall when calling the BuiltinValue `fn` goes through an inlined
    __torch_function__ (a C function of torch, or a torch Python function that handles it), else None."""
    obj = getattr(fn, "obj", None)
    if obj is torch.overrides.handle_torch_function and not _STATE.disabled or obj is _DEFAULT_TF:
        return TorchFunctionCall(obj, fn)
    if obj in _HAS_TORCH_FUNCTION:
        return TorchFunctionCall(obj, fn) if routed(_has_tf_args(obj, args), kwargs) is not None else None
    if _is_getset_read(obj) or _is_tensor_method(obj) and args and isinstance(args[0], TensorValue):
        return TorchFunctionCall(obj, fn)  # `Tensor.max(t, 0)`, `<getset>.__get__(t)`: as `t.max(0)`, `t.shape`
    if _STATE.disabled or not _handles_torch_function(obj) or obj in torch.overrides.get_ignored_functions() \
            or routed(_has_tf_args(obj, args), kwargs) is None:
        return None
    return TorchFunctionCall(obj, fn)


# `has_torch_function(iterable)`, `has_torch_function_unary(t)`, `has_torch_function_variadic(*ts)`
_HAS_TORCH_FUNCTION = (torch._C._has_torch_function, torch._C._has_torch_function_unary,
                       torch._C._has_torch_function_variadic)


def _has_tf_args(obj: Any, args: list) -> list:
    items = getattr(args[0], "items", None) if len(args) == 1 else None
    if obj is torch._C._has_torch_function and type(items) in (list, tuple):
        return list(items)
    return args


def handle_torch_function(tx, args: list, kwargs: dict) -> Any:
    """`torch.overrides.handle_torch_function(public_api, relevant_args, *args, **kwargs)` in a torch Python
    function whose body the trace inlined: the inlined __torch_function__ with `public_api`."""
    if len(args) < 2 or not callable(_func_object(args[0])):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "handle_torch_function with these arguments")
    cls = routed(_items(args[1]), {})
    if cls is None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "handle_torch_function with no inlined __torch_function__")
    return inline_torch_function(tx, cls, _func_object(args[0]), args[2:], kwargs)


def tensor_method_call(tx, tensor: TensorValue, name: str, args: list, kwargs: dict) -> Any:
    """`tensor.name(*args, **kwargs)` recorded as a call_method node, or through an argument's inlined
    __torch_function__ (`y.add_(x)` with x of such a class: func `Tensor.add_`)."""
    cls = routed([tensor, *args], kwargs)
    if cls is None:
        return tx.output.call("call_method", name, (tensor, *args), kwargs)
    return inline_torch_function(tx, cls, getattr(torch.Tensor, name), [tensor, *args], kwargs)


def _is_getset_read(obj: Any) -> bool:
    return isinstance(getattr(obj, "__self__", None), _GETSET) and getattr(obj, "__name__", None) == "__get__" and \
        getattr(obj.__self__, "__objclass__", None) in (torch.Tensor, torch._C.TensorBase)


def _is_tensor_method(obj: Any) -> bool:
    return isinstance(obj, type(torch.Tensor.add)) and getattr(obj, "__objclass__", None) in (
        torch.Tensor, torch._C.TensorBase) and obj not in torch.overrides.get_ignored_functions()


def _handles_torch_function(obj: Any) -> bool:
    module = getattr(obj, "__module__", None) or ""
    if type(obj).__name__ == "function":
        return module.startswith("torch") and "handle_torch_function" in obj.__code__.co_names
    if isinstance(obj, (type(torch.add), type(torch.Tensor.add))):
        return module.startswith("torch") or getattr(obj, "__objclass__", None) in (torch.Tensor, torch._C.TensorBase)
    return False


# ---- torch's default __torch_function__ -----------------------------------------------------------------
def default_torch_function(tx, args: list, kwargs: dict) -> Any:
    """`Tensor.__torch_function__(cls, func, types, args=(), kwargs=None)` (torch/_tensor.py) at trace time."""
    from .values import ClassValue, ConstantValue
    names = ("cls", "func", "types", "args", "kwargs")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    cls, func, types_v = bound.get("cls"), bound.get("func"), bound.get("types")
    call_args, call_kwargs = bound.get("args"), bound.get("kwargs")
    if not isinstance(cls, ClassValue) or func is None or types_v is None or set(bound) - set(names):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "Tensor.__torch_function__ called with these arguments")
    types = [t.as_constant() if not isinstance(t, ClassValue) else t.obj for t in _items(types_v)]
    if not all(isinstance(t, type) and issubclass(cls.obj, t) for t in types):
        return ConstantValue(NotImplemented)
    positional = _items(call_args) if call_args is not None else []
    named = {} if call_kwargs is None or call_kwargs.is_constant() and call_kwargs.as_constant() is None \
        else _dict_items(call_kwargs)
    _STATE.disabled += 1
    try:
        before = tx.output.graph._root.prev
        ret = _plain_call(tx, func, positional, named)
        if _func_object(func) in torch.overrides.get_default_nowrap_functions():
            return ret
        return _convert(tx, ret, cls.obj, _nodes_after(tx.output.graph, before))
    finally:
        _STATE.disabled -= 1


def _items(value: Any) -> list:
    items = getattr(value, "items", None)
    if type(items) not in (list, tuple):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"Tensor.__torch_function__ with {value.describe()} as a "
                          "sequence")
    return list(items)


def _dict_items(value: Any) -> dict:
    items = getattr(value, "items", None)
    if type(items) is not dict or not all(type(k) is str for k in items):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"Tensor.__torch_function__ with {value.describe()} as kwargs")
    return dict(items)


def _func_object(func: Any) -> Any:
    obj = getattr(func, "obj", getattr(func, "fn", getattr(func, "func", None)))
    if obj is None and func.is_constant():
        obj = func.as_constant()
    return obj


def _plain_call(tx, func: Any, args: list, kwargs: dict) -> Any:
    """`func(*args, **kwargs)` with subclass dispatch off; a getset `__get__` is the attribute read."""
    from .calls import call_value
    obj = _func_object(func)
    owner = getattr(obj, "__self__", None)
    if _is_getset_read(obj) and len(args) == 1 and not kwargs:
        if owner.__name__ in _SOURCE_READS and getattr(args[0], "source", None) is not None:
            raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"Tensor.{owner.__name__} of a tensor whose class has "
                              "its own __torch_function__ (its guard would run it)")
        return tx.getattr(args[0], owner.__name__)
    if isinstance(func, TorchFunctionCall):
        func = func.fallback
    if _is_tensor_method(obj) and args and isinstance(args[0], TensorValue):  # `Tensor.add(x, y)`: x.add(y)
        from .calls import call_tensor_method
        return call_tensor_method(tx, args[0], obj.__name__, args[1:], kwargs)
    return call_value(tx, func, args, kwargs)


# attributes read from the input's source (NOTE [Gradients of inputs], NOTE [Data of inputs]): guarded there
_SOURCE_READS = frozenset({"grad", "_grad", "data", "_base"})


def _nodes_after(graph, before) -> set:
    made, node = set(), before.next
    while node is not graph._root:
        made.add(node)
        node = node.next
    return made


def _convert(tx, ret: Any, cls: type, made: set) -> Any:
    """torch._tensor._convert: each Tensor of the result (top level, or in a tuple/list) that is not a `cls`
    becomes one (`as_subclass`): a new object over the same data."""
    from .values import SequenceValue
    if cls is torch.Tensor:
        return ret
    if isinstance(ret, TensorValue):
        if issubclass(ret.cls, cls):
            return ret
        if ret.node in made and ret.source is None:
            ret.cls, ret.wrap_grad = cls, tx.output.grad_enabled
            return gate(ret)
        value = tx.output.call("call_function", torch.ops.aten.alias.default, (ret,), {})
        value.cls, value.wrap_grad = cls, tx.output.grad_enabled
        return gate(value)
    if isinstance(ret, SequenceValue) and issubclass(ret.cls, (tuple, list)):
        return type(ret)([_convert(tx, item, cls, made) for item in ret.items], cls=ret.cls)
    return ret


# ---- operators and attribute reads -----------------------------------------------------------------------
class _Seen(Exception):
    pass


class _Probe(torch.Tensor):
    """Stands for an argument whose class has a __torch_function__: the first call records what eager's
    dispatch passes and stops."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise _Seen(func, args, kwargs or {})


def operator_call(tx, fn: Any, operands: list) -> Any:
    """`fn(*operands)` (operator.mul, operator.iadd, operator.lt, operator.neg, operator.getitem, ...) through
    the inlined __torch_function__ of an operand's class, with the func and arguments eager passes; None when
    no operand has one (or dispatch is off)."""
    cls = routed(operands, {})
    if cls is None:
        return None
    probes: dict[int, Any] = {}
    try:
        with torch._C._EnableTorchFunction():  # the trace runs with subclass dispatch off (start_trace)
            fn(*[_probe_of(v, probes) for v in operands])
    except _Seen as seen:
        func, args, kwargs = seen.args
    except Exception:  # an operand with no stand-in (_NotRouted), or the operator raised before dispatch
        return None
    else:
        return None
    back = {id(p): v for v, p in probes.values()}
    args = [_value_back(a, back) for a in args]
    kwargs = {k: _value_back(a, back) for k, a in kwargs.items()}
    return inline_torch_function(tx, cls, func, args, kwargs)


def _probe_of(value: Any, probes: dict) -> Any:
    """A real stand-in for `value`: a probe tensor for a tensor of a subclass with a __torch_function__, an
    empty plain tensor for other tensors, the constant for constants; else the call is not routed."""
    if isinstance(value, TensorValue):
        if id(value) not in probes:
            probe = torch.empty(0)
            probes[id(value)] = (value, probe.as_subclass(_Probe) if value.cls is not torch.Tensor else probe)
        return probes[id(value)][1]
    if value.is_constant():
        constant = value.as_constant()
        keys = (int, type(None), slice, type(...))
        if isinstance(constant, (int, float, bool, complex, type(None), type(...), slice, str)) or \
                isinstance(constant, tuple) and all(isinstance(c, keys) for c in constant):
            return constant
    raise _NotRouted()


class _NotRouted(Exception):
    pass


def _value_back(obj: Any, back: dict) -> Any:
    from .values.builder import wrap_unguarded
    if id(obj) in back:
        return back[id(obj)]
    if isinstance(obj, torch.Tensor):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "an operator made a tensor before its __torch_function__ ran")
    return wrap_unguarded(obj)


def tensor_attr(tx, t: TensorValue, name: str) -> Any:
    """`t.name` of a tensor whose class inlines its __torch_function__, for a name torch.Tensor defines (the
    subclass's own names were read before: tensor_subclasses.subclass_attr): a getset read is routed with
    `<getset>.__get__`; a method is a TorchFunctionCall; None for the rest (read as for any tensor)."""
    import inspect
    if _STATE.disabled or not isinstance(t, GatedTensorValue):
        return None
    try:
        attr = inspect.getattr_static(torch.Tensor, name)
    except AttributeError:
        return None
    if isinstance(attr, _GETSET):
        return inline_torch_function(tx, t.cls, attr.__get__, [t], {})
    if _handles_torch_function(attr) and attr not in torch.overrides.get_ignored_functions():
        from .values import BoundMethodValue, BuiltinValue
        return BoundMethodValue(BuiltinValue(attr), t)  # its call: calls._call_builtin_value, torch_function_call
    return None


from .module_hooks import TRACE_TIME  # noqa: E402  (functions the translator answers itself)
TRACE_TIME[_DEFAULT_TF] = default_torch_function
