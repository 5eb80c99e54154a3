"""NumPy code on traced tensors: ndarrays are tensors in the graph, NumPy calls are torch._numpy calls.

NOTE [NumPy as torch]: while tracing, an ndarray is an `NdarrayValue`: a TensorValue of the graph (the
array's data) tagged as NumPy. `Tensor.numpy()` tags the tensor (no node: the array shares the tensor's
memory, as in eager), `torch.from_numpy(a)` untags it, and every NumPy operation on an ndarray (a
function such as np.sum or np.linalg.norm, a method, a tensor-valued attribute such as `.T`, an
operator, an index) is one graph node whose target is a `NumpyOp`: it wraps its tensor arguments in
`torch._numpy.ndarray`, runs torch's NumPy-on-torch implementation (NumPy's dtype rules, float64
defaults) and unwraps the results. Metadata (shape, size, ndim, dtype, itemsize) is answered from the
fake tensor. An ndarray that leaves the graph (returned, or live at a graph break) is rebuilt after the
graph as a real `numpy.ndarray` by `ndarray_of` (`tensor.numpy()`, or a NumPy scalar for a 0-d result
of a ufunc, reduction or integer index, as NumPy gives).

ndarrays passed in are graph inputs through `torch.from_numpy` (same memory, so in-place writes reach
the caller's array), guarded on type, dtype, shape and strides. NumPy constants (np.pi, dtypes, scalar
types, finfo/iinfo) are answered at trace time; np.dtype/np.finfo/np.iinfo/np.float32(...) calls on
constants are evaluated with NumPy itself. np.random stays eager (its generator is not torch's), and any
NumPy function torch._numpy does not implement is a graph break, never an approximation; where
torch._numpy's dtype would differ from NumPy's, NOTE [NumPy dtype oracle] turns the op into a break.

Main types: NdarrayValue (an array or NumPy scalar), NdarrayMethodValue (`a.reshape` before the call),
NumpyOp (the picklable FX target; it runs torch._numpy with torch's default dtype set to float64, so
`int / int` is float64 as in NumPy). Invariants: no NdarrayValue reaches a torch op (torch functions
given arrays break, except from_numpy/as_tensor/asarray/tensor); NumPy ints and floats given to torch
ops are Python numbers (`scalar_for_torch`). Known limits: a 0-d result is a NumPy scalar unless the op
is one of _KEEP_ARRAY (NumPy's own rule is per function); `.strides` only of arrays whose layout is the
tensor's (inputs, `Tensor.numpy()`); a NumPy scalar carried into a resume function is a constant there
(guarded by value).
"""
from __future__ import annotations

import operator
import sys
import types
from typing import Any

import torch
from torch.utils._pytree import tree_map

from ..guards import COST_CONSTANT, COST_TENSOR
from ..guards.plain_reads import is_a
from .breaks import BreakKind, Unsupported, UserException
from .sources import CallSource, Ref, Source
from .values import ConstantValue, DictValue, ListValue, SequenceValue, SymNodeValue, TensorValue, TupleValue, Value


def _np():
    return sys.modules.get("numpy")


def _tnp():
    import torch._numpy as tnp
    return tnp


# ---- values ------------------------------------------------------------------------------------------
class NdarrayValue(Value):
    """A numpy.ndarray (or a NumPy scalar, when `scalar`) whose data is the graph tensor `tensor`.
    `exact_strides`: the tensor's strides are the array's (an input, or `Tensor.numpy()`)."""

    def __init__(self, tensor: TensorValue, source: Source | None = None, scalar: bool = False,
                 exact_strides: bool = False) -> None:
        self.tensor = tensor
        self.source = source
        self.scalar = scalar
        self.exact_strides = exact_strides

    @property
    def fake(self) -> torch.Tensor:
        return self.tensor.fake

    def np_dtype(self):
        return numpy_dtype(self.fake.dtype)

    def python_type(self) -> type:
        return self.np_dtype().type if self.scalar else _np().ndarray

    def describe(self) -> str:
        kind = "NumpyScalar" if self.scalar else "Ndarray"
        return f"{kind}({self.tensor.node.name}, {tuple(self.fake.shape)}, {self.fake.dtype})"


class NdarrayMethodValue(Value):
    """`array.name` for a method of ndarray: calling it adds one NumpyOp node."""

    def __init__(self, array: NdarrayValue, name: str) -> None:
        self.array = array
        self.name = name

    def python_type(self) -> type:
        return types.BuiltinMethodType

    def describe(self) -> str:
        return f"NdarrayMethod({self.name})"


def numpy_dtype(dtype: torch.dtype):
    try:
        return _np().dtype(str(dtype).split(".")[-1])
    except TypeError:
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"{dtype} has no NumPy dtype") from None


