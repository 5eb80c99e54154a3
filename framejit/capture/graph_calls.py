"""Checks and conversions around one graph call, for OutputGraph (graph.py).

Role: what OutputGraph.call needs besides the graph itself: reading fake tensors and FX nodes out of
abstract values, refusing arguments FX or torch cannot take (functions, SymBools, symbolic int[] sizes),
the checks CPython-visible errors need before an op is recorded (an in-place write over overlapping
memory), and the text pieces of guards on tensors and floats (NOTE [Float guards are
bitwise], [Lazy negation and conjugation bits]). Pure functions: no state of their own.
"""
from __future__ import annotations

import enum
import functools
import inspect
import math
import operator
import re
import types
from typing import Any, Callable

import torch
import torch.fx
from torch.utils._pytree import tree_leaves, tree_map

from ..guards.plain_reads import is_a, module_text
from ..guards.same_values import has_zero, same_constant
from .breaks import BreakKind, Unsupported, UserException
from .values import ConstantValue, SequenceValue, SymFloatValue, SymNodeValue, TensorValue, Value
from .values.containers import DictValue, SliceValue


# NOTE [SymBool arguments of ops]: a relation of sizes (`q_len > 1`) is a SymBool, and Python's `and`
# returns its last operand as it is, so `is_causal = self.is_causal and mask is None and q_len > 1` (HF's
# moonshine, sdpa_attention_forward) hands an op a SymBool where its schema wants a bool:
# scaled_dot_product_attention raised "argument 'is_causal' must be bool, not SymBool" on the fake tensors
# and the frame broke (or ran eagerly). Eager evaluates the relation to a bool for the call; so does the
# trace: when the fake call refuses a SymBool argument (a TypeError naming SymBool), every SymBool argument
# is specialised (the ShapeEnv guards the relation or its negation, a line of the guard function; sizes
# where the relation holds keep sharing the entry) and the call is made again. Ops that do accept a
# SymBool (sym_not, operator functions) never raise, so they keep it symbolic.
def _refuses_sym_bool(error: UserException, args: tuple, kwargs: dict) -> bool:
    return isinstance(error.exc, TypeError) and "SymBool" in str(error.exc) and any(
        isinstance(v, SymNodeValue) and isinstance(v.sym, torch.SymBool)
        for v in tree_leaves((args, kwargs), is_leaf=_is_value))


# NOTE [Symbolic sizes an op refuses]: some overloads take their sizes as int[] rather than SymInt[]; given a
# symbolic size they raise "SymIntArrayRef expected to contain only concrete integers" on the fake tensors,
# where eager (real ints) never does. The common one is a factory call that names its generator:
# `torch.randn(shape, generator=None, ...)` (UnivNet's noise; `generator=generator` with None in diffusers-
# style code) selects randn.generator, whose size is int[], while `torch.randn(shape)` takes SymInts.
# `generator=None` means the default generator, so the call is recorded without it (the same kernel and
# draws) and stays symbolic. Any other such refusal is a graph break at the call (the op runs eagerly with
# real sizes), never the traced code's error: that ran the whole frame eagerly (an eager frame per size).
_SYM_SIZES_REFUSED = "SymIntArrayRef expected to contain only concrete integers"


def _refuses_sym_sizes(error: Exception) -> bool:
    return isinstance(error, Unsupported) and _SYM_SIZES_REFUSED in error.graph_break.explanation


def _is_none(value: Any) -> bool:
    return isinstance(value, ConstantValue) and value.value is None


def _specialise_sym_bools(tree: Any) -> Any:
    def leaf(v):
        if isinstance(v, SymNodeValue) and isinstance(v.sym, torch.SymBool):
            return ConstantValue(bool(v.sym))
        return v
    return tree_map(leaf, tree, is_leaf=_is_value)


def mark_symbolic_error(error: Exception, tree: Any, fakes: list) -> None:
    """NOTE [Errors of ops on symbolic values]: an op that raises while tracing with a symbolic int among its
    arguments or a fake tensor of symbolic shape raises with the fake run's message ("index s3 out of range",
    torch.select's wording where eager's indexing has its own). The trace may still break before the op, where
    plain Python raises eager's exception, but a handler of the traced code must not catch that message as a
    constant: `symbolic` makes follow_handler refuse it (caught_exceptions.py)."""
    if isinstance(error, UserException) and (_has_sym(tree) or any(
            not isinstance(d, int) for t in fakes for d in (*t.shape, t.storage_offset()))):
        error.symbolic = True


def _has_sym(tree: Any) -> bool:
    for v in tree_leaves(tree, is_leaf=_is_value):
        if isinstance(v, (SymFloatValue, SymNodeValue)) or isinstance(v, SequenceValue) and _has_sym(list(v.items)):
            return True
    return False