# ---- graph targets and run-time helpers ------------------------------------------------------------
class NumpyOp:
    """An FX target: `kind` is "func" (a torch._numpy function by dotted path), "method" (a method of
    torch._numpy.ndarray on the first argument), "attr" (a tensor-valued property) or "operator" (a
    function of the operator module). Picklable (kind and name only), deterministic names."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        self.__name__ = self.__qualname__ = f"numpy_{kind}_{name.replace('.', '_')}"
        self.__module__ = __name__

    def __reduce__(self):
        return (NumpyOp, (self.kind, self.name))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NumpyOp) and (other.kind, other.name) == (self.kind, self.name)

    def __hash__(self) -> int:
        return hash((self.kind, self.name))

    def __repr__(self) -> str:
        return self.__name__

    def __call__(self, *args, **kwargs):
        # torch's default dtype decides `int / int` inside torch._numpy: NumPy's is float64
        previous = torch._C.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            return self._run(*args, **kwargs)
        finally:
            torch.set_default_dtype(previous)

    def _run(self, *args, **kwargs):
        tnp = _tnp()
        args, kwargs = tree_map(_to_tnp, (args, kwargs))
        if self.kind == "func":
            fn = tnp
            for part in self.name.split("."):
                fn = getattr(fn, part)
            out = fn(*args, **kwargs)
        elif self.kind == "method":
            out = getattr(args[0], self.name)(*args[1:], **kwargs)
        elif self.kind == "attr":
            out = getattr(args[0], self.name)
        else:
            out = getattr(operator, self.name)(*args, **kwargs)
        return tree_map(_to_tensor, out)


def _to_tnp(x: Any) -> Any:
    return _tnp().ndarray(x) if isinstance(x, torch.Tensor) else x


def _to_tensor(x: Any) -> Any:
    return x.tensor if isinstance(x, _tnp().ndarray) else x


def ndarray_of(tensor: torch.Tensor, scalar: bool) -> Any:
    """The real NumPy result for a graph output that stands for an ndarray (NOTE [NumPy as torch])."""
    array = tensor.numpy()
    return array[()] if scalar else array


def scalar_for_torch(value: Any) -> Any:
    """A NumPy constant given to a torch op: NumPy ints and floats act on tensors exactly as Python ints
    and floats do (and print as literals in graph code); NumPy bools and complex numbers do not (torch
    takes np.bool_ for a float), so those are a break."""
    np = _np()
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, np.generic):
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"a NumPy {type(value).__name__} given to a torch op")
    return value  # dtypes, finfo: torch rejects them as eager does


def array_input(array: Any) -> torch.Tensor:
    """The graph input for an ndarray argument: a tensor sharing its memory."""
    return torch.from_numpy(array)


# ---- what is NumPy --------------------------------------------------------------------------------
def _is_numpy_object(obj: Any) -> bool:
    np = _np()
    if np is None:
        return False
    if is_a(obj, np.ufunc):  # by type: NOTE [Type facts without user code] (review revA A4)
        return True
    if is_a(obj, (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType)):  # no user __getattr__
        module = obj.__module__
        if not isinstance(module, str):  # a builtin method: its owner's class decides
            module = type(getattr(obj, "__self__", None)).__module__
    else:
        module = type(obj).__module__
    return module == "numpy" or module.startswith("numpy.")


def numpy_callable(fn: Value) -> Any:
    """The real NumPy callable `fn` stands for, or None."""
    if _np() is None:
        return None
    from .values import BuiltinValue, ObjectValue, UserFunctionValue
    if isinstance(fn, UserFunctionValue):
        obj = fn.fn
    elif isinstance(fn, (BuiltinValue, ObjectValue)):  # ClassValue is an ObjectValue
        obj = fn.obj
    else:
        return None
    try:
        return obj if callable(obj) and _is_numpy_object(obj) else None
    except Exception:
        return None


def is_numpy_constant(obj: Any) -> bool:
    """Immutable NumPy objects answered at trace time: scalars, dtypes, finfo/iinfo."""
    np = _np()
    return np is not None and isinstance(obj, (np.generic, np.dtype, np.finfo, np.iinfo))


def involves_ndarray(*values: Value) -> bool:
    return any(isinstance(v, (NdarrayValue, NdarrayMethodValue)) for v in values)


# ---- wrapping real NumPy objects -------------------------------------------------------------------
def wrap_numpy(out, obj: Any, source: Source) -> Value | None:
    """Guarded values for NumPy objects read through `source` (builder._wrap_guarded), or None."""
    np = _np()
    if np is None or not type(obj).__module__.startswith("numpy"):
        return None
    from .values import BuiltinValue
    if type(obj) is np.ndarray:
        return _array_argument(out, obj, source)
    if isinstance(obj, (np.generic, np.dtype)):
        out.guard_constant(source, obj)
        return ConstantValue(obj, source)
    if isinstance(obj, np.ufunc):
        out.guard_id(source, obj)
        return BuiltinValue(obj, source)
    if isinstance(obj, (np.finfo, np.iinfo)):  # made anew per call (iinfo), but fixed by their dtype
        out.guard_type(source, type(obj))
        e = source.expr(out.names)
        out.add_guard("CONSTANT_MATCH", f"{e}.dtype == {out.name_of(obj.dtype, f'np_{obj.dtype.name}')}", source,
                      expected=f"{type(obj).__name__}({obj.dtype})", actual=f"{e}.dtype", cost=COST_CONSTANT)
        return ConstantValue(obj, source)
    return None


def _array_argument(out, array: Any, source: Source) -> NdarrayValue:
    """An ndarray argument: guarded like a tensor (type, dtype, shape, strides), a graph input through
    torch.from_numpy."""
    np = _np()
    out.guard_type(source, np.ndarray)
    e = source.expr(out.names)
    dtype_name = out.name_of(array.dtype, f"np_{array.dtype.name}")
    out.add_guard("NDARRAY_MATCH", f"{e}.dtype == {dtype_name} and {e}.shape == {array.shape!r} and "
                  f"{e}.strides == {array.strides!r}", source,
                  expected=f"{array.dtype} {array.shape} strides {array.strides}",
                  actual=f"({e}.dtype, {e}.shape, {e}.strides)", cost=COST_TENSOR)
    try:
        tensor = array_input(array)
    except (TypeError, ValueError, RuntimeError) as err:
        raise Unsupported(BreakKind.UNSUPPORTED_VALUE, f"the ndarray {source.describe()}: {err}") from None
    before = len(out.guards)
    value = out.add_input(tensor, CallSource(Ref(array_input, "___ndarray_input"), source))
    # the NDARRAY_MATCH above pins all the tensor's guard would (dtype, shape, strides; from_numpy always
    # gives a CPU tensor at offset 0 without grad): dropped, so a guard check converts the array zero times
    del out.guards[before:]
    return NdarrayValue(value, source, exact_strides=True)


# ---- Tensor.numpy() and torch functions on arrays -----------------------------------------------------
def tensor_to_ndarray(tx, tensor: TensorValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    if args or kwargs:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "Tensor.numpy() with arguments")
    _check_convertible(tensor, "Tensor.numpy()")
    if not tensor.fake.is_inference():  # an inference tensor has no version counter
        tx.output.numpy_shared.append(tensor.fake)  # NOTE [NumPy writes into tensors]
    return NdarrayValue(tensor, exact_strides=True)


def _check_convertible(tensor: TensorValue, what: str) -> None:
    fake = tensor.fake
    if _np() is None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{what} without numpy imported")
    if tensor.python_type() not in (torch.Tensor, torch.nn.Parameter) or fake.requires_grad or \
            fake.device.type != "cpu" or fake.is_conj() or fake.is_neg() or fake.layout != torch.strided:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL,
                          f"{what} of a tensor that NumPy cannot share (grad, device, subclass or layout)")
    numpy_dtype(fake.dtype)


def torch_call_on_arrays(tx, fn: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """A torch function given an ndarray: torch.from_numpy / as_tensor / asarray / tensor."""
    array = args[0] if args else None
    if fn is torch.from_numpy and len(args) == 1 and not kwargs and isinstance(array, NdarrayValue):
        if array.scalar:
            raise UserException(TypeError(f"expected np.ndarray (got {array.python_type().__name__})"))
        return array.tensor
    dtype = _constant_dtype(kwargs)
    if fn in (torch.as_tensor, torch.asarray) and len(args) == 1 and dtype is not _NOT_A_DTYPE and \
            isinstance(array, NdarrayValue) and not array.scalar:
        return _converted(tx, array.tensor, dtype)
    if fn is torch.tensor and len(args) == 1 and dtype is not _NOT_A_DTYPE and isinstance(array, NdarrayValue):
        return _converted(tx, tx.output.call("call_method", "clone", (array.tensor,), {}), dtype)
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{getattr(fn, '__name__', fn)} given a NumPy array")


# NOTE [Arrays made tensors with a dtype]: `torch.as_tensor(a, dtype=d)` (and asarray) of an ndarray shares
# the array's memory when `d` is its dtype and is a converted copy otherwise, which is what
# `from_numpy(a).to(d)` does; `torch.tensor(a, dtype=d)` always copies. Only a constant dtype (or None) and
# no other keyword: device, copy and requires_grad stay a break. DETR-style Hungarian matchers end with
# `[(torch.as_tensor(i, dtype=torch.int64), torch.as_tensor(j, dtype=torch.int64)) for i, j in indices]`
# over scipy's arrays, which broke there (transformers MaskFormer/Mask2Former/OneFormer losses).
_NOT_A_DTYPE = object()


def _constant_dtype(kwargs: dict[str, Value]) -> Any:
    """The constant `dtype=` of `kwargs` (None when absent), or _NOT_A_DTYPE for any other keyword."""
    if set(kwargs) - {"dtype"}:
        return _NOT_A_DTYPE
    value = kwargs.get("dtype")
    if value is None:
        return None
    if not value.is_constant() or not isinstance(value.as_constant(), (torch.dtype, type(None))):
        return _NOT_A_DTYPE
    return value.as_constant()


def _converted(tx, tensor: Value, dtype: Any) -> Value:
    if dtype is None or dtype == tensor.fake.dtype:
        return tensor
    return tx.output.call("call_method", "to", (tensor, dtype), {})


# ---- calls -------------------------------------------------------------------------------------------
_NO_TORCH_EQUIVALENT = ("numpy.random",)


def call_numpy(tx, real: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """A call of the NumPy callable `real` (NOTE [NumPy as torch])."""
    np = _np()
    module = getattr(real, "__module__", None) or type(getattr(real, "__self__", None)).__module__ or ""
    if module.startswith(_NO_TORCH_EQUIVALENT) or isinstance(getattr(real, "__self__", None),
                                                             (np.random.RandomState, np.random.Generator)):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL,
                          f"np.random.{getattr(real, '__name__', '?')} (NumPy's generator is not torch's: run eagerly)")
    if _all_constant(args, kwargs) and _foldable(real, args):
        result = _fold(real, args, kwargs)  # NOTE [NumPy calls folded under the error state]
        if is_numpy_constant(result) or type(result) in (int, float, bool, str, type(None)):
            return ConstantValue(result)
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"np.{real.__name__} returned {type(result).__name__}")
    path = torch_numpy_path(real)
    if path is None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL,
                          f"numpy.{getattr(real, '__name__', real)} has no torch._numpy equivalent")
    keeps = path.split(".")[-1] in _KEEP_ARRAY
    sizes = real in (np.arange, np.zeros, np.ones, np.full)  # NOTE [NumPy arrays of symbolic sizes]
    return _record(tx, NumpyOp("func", path), args, kwargs, keeps_array=keeps, real=real, sizes=sizes)


# NOTE [NumPy arrays of symbolic sizes]: `np.arange(x.shape[0])`, `np.zeros((n, 2))` with a symbolic size or int
# specialised it (the argument was read as a constant), so the frame compiled once per size and then ran eagerly
# (stock torch.compile: one dynamic graph). For np.arange/zeros/ones/full, whose dtype NumPy takes from the
# other arguments, never from an int's value (NEP 50: a Python int is a weak scalar), a symbolic int is passed
# to the torch._numpy op as the SymInt it is (as stock passes it); the dtype oracle probes with its value now.
# Other NumPy functions specialise it as before (np.linspace would anyway: torch._numpy makes its bounds
# tensors, and torch.linspace of tensor bounds reads the count).


# NOTE [NumPy calls folded under the error state]: a fold of a NumPy function or constructor on constants
# met NumPy's error state like an operator's fold (NOTE [NumPy folds and the error state] in protocol.py), but
# only operators on NumPy operands were folded under errstate(all="raise"): `np.float32(1e39)` (overflow in the
# cast, a constructor folded with no guard on the state) returned inf on every call after `np.seterr(all=
# "raise")`, where eager raises FloatingPointError (review revO O7), and a ufunc met its error under the quiet
# state the trace guards (`np.exp(1000.0)` under "warn": inf without the warning eager gives). Each fold runs
# under errstate(all="raise"): one that meets a floating-point error is a break, so the call runs in Python
# under the state of each call; one that meets none is the same under every state and stays folded, with no
# guard on the state (a ufunc fold guarded it quiet, so `np.sqrt(d_model)` broke under `np.seterr(all="raise")`).
def _fold(real: Any, args: list[Value], kwargs: dict[str, Value]) -> Any:
    try:
        with _np().errstate(all="raise"):
            return real(*(a.as_constant() for a in args), **{k: v.as_constant() for k, v in kwargs.items()})
    except FloatingPointError:
        raise Unsupported(BreakKind.DATA_DEPENDENT, f"np.{getattr(real, '__name__', real)} of constants meets a "
                          "floating-point error, handled as np.seterr says") from None
    except Exception as e:
        raise UserException(e) from None


def _foldable(real: Any, args: list[Value]) -> bool:
    np = _np()
    if isinstance(real, type):
        return real in (np.dtype, np.finfo, np.iinfo) or issubclass(real, np.generic)
    if isinstance(real, np.ufunc):  # `np.sqrt(d_model)` on scalars: a NumPy scalar, as eager computes it
        return all(isinstance(a.as_constant(), (int, float, complex, np.generic)) for a in args)
    if real in (np.prod, np.sum, np.max, np.min, np.amax, np.amin) and len(args) == 1:
        return _plain_ints(args[0].as_constant())  # NOTE [NumPy reductions of constant ints]
    return real in (np.result_type, np.promote_types, np.can_cast, np.issubdtype, np.isscalar)


# NOTE [NumPy reductions of constant ints]: `np.prod(t.shape)` (LLaVA-NeXT's pack_image_features checks
# `np.prod(image_feature.shape) % (...) != 0`) was traced as a torch._numpy op: a 0-d array whose truth
# value is data, a graph break per image (LLaVA-NeXT 15 graphs where stock torch.compile makes 8). A
# product, sum, max or min of one argument made only of Python ints (a torch.Size of static sizes, a tuple
# or list of them; guarded where they came from) is folded now into the NumPy scalar eager computes: such a
# reduction cannot warn or consult NumPy's error state (integer overflow wraps silently), and an empty max
# raises its ValueError as eager's call does. Floats, keyword arguments and arrays are traced as before.
def _plain_ints(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_plain_ints(v) for v in value)
    return type(value) in (int, bool)


_PATHS: dict[int, tuple[Any, str]] = {}


def torch_numpy_path(real: Any) -> str | None:
    """The dotted name in torch._numpy of the NumPy callable `real` (looked up by identity)."""
    if not _PATHS:
        np, tnp = _np(), _tnp()
        for prefix, np_module, tnp_module in (("", np, tnp), ("linalg.", np.linalg, tnp.linalg),
                                              ("fft.", np.fft, tnp.fft)):
            for name in dir(tnp_module):
                if name.startswith("_") or name in ("random", "linalg", "fft", "testing", "ndarray"):
                    continue
                obj = getattr(np_module, name, None)
                if obj is None or not callable(obj) or isinstance(obj, types.ModuleType):
                    continue
                _PATHS.setdefault(id(obj), (obj, prefix + name))
    found = _PATHS.get(id(real))
    return found[1] if found is not None and found[0] is real else None


# 0-d results of these stay arrays; of every other op (ufuncs, reductions) NumPy returns a scalar.
_KEEP_ARRAY = {"array", "asarray", "asanyarray", "ascontiguousarray", "asfortranarray", "copy", "reshape",
               "transpose", "swapaxes", "squeeze", "ravel", "flatten", "atleast_1d", "atleast_2d", "atleast_3d",
               "zeros", "ones", "empty", "full", "zeros_like", "ones_like", "empty_like", "full_like", "astype",
               "view", "T", "real", "imag", "conj", "conjugate", "expand_dims", "broadcast_to", "moveaxis",
               "flip", "fliplr", "flipud", "roll", "rot90", "diagonal", "meshgrid", "copyto",
               "__getitem__"}

_UNSUPPORTED_METHODS = {"item": BreakKind.DATA_DEPENDENT, "tolist": BreakKind.DATA_DEPENDENT,
                        "tobytes": BreakKind.DATA_DEPENDENT, "tostring": BreakKind.DATA_DEPENDENT,
                        "tofile": BreakKind.SIDE_EFFECT, "dump": BreakKind.SIDE_EFFECT,
                        "dumps": BreakKind.DATA_DEPENDENT, "__array__": BreakKind.UNSUPPORTED_CALL,
                        "resize": BreakKind.SIDE_EFFECT, "setflags": BreakKind.SIDE_EFFECT,
                        "__bool__": BreakKind.DATA_DEPENDENT, "__int__": BreakKind.DATA_DEPENDENT,
                        "__float__": BreakKind.DATA_DEPENDENT, "__index__": BreakKind.DATA_DEPENDENT}


def call_method(tx, method: NdarrayMethodValue, args: list[Value], kwargs: dict[str, Value]) -> Value:
    name = method.name
    if name in _UNSUPPORTED_METHODS:
        raise Unsupported(_UNSUPPORTED_METHODS[name], f"ndarray.{name}() reads array data into Python")
    keeps_array = name in _KEEP_ARRAY
    if method.array.scalar and keeps_array:  # a NumPy scalar's astype/copy give a scalar, its reshape an array
        if name not in ("astype", "copy"):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{name}() of a NumPy scalar")
        keeps_array = False
    return _record(tx, NumpyOp("method", name), [method.array, *args], kwargs, keeps_array=keeps_array)


def _all_constant(args: list[Value], kwargs: dict[str, Value]) -> bool:
    return all(_constant(v) for v in [*args, *kwargs.values()])


def _constant(v: Value) -> bool:
    if isinstance(v, SequenceValue):
        return all(_constant(i) for i in v.items)
    return v.is_constant() and not isinstance(v, (NdarrayValue, TensorValue))


# NOTE [NumPy writes into tensors]: an array from `Tensor.numpy()` shares the tensor's memory, and a NumPy write
# into it (`a[0] = 5`, `a += 1`, through any view of it) changes the tensor without bumping its version counter.
# Traced as torch._numpy ops, the same write is a torch in-place op that bumps it (`x._version` 2 after two
# writes, where eager leaves 0): autograd's saved-tensor checks and user code reading `_version` would see a
# write eager hides. Such a write is a graph break, so NumPy itself makes it. Arrays passed in (graph inputs
# through `torch.from_numpy`, a tensor of their own) and arrays made by NumPy ops are written in the graph.
# NOTE [NumPy error state]: NumPy raises, prints or calls a handler on a floating-point error (divide by
# zero, overflow, invalid) as `np.seterr` / `np.errstate` say; torch._numpy ops never do (a NumPy call folded
# at trace time: NOTE [NumPy calls folded under the error state]). So a trace with NumPy ops needs a state in which
# every error only warns or is ignored (the warning is not reproduced, as under stock torch.compile), else
# it is a graph break, and that is guarded: `np.seterr(divide="raise")` after the first call reruns NumPy.
_QUIET_ERRORS = ("warn", "ignore")
_quiet_extobj: list = [None]  # the last NumPy error-state object found quiet (a cheap identity check)


def numpy_errors_quiet() -> bool:
    """NumPy's error state only warns or ignores (NOTE [NumPy error state]); read by guards."""
    np = _np()
    try:
        extobj = np._core._ufunc_config._extobj_contextvar.get()
    except AttributeError:
        extobj = None
    if extobj is not None and extobj is _quiet_extobj[0]:
        return True
    quiet = all(v in _QUIET_ERRORS for v in np.geterr().values())
    if quiet and extobj is not None:
        _quiet_extobj[0] = extobj
    return quiet