def _drop_unused_sizes(graph: torch.fx.Graph) -> None:
    """Size nodes the graph computed for Python code that then specialised them (NOTE [Symbolic shapes])
    are dropped: they have no effect."""
    for node in reversed(list(graph.nodes)):
        if not node.users and node.op in ("call_function", "call_method") and \
                isinstance(node.meta.get("val"), (torch.SymInt, torch.SymBool)):
            graph.erase_node(node)


def _version(t: torch.Tensor) -> int | None:
    """The tensor's version counter; None for an inference tensor, which has none."""
    return None if t.is_inference() else t._version


# NOTE [In-place operator names]: the operator module's in-place functions, by exact name. A prefix test
# ("starts with i", "starts with __i") also took `operator.invert`, `inv`, `index`, `is_` and `__invert__`,
# `__int__`, `__iter__` for writes: `~mask` on an expanded mask became an "overlapping write" break.
_INPLACE_OPERATORS = frozenset({"iadd", "iand", "iconcat", "ifloordiv", "ilshift", "imatmul", "imod", "imul", "ior",
                                "ipow", "irshift", "isub", "itruediv", "ixor"})
_INPLACE_DUNDERS = frozenset(f"__{name}__" for name in _INPLACE_OPERATORS)


def _inplace(target: Any) -> bool:
    """By name: an in-place op (`add_`, `__setitem__`, `operator.setitem`, `__iadd__`), for tensors whose
    mutations cannot be seen from a version counter (NOTE [In-place operator names])."""
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return (name.endswith("_") and not name.endswith("__")) or name in ("setitem", "__setitem__") or \
        name in _INPLACE_DUNDERS


# NOTE [Writes that bump no version]: a call is recorded for its effect only when it changed a version
# counter of its fake arguments (graph.py, `mutated`); a call that returns nothing and bumped none was
# dropped as a constant None. torch's fused optimizer steps (`torch._fused_adamw_`, `_fused_adam_`,
# `_fused_sgd_`, `_fused_adagrad_`: `AdamW(..., fused=True).step()`) write their list arguments without
# bumping any version, in eager and on fake tensors alike, so a compiled training step never updated its
# parameters or optimizer state (eager backend too: parameters unchanged, 0.05-0.15 off eager's after each
# step). A torch function whose name marks it in place, whose aten schema writes an argument and whose
# call bumped no version is now a graph break: it runs in Python, as eager runs it.
# The same ops called as `torch.ops.aten._fused_adamw_` (an OpOverloadPacket) or `...default` (an OpOverload)
# are checked on their own schemas: `torch.<name>` is another object, and such calls were dropped again.
def _check_unbumped_write(target: Any, mutated: bool) -> None:
    if mutated:
        return
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        if _op_writes(target):
            raise Unsupported(BreakKind.SIDE_EFFECT, f"{target} writes its arguments without bumping their "
                              "versions; it runs in Python (NOTE [Writes that bump no version])")
        return
    name = getattr(target, "__name__", None)
    if not isinstance(name, str) or not name.endswith("_") or name.endswith("__"):
        return
    found = getattr(torch, name, None)
    if found is not target and getattr(found, "__wrapped__", None) is not target:
        return
    if _schema_writes(name):
        raise Unsupported(BreakKind.SIDE_EFFECT, f"torch.{name} writes its arguments without bumping their "
                          "versions; it runs in Python (NOTE [Writes that bump no version])")


@functools.lru_cache(maxsize=None)
def _schema_writes(name: str) -> bool:
    """Some overload of aten's op `name` writes one of its arguments (alias annotation `(a!)`)."""
    packet = getattr(torch.ops.aten, name, None)
    try:
        return packet is not None and any(
            argument.alias_info is not None and argument.alias_info.is_write
            for overload in packet.overloads() for argument in getattr(packet, overload)._schema.arguments)
    except Exception:  # not an aten op packet
        return False


def _op_writes(op: Any) -> bool:
    """An OpOverload, or some overload of an OpOverloadPacket, writes one of its arguments (`(a!)`)."""
    try:
        overloads = [op] if isinstance(op, torch._ops.OpOverload) else [getattr(op, o) for o in op.overloads()]
        return any(argument.alias_info is not None and argument.alias_info.is_write
                   for overload in overloads for argument in overload._schema.arguments)
    except Exception:  # no schema to read
        return False