def _guard_error_state(tx) -> None:
    out = tx.output
    if out.__dict__.get("numpy_errors_guarded"):
        return
    if not numpy_errors_quiet():
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"NumPy's error state {_np().geterr()} raises, prints or "
                          "calls on floating-point errors (NOTE [NumPy error state])")
    out.__dict__["numpy_errors_guarded"] = True
    check = out.name_of(numpy_errors_quiet, "numpy_errors_quiet")
    out.add_guard("NUMPY_ERRSTATE", f"{check}()", None, expected="NumPy floating-point errors only warn",
                  actual=f"{check}()", cost=COST_CONSTANT)


def _record(tx, target: NumpyOp, args: list[Value], kwargs: dict[str, Value], *, keeps_array: bool,
            real: Any = None, sizes: bool = False) -> Value:
    _guard_error_state(tx)
    graph_args = tuple(_graph_arg(tx, a, sizes) for a in args)
    graph_kwargs = {k: _graph_arg(tx, v, sizes) for k, v in kwargs.items()}
    shared = [(t, t._version) for t in tx.output.numpy_shared]
    result = _as_numpy(tx.output.call("call_function", target, graph_args, graph_kwargs), keeps_array)
    if any(t._version != version for t, version in shared):
        raise Unsupported(BreakKind.SIDE_EFFECT, f"NumPy {target.name} writes into the memory of a tensor "
                          "(Tensor.numpy()), which eager's version counter does not count (NOTE [NumPy writes "
                          "into tensors])")
    _check_dtypes(target, real, args, kwargs, result)
    return result


# NOTE [NumPy dtype oracle]: torch._numpy follows NumPy's dtype rules almost everywhere, but not always
# (cumsum of int8 stays int8 where NumPy gives int64, there is no uint64, ...). So every traced NumPy op
# is also run by NumPy itself on one-element arrays of the same dtypes and ranks; where the result
# dtypes differ, the op is a graph break (NumPy runs it eagerly), never a result of another dtype. When
# that probe raises (an argument that only fits the real shapes), there is nothing to compare (nor for a
# big array made from constants, np.zeros((10**5, 10**5)), which is not probed); for an
# in-place operator it means NumPy refuses the cast, so it is a break too. torch.Tensor arguments are
# probed as real tensors: np.sum(t), np.reshape(t, s) call the tensor's own methods (raising, or
# returning a tensor), which a break leaves to eager; np.ones_like(t) converts it and is traced.
def _check_dtypes(target: NumpyOp, real: Any, args: list[Value], kwargs: dict[str, Value], result: Value) -> None:
    import warnings
    np = _np()
    if target.kind == "operator" and target.name == "setitem":
        return
    if _all_constant(args, kwargs) and _numel(result) > _PROBE_LIMIT:
        return  # np.zeros((10**5, 10**5)): the probe would be that big; creation dtypes come from arguments
    try:
        probe_args = [_probe(a) for a in args]
        probe_kwargs = {k: _probe(v) for k, v in kwargs.items()}
    except _NoProbe:
        return
    fn = real
    if target.kind == "operator":
        fn = getattr(operator, target.name)
    elif target.kind in ("method", "attr"):
        attr = getattr(probe_args[0], target.name)
        fn = attr if target.kind == "method" else (lambda *_: attr)
        probe_args = probe_args[1:]
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            expected = fn(*probe_args, **probe_kwargs)
    except Exception:
        if target.kind == "operator" and target.name.startswith("i"):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"in-place {target.name} that NumPy may refuse") from None
        if any(isinstance(a, TensorValue) for a in [*args, *kwargs.values()]):
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{target.__name__} given a torch.Tensor: NumPy calls "
                              "its methods or refuses it") from None
        return
    traced, real_dtypes = _dtypes_of(result), _dtypes_of(expected)
    if traced is not None and real_dtypes is not None and traced != real_dtypes:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{target.__name__}: torch._numpy gives {traced}, NumPy "
                          f"gives {real_dtypes}")