# NOTE [Foreach writes bump their fakes]: torch's in-place foreach ops (`torch._foreach_add_`, `_mul_`,
# `_lerp_`, `_addcdiv_`, `_zero_`, `_copy_`, ...: SGD/Adam/AdamW with foreach=True) bump the version counter
# of every tensor of their written list in eager (their autograd kernel does, once per list element), but
# not on fake tensors (torch 2.13). Every check of input writes reads fake counters (NOTE [Input mutation],
# [One guard for the inputs written in place], [Writes through the .data of inputs], [Version counts of
# written inputs]), so these writes went unseen: no alias check, no NO_ALIASING guard, no write record. An
# entry traced for distinct tensors was reused when a list held one tensor twice or a read argument was a
# view of a written one (onnxrt and triton lost a write: eager [5,6,7,8], compiled [4,5,6,7]); SGD momentum
# with a buffer shared between parameters drifted 0.14 from eager; writes through `.data` were not known
# as such, and the functionalizing backends bumped `p._version` where eager does not. After the fake run,
# the tensors of the op's written list arguments (schema alias annotation `Tensor(a!)[]`) are bumped as
# eager bumps them, when the fake kernel bumped none. The fused steps (`_fused_adam_`, ...) bump nothing in
# eager either; they stay breaks (NOTE [Writes that bump no version]).
def bump_foreach_writes(target: Any, fake_args: tuple, fake_kwargs: dict, fakes: list, versions: list) -> None:
    """After the fake run of `target`: bump the written list arguments of an in-place foreach op."""
    places = _foreach_list_writes(target)
    if not places:
        return
    written = []
    for position, name in places:
        arg = fake_args[position] if position < len(fake_args) else fake_kwargs.get(name)
        if isinstance(arg, (list, tuple)):
            written.extend(t for t in arg if isinstance(t, torch.Tensor))
    before = {id(t): v for t, v in zip(fakes, versions)}
    if any(before.get(id(t), 0) is None or _version(t) != before.get(id(t), 0) for t in written):
        return  # the fake kernel bumped (or an inference tensor: written by name, `_inplace`)
    for t in written:
        torch.autograd.graph.increment_version(t)


def eager_bumps(target: Any, version: int, before: int | None) -> int:
    """How many times eager's `target` bumped a written input's counter, which went from `before` to `version` on
    its fake: once per op (a fake kernel may bump more), but once per list element for an in-place foreach op,
    whose fake counters are bumped as eager bumps them (a tensor twice in the list, two views of one input)."""
    if before is None or not foreach_writes(target):
        return 1
    return max(1, version - before)


def foreach_writes(target: Any) -> bool:
    """`target` is an in-place foreach op (NOTE [Foreach writes bump their fakes])."""
    return bool(_foreach_list_writes(target))


def _foreach_list_writes(target: Any) -> tuple[tuple[int, str], ...]:
    """(position, name) of the `Tensor(a!)[]` arguments of an in-place foreach op (`torch._foreach_add_`, or
    `torch.ops.aten._foreach_add_(.List)`); () for any other target."""
    if isinstance(target, torch._ops.OpOverload):
        name = target._schema.name.partition("::")[2]
    elif isinstance(target, torch._ops.OpOverloadPacket):
        name = target._qualified_op_name.partition("::")[2]
    else:
        name = getattr(target, "__name__", None)
        if not isinstance(name, str) or getattr(torch, name, None) is not target:
            return ()
    if not (name.startswith("_foreach_") and name.endswith("_")):
        return ()
    return _list_writes_of(name, target._overloadname if isinstance(target, torch._ops.OpOverload) else None)


@functools.lru_cache(maxsize=None)
def _list_writes_of(name: str, overload: str | None) -> tuple[tuple[int, str], ...]:
    packet = getattr(torch.ops.aten, name, None)
    try:
        names = [overload] if overload is not None else packet.overloads()
        return tuple(sorted({(i, a.name) for o in names for i, a in enumerate(getattr(packet, o)._schema.arguments)
                             if a.alias_info is not None and a.alias_info.is_write
                             and isinstance(a.type, torch.ListType)}))
    except Exception:  # not an aten op packet
        return ()