class _NoProbe(Exception):
    pass


_PROBE_LIMIT = 1 << 16


def _symbolic_int(v: Value) -> bool:
    return isinstance(v, SymNodeValue) and isinstance(v.sym, torch.SymInt)


def _numel(result: Value) -> int:
    if isinstance(result, NdarrayValue):  # a symbolic count by its value now, with no guard (a probe's size)
        numel = result.fake.numel()
        return numel.node.hint if isinstance(numel, torch.SymInt) and numel.node.hint is not None else numel
    if isinstance(result, SequenceValue):
        return sum(_numel(i) for i in result.items)
    return 0


def _probe(v: Value) -> Any:
    np = _np()
    if isinstance(v, NdarrayValue):
        dtype = v.np_dtype()
        return dtype.type(1) if v.scalar else np.ones((1,) * v.fake.dim(), dtype=dtype)
    if isinstance(v, TensorValue):  # a real tensor: NumPy may call its methods instead of converting it
        return torch.ones((1,) * v.fake.dim(), dtype=v.fake.dtype)
    if isinstance(v, SequenceValue):
        items = [_probe(i) for i in v.items]
        return list(items) if v.cls is list else tuple(items)
    from .values import SliceValue
    if isinstance(v, SliceValue):
        raise _NoProbe
    if _symbolic_int(v) and v.sym.node.hint is not None:
        return v.sym.node.hint  # NOTE [NumPy arrays of symbolic sizes]: no guard (its value sets no dtype)
    if v.is_constant():
        return v.as_constant()
    raise _NoProbe