# NOTE [Foreach lists that share memory]: eager's in-place foreach op on CPU writes its list one element after
# the other, so element 1 reads what element 0 wrote when they share memory (`torch._foreach_copy_(ps, gs)`
# with `gs[1] is ps[0]`, a momentum buffer shared by two parameters). A functionalizing backend computes
# every element from the values before the op (onnxrt: 15 where eager gives 17 for `torch.ops.aten.
# _foreach_add_.List`, which the per-element expansion of backends/foreach.py does not reach). An in-place
# foreach op whose written element overlaps the memory of another element or of a tensor read for other
# elements is a graph break: it runs in Python, as eager runs it. Elements of one index only read their own
# inputs (`torch._foreach_mul_(ps, ps)` stays in the graph), as do disjoint views of one buffer.
def _check_foreach_aliasing(target: Any, fake_args: tuple, fake_kwargs: dict) -> None:
    places = _foreach_list_writes(target)
    if not places:
        return
    written = {position for position, _ in places} | {name for _, name in places}
    items = []  # (written, argument, index in its list or None, tensor)
    for key, arg in [*enumerate(fake_args), *fake_kwargs.items()]:
        for index, t in (enumerate(arg) if isinstance(arg, (list, tuple)) else [(None, arg)]):
            if isinstance(t, torch.Tensor):
                items.append((key in written, key, index, t))
    by_storage: dict[int, list] = {}
    for item in items:
        by_storage.setdefault(item[3].untyped_storage()._cdata, []).append(item)
    for group in by_storage.values():
        for w, key, index, t in group:
            if w and any((k, i) != (key, index) and (i is None or i != index) and _may_overlap(t, u)
                         for _, k, i, u in group):
                raise Unsupported(BreakKind.SIDE_EFFECT, f"in-place {_target_name(target)} writes an element that "
                                  "shares memory with another of its arguments: it runs in Python "
                                  "(NOTE [Foreach lists that share memory])")