def _dtypes_of(x: Any) -> list | None:
    np = _np()
    if isinstance(x, NdarrayValue):
        return [x.np_dtype()]
    if isinstance(x, (np.ndarray, np.generic)):
        return [x.dtype]
    if isinstance(x, SequenceValue) or isinstance(x, (list, tuple)):
        items = x.items if isinstance(x, SequenceValue) else x
        parts = [_dtypes_of(i) for i in items]
        return None if any(p is None for p in parts) else [d for p in parts for d in p]
    if isinstance(x, Value) and x.is_constant():
        return _dtypes_of(x.as_constant()) if isinstance(x.as_constant(), (np.ndarray, np.generic)) else []
    if isinstance(x, (int, float, bool, complex, type(None))):
        return []
    if isinstance(x, torch.Tensor):
        return ["a torch.Tensor"]  # NumPy handed the work to the tensor's own method
    return None


def _graph_arg(tx, v: Value, sizes: bool = False) -> Value:
    """An argument as the graph op sees it: arrays as their tensors, NumPy dtypes as names, NumPy scalars
    as 0-d arrays (they keep their dtype, unlike Python scalars); a symbolic int of a size argument as itself
    (`sizes`: NOTE [NumPy arrays of symbolic sizes])."""
    np = _np()
    if sizes and _symbolic_int(v):
        return v
    if isinstance(v, NdarrayValue):
        return v.tensor
    if isinstance(v, TensorValue):
        _check_convertible(v, "a NumPy function")
        return v
    if isinstance(v, NdarrayMethodValue):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a bound ndarray method passed to a NumPy function")
    if isinstance(v, SequenceValue):
        cls = v.cls if v.cls in (list, tuple) else tuple
        return (ListValue if cls is list else TupleValue)([_graph_arg(tx, i, sizes) for i in v.items], cls=cls)
    if isinstance(v, DictValue):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a dict passed to a NumPy function")
    if v.is_constant():
        c = v.as_constant()
        if isinstance(c, np.dtype) or (isinstance(c, type) and issubclass(c, np.generic)):
            return ConstantValue(np.dtype(c).name)
        if isinstance(c, np.generic):
            return tx.output.call("call_function", NumpyOp("func", "asarray"),
                                  (ConstantValue(c.item()), ConstantValue(c.dtype.name)), {})
    return v