def _may_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Two tensors of one storage: their byte ranges intersect (True when a size or stride is symbolic)."""
    ranges = []
    for t in (a, b):
        layout = (t.storage_offset(), *t.shape, *t.stride())
        if any(not isinstance(v, int) for v in layout):
            return True
        if t.numel() == 0:
            return False
        start = t.storage_offset() * t.element_size()
        ranges.append((start, start + (1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))) * t.element_size()))
    return ranges[0][0] < ranges[1][1] and ranges[1][0] < ranges[0][1]


def _check_overlapping_write(target: Any, fake_args: tuple, fake_kwargs: dict) -> None:
    """NOTE [Overlapping writes]: eager refuses most in-place writes into a tensor whose elements share
    memory (an expanded tensor: `x.add_(1)` raises "unsupported operation: more than one element of the
    written-to tensor refers to a single memory location"), a check in the kernels that fake tensors do not
    make. In a graph that error would surface at run time outside the user's try/except, after side effects
    were dropped; so such a write is a graph break and runs in Python, where eager's own check decides
    (some writes, `fill_`, `zero_`, are allowed)."""
    name = getattr(target, "__name__", "")
    inplace = _inplace(target) or fake_kwargs.get("inplace") is True or (
        name in _INPLACE_OPERATORS and target is getattr(operator, name, None))  # operator.iadd
    written = fake_kwargs.get("out") if "out" in fake_kwargs else fake_args[0] if fake_args and inplace else None
    if isinstance(written, torch.Tensor) and torch._debug_has_internal_overlap(written) == 1:
        raise Unsupported(BreakKind.SIDE_EFFECT, f"in-place {_target_name(target)} writes into a tensor whose elements "
                                                 "share memory (an expanded tensor): eager's kernel decides")
    _check_foreach_aliasing(target, fake_args, fake_kwargs)  # NOTE [Foreach lists that share memory]
    _check_layout_read_after_write(target, fake_args)


_LAYOUT_READS = ("stride", "storage_offset")


def _check_layout_read_after_write(target: Any, fake_args: tuple) -> None:
    """NOTE [Layout reads after writes]: `o.mul_(2); return o * o.stride(0)` with `o` an input whose stride
    is symbolic (a row `x[:, t]` of growing sequences). The graph reads `o.stride()` as a node after the
    write; a backend that functionalizes the write (triton) gives the written value its own contiguous
    layout, so the node answered 4 where eager's `o` has stride 16, 20, ... (into values and shapes). A
    stride or storage offset read of a tensor whose layout is symbolic and whose storage this trace wrote
    (its version moved: an in-place op, `out=`, a write through a view) is a graph break: Python reads the
    real tensor after the graph wrote it. A static layout folds to constants and is not affected."""
    name = target if isinstance(target, str) else getattr(target, "__name__", None)
    if name not in _LAYOUT_READS or not fake_args or not isinstance(fake_args[0], torch.Tensor):
        return
    tensor = fake_args[0]
    layout = (*tensor.stride(), tensor.storage_offset())
    if not any(isinstance(s, torch.SymInt) and s.node.maybe_as_int() is None for s in layout):
        return
    version = getattr(tensor, "_version", None)
    if version is None or version > 0:
        raise Unsupported(BreakKind.SIDE_EFFECT, f"{name}() of a tensor with a symbolic layout that the graph "
                                                 "wrote: read in Python from the written tensor")


def _is_value(x: Any) -> bool:
    return isinstance(x, Value)


def _fake_of(x: Any) -> Any:
    if isinstance(x, TensorValue):
        return x.fake
    if isinstance(x, SymNodeValue):
        return x.sym
    if isinstance(x, SymFloatValue):
        return x.example
    if isinstance(x, Value):
        return _python_of(x, _fake_of)
    return x


# NOTE [Python types as dtypes]: torch's argument parser takes the Python types int, float, bool and
# complex wherever it takes a dtype (`torch.tensor(0, dtype=int)`, `x.to(float)`; transformers' linear
# attention caches do the former), but FX prints a type argument as `<class 'int'>`, which is not Python,
# so the whole frame fell back to eager. A graph op's argument that is one of these types is recorded as
# the dtype torch itself makes of it (read from torch, not assumed: float is float64 whatever the default
# dtype is). Only for torch's own functions and tensor methods: no torch op takes these types in any other
# role, while a user function kept as one node may.
_PYTHON_DTYPES = {t: torch.empty(0, dtype=t).dtype for t in (int, float, bool, complex)}


def _python_type_as_dtype(x: Any) -> Any:
    return _PYTHON_DTYPES[x] if type(x) is type and x in _PYTHON_DTYPES else x


# NOTE [Functions as arguments of graph ops]: FX writes a node's arguments with repr(), so a function among
# them (vmap_impl(torch.sum, ...), reached by inlining the function `torch.vmap` returns) made graph code
# that did not parse (SyntaxError when the graph was built: the frame ran wholly eagerly). Such a call is
# a graph break, made by Python.
_FUNCTION_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.MethodDescriptorType,
                   types.WrapperDescriptorType, types.MethodWrapperType, functools.partial)


def _check_no_function_args(target: Any, node_args: tuple) -> None:
    if any(isinstance(leaf, _FUNCTION_TYPES) for leaf in tree_leaves(node_args)):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL,
                          f"{_target_name(target)} is given a function, which a graph cannot hold as an argument")


# NOTE [Legacy constructors of a torch.Size]: `torch.Tensor(size)`, `torch.FloatTensor(size)` and the other legacy
# constructors read a torch.Size as a shape and a tuple as data, like Tensor.new (NOTE [Tensor.new of a torch.Size]
# in unbound_tensor_methods.py). A node's arguments hold a torch.Size as a plain tuple (FX's map_aggregate,
# _python_of), so `torch.Tensor(x.shape)` made a tensor of shape (1,) holding the size (/tmp/hhuntHF8/m_size2.py).
# Such a call is a break: it runs in Python.
def checked_constructor(target: Any, args: tuple) -> tuple:
    """`args` of a graph call; a break for a legacy tensor constructor given a torch.Size (NOTE above)."""
    legacy = target is torch.Tensor or type(target).__name__ == "tensortype" and type(target).__module__ == "torch"
    if legacy and any(isinstance(a, SequenceValue) and a.cls is torch.Size or
                      isinstance(a, ConstantValue) and type(a.value) is torch.Size for a in args):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{target.__name__}(torch.Size): a graph node would hold a tuple, "
                          "which it reads as data (NOTE [Legacy constructors of a torch.Size])")
    return args


def _node_of(x: Any) -> Any:
    if isinstance(x, (TensorValue, SymFloatValue, SymNodeValue)):
        return x.node
    if isinstance(x, Value):
        return _python_of(x, _node_of)
    return x


# NOTE [Loops carrying nested tensors]: an op on a strided nested tensor never enters a graph (NOTE [Nested
# tensors stay out of graphs], values/builder.py): it breaks, marked `nested_operand` (below). A loop
# whose body meets one (`for mod in self.layers: output = mod(output)` once nn.TransformerEncoder's fast path
# made `output` nested) broke in every step, and its body's resume function was traced again for each loop
# position (an iterator-position guard: one entry per layer, until the loop was stepped as Python). Such a
# break moves to the loop's GET_ITER (or FOR_ITER, or the resume point inside the body) like a data-dependent
# one, whatever the iterable (python_loops.moved_break, iterates_rows_at): the loop runs as Python once per
# call, its calls through their frame hooks (each layer's forward is captured as its own frame), and the code
# after the loop is captured again. A loop that meets one in some steps only runs as Python too: less of it
# captured, never a different result.
def _python_of(v: Value, leaf: Callable[[Any], Any]) -> Any:
    if isinstance(v, ConstantValue):
        if type(v.value).__module__ == "numpy":  # a NumPy scalar (NOTE [NumPy as torch])
            from .numpy_support import scalar_for_torch
            return scalar_for_torch(v.value)
        from .shapes import concrete  # a SymInt held as a constant (a NumPy shape): specialised, guarded
        return concrete(v.value)
    if isinstance(v, SequenceValue):
        items = [leaf(i) for i in v.items]
        return tuple(items) if issubclass(v.cls, tuple) and not hasattr(v.cls, "_fields") else (
            list(items) if v.cls is list else (tuple.__new__(v.cls, items) if hasattr(v.cls, "_fields") else v.cls(items)))
    if isinstance(v, DictValue):
        return {k: leaf(i) for k, i in v.items.items()}
    if isinstance(v, SliceValue):
        return slice(*(leaf(p) for p in v.parts))
    if v.is_constant():
        return v.as_constant()
    from .numpy_scalars import torch_number  # NOTE [Dynamic NumPy scalars]
    number = torch_number(v)
    if number is not None:
        return leaf(number)
    if getattr(v, "opaque_tensor", None):  # NOTE [Tensor subclasses traced as tensors]
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{v.opaque_tensor}: an op on it runs in Python")
    if isinstance(getattr(v, "obj", None), torch.Tensor) and v.obj.is_nested:  # NOTE [Nested tensors stay out of
        e = Unsupported(BreakKind.UNSUPPORTED_CALL, "an op on a nested tensor runs in Python")  # graphs]
        e.nested_operand = True  # NOTE [Loops carrying nested tensors]
        raise e
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{v.describe()} cannot be passed to a graph op")


def _contains_tensor(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return True
    if isinstance(x, (tuple, list)):
        return any(_contains_tensor(i) for i in x)
    if isinstance(x, dict):
        return any(_contains_tensor(i) for i in x.values())
    return False


def _target_name(target: Any) -> str:
    if isinstance(target, str):
        return f"Tensor.{target}"
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    return f"{module}.{name}" if module else name


# NOTE [Lazy negation and conjugation bits]: `x.conj()` of a complex tensor and `x.conj().imag` are views
# whose elements are negated/conjugated lazily, by a bit on the tensor (`is_conj()`, `is_neg()`), not in
# memory. Fake tensors carry the bits, but nothing guarded them, so an entry traced for a plain tensor
# answered `is_conj()` wrongly for a conjugate view, and a lowered backend that reads the input's memory
# (triton) computed with the un-negated values and wrote un-negated results. Every tensor guard pins the
# bits (only the negation bit for non-complex dtypes, which cannot carry the other), and a graph input
# with either bit set is an unsupported value (a graph break; the tensor is used eagerly).
def _lazy_bits_check(e: str, t: torch.Tensor) -> tuple[str, str, str]:
    if t.is_complex():
        return (f"{e}.is_conj() is {t.is_conj()} and {e}.is_neg() is {t.is_neg()}",
                f"is_conj() {t.is_conj()}, is_neg() {t.is_neg()}", f"({e}.is_conj(), {e}.is_neg())")
    return f"{e}.is_neg() is {t.is_neg()}", f"is_neg() {t.is_neg()}", f"{e}.is_neg()"


# NOTE [Inputs of large graphs]: a graph of 300 conv blocks has 1800 inputs (parameters, buffers) and
# 3000 calls. Each call (OutputGraph.call) compared the version of every input with its last one
# (OutputGraph._check_input_mutation; 3000 x 1800 reads: 30 s of a 215 s cold compile, cProfile) and each
# new input listed every node of the graph to find the input names taken (5 s). A write that bumps an input's version bumps
# the version of the tensor written, which shares the input's counter (it is the input or a view of it)
# and is an argument of the call: a call that changed none of its arguments' versions changed no input's,
# so the inputs are compared only after a call that did, or after an in-place call on an inference tensor
# (it has no version: compared as before). Names come from the graph's own table of placeholders.
def _placeholder(graph: torch.fx.Graph, description: str) -> torch.fx.Node:
    """A graph input named as TorchDynamo names it: the parameter is the source with every run of other
    characters made one `_` (`L['x']` -> `L_x_`), the node that uses it its lower-case form (`l_x_`)."""
    target = re.sub(r"[^0-9a-zA-Z]+", "_", description) or "input"
    if not target[0].isalpha():
        target = f"input_{target}"
    taken = {n.target for n in graph.find_nodes(op="placeholder")}
    base, n = target, 1
    while target in taken:
        target, n = f"{base}_{n}", n + 1
    # inputs found mid-trace still go before every other node (after the earlier inputs), as in any
    # traced graph: the printed code then binds all of them first
    first_op = next((node for node in graph.nodes if node.op != "placeholder"), None)
    if first_op is None:
        return graph.create_node("placeholder", target, name=target.lower())
    with graph.inserting_before(first_op):
        return graph.create_node("placeholder", target, name=target.lower())


# NOTE [Float guards are bitwise]: `==` says -0.0 == 0.0 (yet `math.copysign`, `1 / x` and `atan2`
# tell them apart) and NaN != NaN (a NaN argument would miss its own entry on every call). A float
# guard therefore pins the value bit for bit: NaN by `e != e`, zeros with their sign, any other float
# by `==` (for those equal values have equal bits; NaN payloads are not distinguished). Other constants
# holding a float zero (a tuple, a complex number, a numpy float) compare item by item with the zeros'
# signs (guards/same_values.py).
def _constant_check(e: str, value: Any, names, literal: str) -> str:
    """The guard expression that `e` is the constant `value` (spelled `literal`)."""
    if type(value) is not float:
        return f"{names.name_for(same_constant, 'same_constant')}({literal}, {e})" if has_zero(value) else \
            f"{e} == {literal}"
    if value != value:
        return f"{e} != {e}"
    if value == 0.0:
        copysign = names.name_for(math.copysign, "copysign")
        return f"{e} == 0.0 and {copysign}(1.0, {e}) == {math.copysign(1.0, value)!r}"
    literal = repr(value) if _literal_ok(value) else names.name_for(value, "const")
    return f"{e} == {literal}"


def _literal_ok(value: Any) -> bool:
    if isinstance(value, (int, float, str, bytes)) and type(value) in (int, float, str, bytes):
        return not (isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))))
    if type(value) is tuple:
        return all(_literal_ok(v) for v in value)
    return False


# NOTE [Guard texts run no user code]: a guard's `expected` text (the recompiles log's explanation) was
# `repr(obj)` of the object guarded, made while tracing: a class's own `__repr__` ran on every trace, where
# eager never calls it (a counting `__repr__` read 2 after one call of `f(x) = x * 2, id(r)`; one that raises
# made the frame run eagerly as an internal error), and an nn.Module's repr walked the whole model. Objects
# other than plain constants, functions, classes and modules are described by their type and id.
_PLAIN_REPR = (int, float, complex, str, bytes, bool, type(None), types.FunctionType, types.BuiltinFunctionType,
               types.ModuleType, torch.dtype, torch.device)


def _short(obj: Any, depth: int = 0) -> str:
    if type(obj) is types.ModuleType:  # its repr() may call the module's __getattr__
        text = module_text(obj)
    elif type(obj) in _PLAIN_REPR or is_a(obj, enum.Enum) and type(obj).__repr__ in (enum.Enum.__repr__,
                                                                                    enum.IntEnum.__repr__):
        text = repr(obj)
    elif is_a(obj, type):  # NOTE [Type facts without user code] (guards/plain_reads.py)
        text = type.__repr__(obj)
    elif type(obj) in (tuple, list) and len(obj) <= 8 and depth < 3:  # a list holding itself: depth, not a cycle
        items = ", ".join(_short(item, depth + 1) for item in obj)
        text = f"({items})" if type(obj) is tuple else f"[{items}]"
    else:
        text = f"<{type(obj).__qualname__} object at {id(obj):#x}>"
    return text if len(text) < 60 else text[:57] + "..."


short_text = _short


# NOTE [Unbind along a symbolic length]: `for r in list(x.unbind(0)): s = r.sum().item(); ...` (per-row loops
# of real models: a list of rows, each step breaking on data) made the frame compile once per length: the
# fake unbind of a dimension whose size is symbolic (it changed between calls) returns one tensor per row, so
# the trace specialised the size (a shape-env guard `size == n`) and unrolled the loop, and at the 9th length
# the recompile limit ran the frame eagerly (review revB M1; stock torch.compile: 0 graphs, the frame as
# Python). A loop directly over the tensor already steps in Python (NOTE [Loops over symbolic rows] in
# handlers/jumps.py); `x.unbind(d)` and `torch.unbind(x, d)` along a symbolic size now break instead: the
# graph before is kept, the unbind runs as Python, and the tuple it makes reaches the resume function as a
# sequence of changing length (opaque from its first trace: `split_result`, NOTE [Sequences of changing
# length carried across breaks] in carried_loops.py), so a loop over it, or over a list of it, runs as Python
# with its calls routed through their frame hooks (NOTE [Loops over sequences of changing length] in
# python_loops.py): one entry of each frame for every length. Not taken with fullgraph=True (specialised, as
# stock does) nor in a generator, coroutine or async generator frame (which cannot break: the whole frame
# would run eagerly); a size the shape env folds to a number (0/1, or a dimension marked static) unbinds as
# before. Nor where the result is unpacked at once (`h, c = s.unbind(0)`: the unpack needs that many rows, as
# eager's raises otherwise, so the size is specialised and the graph goes on), nor under dynamic=True: every
# size is symbolic there from the first call, whether or not it ever changes, and `h, c = s.unbind(0)` of a
# dimension that is always 2 broke a frame stock captures whole (review revH M1; stock specialises an unbind
# under dynamic=True too). Under automatic dynamic a size is symbolic only once it changed between calls.
# NOTE [Unbinds whose loops break]: nor at an unbind site (code, instruction) that no trace saw broken in a
# loop over tensors after it (`note_loop_break`, called by every break with such a loop's iterator on the
# frame's stack; its steps tensors, or tuples holding one: enumerate, zip): an RNN unrolled over `x.unbind(0)` with a few lengths, nothing breaking in its loop, keeps
# one whole graph per length, as stock (review revM HIGH-1: from the second length on the loop body ran op by
# op). The first trace of a breaking loop (static, or symbolic before its break was seen) specialises the
# length as before and records the site; from then on the unbind breaks.
_UNBINDS = {"unbind", torch.unbind, torch.Tensor.unbind}
_BREAKING_SITES: set = set()  # (code, instruction index) of unbinds followed by a break inside a loop
_NOT_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _unpacked_at_once(out) -> bool:
    """The instruction after the current call of the innermost frame traced unpacks its result into a fixed
    number of names."""
    stack = getattr(out, "tx_stack", None)
    if not stack:
        return False
    tx = stack[-1]
    insts = tx.program.insts
    return tx.pc < len(insts) and insts[tx.pc].name == "UNPACK_SEQUENCE"  # not `*rest, last =`: any length


def check_split(out, target: Any, fake_args: tuple, fake_kwargs: dict) -> None:
    """Raise the break of NOTE [Unbind along a symbolic length] when `target(*fake_args, **fake_kwargs)`
    unbinds a tensor along a symbolic size and this frame may break there."""
    try:
        if target not in _UNBINDS:
            return
    except TypeError:  # an unhashable target
        return
    flags = getattr(out, "root_flags", None)  # None: a trace of no frame of its own
    if getattr(out, "fullgraph", False) or getattr(out, "dynamic", None) is True or flags is None or \
            flags & _NOT_RESUMABLE:
        return
    tensor = fake_args[0] if fake_args else fake_kwargs.get("input", fake_kwargs.get("self"))
    dim = fake_args[1] if len(fake_args) > 1 else fake_kwargs.get("dim", 0)
    if not isinstance(tensor, torch.Tensor) or type(dim) is not int or not -tensor.dim() <= dim < tensor.dim():
        return
    site = _site(out)
    if site is not None:
        if getattr(out, "unbind_sites", None) is None:
            out.unbind_sites = set()
        out.unbind_sites.add(site)
    size = tensor.shape[dim]
    if not isinstance(size, torch.SymInt) or size.node.maybe_as_int() is not None or _unpacked_at_once(out) \
            or site not in _BREAKING_SITES:
        return
    e = Unsupported(BreakKind.DYNAMIC_CONTROL_FLOW, f"unbind along dimension {dim}, whose size is symbolic: it runs "
                    "as Python instead of specialising the size (NOTE [Unbind along a symbolic length])")
    e.split_result = True
    raise e


def _site(out) -> tuple | None:
    """The unbind call being traced, as (code, instruction index) of the innermost frame traced."""
    stack = getattr(out, "tx_stack", None)
    if not stack:
        return None
    tx = stack[-1]
    return (tx.code, tx.pc)


def note_loop_break(out, stack: list) -> None:
    """NOTE [Unbinds whose loops break]: a break while `stack` holds a for loop's iterator over tensors marks
    the unbinds this trace made as ones whose loops break."""
    from .values import IteratorValue
    sites = getattr(out, "unbind_sites", None)
    if sites and any(isinstance(v, IteratorValue) and any(_has_tensor(i) for i in v.items) for v in stack):
        _BREAKING_SITES.update(sites)


def _has_tensor(item: Any) -> bool:
    """A tensor, or a tuple holding one (a step of enumerate() or zip() over rows)."""
    return isinstance(item, TensorValue) or isinstance(item, SequenceValue) and \
        any(isinstance(i, TensorValue) for i in item.items)


def checked_call(out, kind: str, target: Any, args: tuple, kwargs: dict) -> Value | None:
    """The value of a call recorded with a run-time check, or None for a call recorded as usual: the user's own
    `torch._assert_async` (NOTE [Speculated checks]); `torch.istft` (NOTE [istft's window check])."""
    if kind == "call_function" and target is torch._assert_async:  # returns None: kept as a check, not dropped
        from .speculated_checks import user_check  # as a constant result
        return user_check(out, args, kwargs)
    if (kind == "call_function" and target is torch.istft) or (kind == "call_method" and target == "istft"):
        from .istft_check import istft_call
        return istft_call(out, kind, target, args, kwargs)
    return None