def _as_numpy(result: Value, keeps_array: bool) -> Value:
    if isinstance(result, TensorValue):
        return NdarrayValue(result, scalar=not keeps_array and result.fake.dim() == 0)
    if isinstance(result, SequenceValue):
        items = [_as_numpy(i, keeps_array) for i in result.items]
        return (ListValue if result.cls is list else TupleValue)(items, cls=result.cls)
    return result


# ---- attributes --------------------------------------------------------------------------------------
_TENSOR_ATTRS = {"T", "real", "imag", "flat", "mT"}


def ndarray_attr(tx, array: NdarrayValue, name: str) -> Value:
    fake = array.fake
    np = _np()
    if name == "shape":
        return ConstantValue(tuple(fake.shape))
    if name == "size":
        return ConstantValue(fake.numel())
    if name == "ndim":
        return ConstantValue(fake.dim())
    if name == "dtype":
        return ConstantValue(array.np_dtype())
    if name in ("itemsize",):
        return ConstantValue(array.np_dtype().itemsize)
    if name == "nbytes":
        return ConstantValue(array.np_dtype().itemsize * fake.numel())
    if name == "strides":
        if not array.exact_strides:
            raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, "ndarray.strides of a computed array "
                              "(torch's memory layout may differ from NumPy's)")
        return ConstantValue(tuple(s * fake.element_size() for s in fake.stride()))
    if name == "__class__":
        from .values import ClassValue
        return ClassValue(array.python_type())
    if name in _TENSOR_ATTRS and not array.scalar:
        return _record(tx, NumpyOp("attr", name), [array], {}, keeps_array=True)
    if hasattr(array.python_type(), name) and callable(getattr(_tnp().ndarray, name, None)):
        return NdarrayMethodValue(array, name)
    if hasattr(array.python_type(), name):
        raise Unsupported(BreakKind.UNSUPPORTED_ATTRIBUTE, f"ndarray.{name} has no torch._numpy equivalent")
    raise UserException(AttributeError(f"'{array.python_type().__name__}' object has no attribute '{name}'"))


# ---- Python protocol ---------------------------------------------------------------------------------
_INPLACE = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
            operator.ipow, operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift,
            operator.imatmul}


def binary(tx, fn: Any, a: Value, b: Value) -> Value:
    if isinstance(a, TensorValue) or isinstance(b, TensorValue):
        from .numpy_scalars import tensor_operator
        result = tensor_operator(tx, fn, a, b)  # NOTE [Dynamic NumPy scalars]
        if result is not None:
            return result
    if isinstance(a, (TensorValue, NdarrayMethodValue)) or isinstance(b, (TensorValue, NdarrayMethodValue)):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{fn.__name__} of an ndarray and a tensor (or method)")
    if fn in _INPLACE:
        if isinstance(a, NdarrayValue) and not a.scalar:
            _record(tx, NumpyOp("operator", fn.__name__), [a, b], {}, keeps_array=True)
            return a  # the same array, changed in place
        fn = getattr(operator, fn.__name__[1:] if fn is not operator.imatmul else "matmul")
    return _record(tx, NumpyOp("operator", fn.__name__), [a, b], {}, keeps_array=False)


def unary(tx, fn: Any, a: NdarrayValue) -> Value:
    name = fn.__name__
    if not hasattr(operator, name):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{name} of an ndarray")
    return _record(tx, NumpyOp("operator", name), [a], {}, keeps_array=False)


def length(array: NdarrayValue) -> int:
    if array.fake.dim() == 0:
        raise UserException(TypeError("len() of unsized object"))
    return array.fake.shape[0]


def iterate(tx, array: NdarrayValue) -> list[Value]:
    if array.fake.dim() == 0:
        raise UserException(TypeError("iteration over a 0-d array"))
    return [getitem(tx, array, ConstantValue(i)) for i in range(array.fake.shape[0])]


def getitem(tx, array: NdarrayValue, key: Value) -> Value:
    result = _record(tx, NumpyOp("operator", "getitem"), [array, key], {}, keeps_array=True)
    if isinstance(result, NdarrayValue) and result.fake.dim() == 0 and _integer_key(key):
        result.scalar = True  # a[i, j] of every dimension: a NumPy scalar
    return result


def _integer_key(key: Value) -> bool:
    items = key.items if isinstance(key, TupleValue) else [key]
    return all(isinstance(i, ConstantValue) and type(i.value) is int for i in items)


def setitem(tx, array: Value, key: Value, value: Value) -> None:
    if not isinstance(array, NdarrayValue) or array.scalar:
        raise Unsupported(BreakKind.SIDE_EFFECT, f"item assignment into {array.describe()}")
    if isinstance(value, TensorValue):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a tensor assigned into an ndarray")
    _record(tx, NumpyOp("operator", "setitem"), [array, key, value], {}, keeps_array=True)


# ---- rebuilding after the graph ----------------------------------------------------------------------
def rebuild(reconstructor, value: Value) -> None:
    """Emit code for an ndarray value (codegen.Reconstructor.emit): `ndarray_of(tensor, scalar)`."""
    if isinstance(value, NdarrayMethodValue):
        reconstructor._call_const(getattr, [value.array, ConstantValue(value.name)])
        return
    reconstructor._call_const(ndarray_of, [value.tensor, ConstantValue(value.scalar)])


def children(value: Value) -> list[Value]:
    if isinstance(value, NdarrayValue):
        return [value.tensor]
    if isinstance(value, NdarrayMethodValue):
        return [value.array]
    return []


__all__ = ["NdarrayValue", "NdarrayMethodValue", "NumpyOp", "ndarray_of", "array_input", "wrap_numpy",
           "numpy_callable", "call_numpy", "call_method", "tensor_to_ndarray", "torch_call_on_arrays",
           "ndarray_attr", "binary", "unary", "length", "iterate", "getitem", "setitem", "rebuild", "children",
           "is_numpy_constant", "involves_ndarray"]
