"""FX graph building with fake-tensor propagation (OutputGraph).

The OutputGraph owns what one traced frame produces: the `torch.fx.Graph`, the graph inputs (each a
real tensor reached through a Source, deduplicated by source and by identity), the guards, and the fake
tensor mode. Every tensor operation runs once on fake tensors (metadata only, no real kernels) to learn
its result's metadata; the op is then recorded as a node.

NOTE [Input mutation]: after every op the version counters of the inputs' fake tensors are compared
with their values before the op; an in-place change of an input (directly, through a view or its `.data`:
data_alias.py) stays in the graph, and backends write it back (OutputGraph._check_input_mutation).
"""
from __future__ import annotations

import contextlib
import operator
from typing import Any, Callable

import torch
import torch.fx
from torch.utils._pytree import tree_leaves, tree_map

from .. import fake_modes, grad_mode
from ..guards import COST_CONSTANT, COST_ID, COST_TENSOR, COST_TYPE, Guard
from ..guards.plain_reads import plain_name
from .default_dtype_scalars import cast_ints_for_default
from .data_alias import check_data_outputs, check_data_writes, check_stored_data
from .dropout_identity import dropout_identity
from .failing_ops import check_rerun_of_outside_code
from .fake_failures import internal_break
from .breaks import BreakKind, Unsupported, UserException
from .graph_calls import (_SYM_SIZES_REFUSED, _check_no_function_args,
                          _check_overlapping_write, _check_unbumped_write, _contains_tensor, _drop_unused_sizes,
                          _fake_of, _constant_check, _has_sym as _has_symbolic, _inplace, _is_none, _is_value, _lazy_bits_check, _literal_ok, _node_of, _placeholder,
                          mark_symbolic_error, _python_type_as_dtype, _refuses_sym_bool, _refuses_sym_sizes, _short, _specialise_sym_bools,
                          _target_name, _version, bump_foreach_writes, check_split, checked_call, checked_constructor, eager_bumps)
from .function_reads import guard_reads, is_whole_torch_function
from .input_aliases import alias_guard, real_sharers, written_candidates
from .kernel_checks import check_arithmetic
from .kernel_ints import static_kernel_ints
from .mixed_dtype import check_mixed_norm
from .parametrized_classes import is_parametrized_class, type_check as parametrized_type_check
from .side_effects import SideEffects
from .numpy_scalars import check_data_arguments
from .op_warnings import mark_node, note_folded, run_held  # NOTE [Warnings of graph ops]
from .sources import NameTable, Source
from .tensor_subclasses import check_input_class, metadata_expr, result_class, settle_result
from .unread_inputs import watch as watch_unread
from .values import ConstantValue, SequenceValue, SymFloatValue, SymNodeValue, TensorValue, TupleValue, Value


def _fake_tensor():
    """torch._subclasses.fake_tensor, imported on the first trace: a process whose frames all come from the frame
    cache never pays for it (about 20 ms; FakeTensorMode's first use also imports torch._dynamo.config, about 1 s)."""
    from torch._subclasses import fake_tensor
    return fake_tensor


_BUFFER = getattr(torch.nn, "Buffer", None)


def _specialise_operands(syms: list, int_roots: tuple) -> None:
    for sym in syms:
        sym.specialise()
    for root in int_roots:
        root.as_constant()


class GraphInput:
    __slots__ = ("source", "tensor", "value", "version", "writes", "layout")

    def __init__(self, source: Source, tensor: Any, value: Value) -> None:
        self.source = source
        self.tensor = tensor  # a tensor, or a Python float (NOTE [Dynamic floats])
        self.value = value
        self.version = _version(value.fake) if isinstance(value, TensorValue) else None
        # ops that bumped its version counter, one bump each as in eager (one fake op may bump the fake's counter
        # several times: SGD's `p.add_(g, alpha=-lr)` with lr a float graph input bumped it 3 times): NOTE
        # [Version counts of written inputs] in input_versions.py; inference tensors have no counter
        self.writes = 0
        self.layout: tuple | None = None  # a symbolic tensor's sizes, strides, offset as it arrived (shapes.py)


# Errors only a fake (or symbolic) tensor raises: a C++ kernel that reads the data of an input, such as
# the packed-sequence LSTM/GRU reading `batch_sizes`. Eager runs such a call, so it is a graph break.
_FAKE_ONLY_ERRORS = ("but its data is not allocated yet", "on tensor with symbolic sizes/strides")


# NOTE [Ops without a fake kernel]: for an operator with neither a fake impl nor a Meta kernel
# (`aten::_nested_tensor_from_mask`, which nn.TransformerEncoder's eval fast path calls), FakeTensorMode raises
# NotImplementedError and then tries running the kernel on meta tensors as a fallback; when that fallback fails too, the
# error it raises (for that op: "NestedTensorImpl doesn't support sizes") says nothing about the user's inputs, and
# eager runs the op fine. Reading it as the user's exception made the whole frame run eagerly; it is a graph break at
# the op instead, recognised by the NotImplementedError it was raised while handling.
def _no_fake_kernel(error: BaseException) -> bool:
    if "There was no fake impl registered for" in str(error):  # a torch.library.custom_op without register_fake
        return True
    seen = error.__context__
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, NotImplementedError) and "no fake impl or Meta kernel" in str(seen):
            return True
        seen = seen.__context__
    return False


# NOTE [Powers of negative numbers in graph code]
# torch.fx prints operator.pow as `{} ** {}` with the base's repr, so `(-2.0) ** e` became the graph code
# `-2.0 ** l_e_`, which Python reads as -(2.0 ** e): -1024 for e = 10 (eager 1024) and -5.66 for e = 2.5
# (eager NaN), on every backend. A pow whose base is a number written with a minus sign is recorded as a
# call of `number_power`, which fx prints as a call (tests/backends/test_integer_and_negative_powers.py).
def number_power(base, exponent):
    return base ** exponent


def _signed_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and repr(value).startswith("-")


class OutputGraph:
    def __init__(self) -> None:
        from .pinned_targets import new_graph  # NOTE [Graph targets pinned by identity]
        self.graph = new_graph()
        from .shapes import new_shape_env  # NOTE [Symbolic shapes]
        self.fake_mode = _fake_tensor().FakeTensorMode(shape_env=new_shape_env(self))
        fake_modes.register(self.fake_mode)  # NOTE [Traces leave no weak references]
        self.dynamic: bool | None = None  # compile(dynamic=...): True all dims, False none, None automatic
        self.dynamic_dims: dict[str, frozenset[int]] = {}  # dims whose size changed (NOTE [Automatic dynamic])
        self.dynamic_ints: frozenset[str] = frozenset()  # int arguments made symbolic (NOTE [Dynamic ints])
        self.fullgraph = False  # compile(fullgraph=True): no break taken by choice (NOTE [Loops over symbolic ranges])
        self.inputs: list[GraphInput] = []
        self._by_source: dict[Source, Value] = {}
        self._by_id: dict[int, GraphInput] = {}
        self._by_object: dict[int, tuple[Any, Source, Value]] = {}  # NOTE [Objects by identity]
        self.guards: list[Guard] = []
        self.names = NameTable("___c")
        self.tx_stack: list = []  # active translators, innermost last (for provenance)
        self.grad_enabled = torch._C.is_grad_enabled()
        self.entry_grad_enabled = self.grad_enabled
        self.inference_mode = torch._C.is_inference_mode_enabled()  # guarded at entry (convert._global_guards)
        self.autocast_stack: list[tuple[str, torch.dtype, bool, bool | None]] = []  # in force while tracing
        self.ambient_autocast = 0  # how many of them the caller entered (they are guarded, not recorded)
        self.dynamic_floats: frozenset[str] = frozenset()  # float arguments made graph inputs (NOTE [Dynamic floats])
        self.computed_floats: list = []  # (a root GraphInput, exact text, SymFloat): NOTE [Ints of dynamic floats]
        self.open_regions: list[torch.fx.Node] = []  # _enter_autocast/_enter_inference_mode nodes not exited yet
        self.op_count = 0
        self.steps = 0  # instructions traced, across inlined frames
        self.side_effects = SideEffects(self._by_object)  # NOTE [Stores under a dict the trace holds]
        self.side_effects.graph = self.graph  # NOTE [Effects before a failing graph]
        self.mutated_inputs = False
        self.default_device: torch.device | None = None  # set under a DeviceContext (NOTE [Default device mode])
        self.mutated_entries: list = []  # the inputs mutated in place (NOTE [Input mutation])
        self.extra_bumps: dict = {}  # NOTE [Version counts of graph outputs] (input_versions.py)
        self.output_versions: tuple = ()
        self.numpy_shared: list = []  # fakes of tensors turned into arrays (NOTE [NumPy writes into tensors])
        self.backend_outputs: list[str] = []
        self.inlined: dict[Any, None] = {}  # real functions inlined while tracing (frame cache checks them)
        self.inlined_codes: set = set()  # code objects of every function inlined (framejit.disable drops the entry)

    def location(self) -> str:
        """The user's current `file:line: source`, innermost inlined frame first."""
        if not self.tx_stack:
            return ""
        frame = self.tx_stack[-1].frame_info()
        return f"{frame.filename}:{frame.lineno}: {frame.line}"

    def stack_trace(self) -> str:
        """The user's stack for a node's meta, outermost first, in `traceback`'s format (what FX's
        print_readable parses and TorchDynamo records)."""
        if not self.tx_stack:
            return ""
        return "".join(f'  File "{f.filename}", line {f.lineno}, in {f.function}\n    {f.line}\n'
                       for f in self.tx_stack[-1].user_stack())

    # ---- guards -------------------------------------------------------------------------------
    def add_guard(self, kind: str, expr: str, source: Source | None, *, expected: str = "",
                  actual: str | None = None, cost: int = COST_CONSTANT) -> None:
        where = source.describe() if source is not None else "global state"
        self.guards.append(Guard(expr, kind, where, self.location(), expected, actual, cost))

    def name_of(self, obj: Any, hint: str = "") -> str:
        return self.names.name_for(obj, hint)

    def guard_type(self, source: Source, cls: type) -> None:
        e = source.expr(self.names)
        check = f"___type({e}) is {self.name_of(cls, cls.__name__)}"
        if is_parametrized_class(cls):  # NOTE [Parametrized classes alike]
            check = parametrized_type_check(self, f"___type({e})", cls)
        self.add_guard("TYPE_MATCH", check, source, expected=cls.__qualname__, actual=f"___type({e})", cost=COST_TYPE)

    def guard_id(self, source: Source, obj: Any) -> None:
        e = source.expr(self.names)
        hint = plain_name(obj, type(obj).__name__)  # NOTE [Type facts without user code]
        self.add_guard("ID_MATCH", f"{e} is {self.name_of(obj, hint if isinstance(hint, str) else '')}",
                       source, expected=f"the object {_short(obj)}", actual=e, cost=COST_ID)

    def guard_constant(self, source: Source, value: Any) -> None:
        e = source.expr(self.names)
        if value is None or isinstance(value, bool):
            self.add_guard("CONSTANT_MATCH", f"{e} is {value!r}", source, expected=repr(value),
                           actual=e, cost=COST_ID)
            return
        self.guard_type(source, type(value))
        literal = repr(value) if _literal_ok(value) else self.name_of(value, "const")
        check = _constant_check(e, value, self.names, literal)
        self.add_guard("CONSTANT_MATCH", check, source, expected=repr(value), actual=e)

    def guard_tensor(self, source: Source, t: torch.Tensor, fake: torch.Tensor | None = None) -> None:
        """One combined guard per tensor: type, dtype, device, shape, strides, requires_grad. With a
        symbolic `fake`, only its static sizes and strides (shapes.shape_guards checks the others)."""
        te, e, rg = metadata_expr(self, t, source.expr(self.names))  # NOTE [Guards read subclass tensors as Tensors]
        shape_check = (f"{e}.shape == {tuple(t.shape)!r}", str(tuple(t.shape)))
        stride_check = f"{e}.stride() == {t.stride()!r}"
        offset_check = f"{e}.storage_offset() == {t.storage_offset()}"
        if fake is not None:
            # a symbolic offset (a view into a buffer of varying size) is checked by the shape env's guards
            offset = fake.storage_offset()
            offset_check = "True" if isinstance(offset, torch.SymInt) else f"{e}.storage_offset() == {offset}"
            shape_check = (" and ".join([f"{e}.dim() == {t.dim()}"] + [
                f"{e}.size({d}) == {s}" for d, s in enumerate(fake.shape) if not isinstance(s, torch.SymInt)]),
                str(tuple(fake.shape)))
            stride_check = " and ".join([f"{e}.stride({d}) == {s}" for d, s in enumerate(fake.stride())
                                         if not isinstance(s, torch.SymInt)]) or "True"
        checks = [
            ("TENSOR_TYPE", f"___type({te}) is {self.name_of(type(t), type(t).__name__)}",
             type(t).__name__, f"___type({te})"),
            ("TENSOR_DTYPE", f"{e}.dtype is {self.name_of(t.dtype, str(t.dtype).split('.')[-1])}",
             str(t.dtype), f"{e}.dtype"),
            ("TENSOR_DEVICE", self._device_check(e, t.device), str(t.device), f"{e}.device"),
            ("TENSOR_SHAPE", *shape_check, f"tuple({e}.shape)"),
            ("TENSOR_STRIDE", stride_check, str(t.stride()), f"{e}.stride()"),
            ("TENSOR_STORAGE_OFFSET", offset_check, str(t.storage_offset()), f"{e}.storage_offset()"),
            ("TENSOR_REQUIRES_GRAD", f"{rg} is {t.requires_grad}", str(t.requires_grad), rg),
            ("TENSOR_LAZY_BITS", *_lazy_bits_check(e, t)),
        ]
        where, origin = source.describe(), self.location()
        parts = [Guard(expr, kind, where, origin, expected, actual, COST_TENSOR)
                 for kind, expr, expected, actual in checks]
        self.guards.append(Guard.combine("TENSOR_MATCH", parts))

    def _device_check(self, e: str, device: torch.device) -> str:
        # NOTE [Cheap device checks]: a new torch.device object is made on every `.device` read; `is_cpu` and
        # `get_device()` (the CUDA index, -1 on CPU) are plain attribute reads and pin CPU and CUDA devices exactly.
        if device.type == "cpu":
            return f"{e}.is_cpu"
        if device.type == "cuda":
            return f"{e}.is_cuda and {e}.get_device() == {device.index or 0}"
        return f"{e}.device == {self.name_of(device, 'dev')}"

    # ---- inputs -------------------------------------------------------------------------------
    def cached(self, source: Source) -> Value | None:
        return self._by_source.get(source)

    def remember(self, source: Source, value: Value) -> Value:
        self._by_source[source] = value
        return value

    # NOTE [Objects by identity]: a mutable object (list, dict, set, user object, module) reached through
    # two sources (passed twice, held by an argument and by an attribute) is one abstract value, so a
    # mutation through one path is seen through the other and replayed once; a guard pins that the two
    # sources alias. When the trace mutates anything, a guard also pins that the distinct objects stay
    # distinct (a later call with aliased arguments would see the mutations differently).
    def alias_of(self, obj: Any, source: Source) -> Value | None:
        seen = self._by_object.get(id(obj))
        if seen is None or seen[0] is not obj:
            return None
        self.add_guard("ALIAS", f"{source.expr(self.names)} is {seen[1].expr(self.names)}", source,
                       expected=f"the same object as {seen[1].describe()}", cost=COST_ID)
        return seen[2]

    def remember_object(self, obj: Any, source: Source, value: Value) -> Value:
        self._by_object.setdefault(id(obj), (obj, source, value))
        return value

    def distinct_objects_guard(self) -> None:
        """Called once the trace is done (NOTE [Objects by identity])."""
        from .namespace_owners import aliasing_exprs, module_tables_guard  # NOTE [Instance dicts as dicts]
        tables = module_tables_guard(self) if self.side_effects else None  # NOTE [Module tables beside the ...]
        if tables is not None:
            self.add_guard("NO_ALIASING", tables, None, expected="no module table is one of the trace's dicts",
                           cost=COST_TENSOR + 1)
        exprs = aliasing_exprs(self) if self.side_effects else []
        if len(exprs) < 2:
            return
        self.add_guard("NO_ALIASING", f"___distinct_objects({', '.join(exprs)})", None,
                       expected="distinct objects (the frame mutates one of them)", cost=COST_TENSOR + 1)

    def add_input(self, tensor: torch.Tensor, source: Source) -> TensorValue:
        if source in self._by_source:
            return self._by_source[source]
        same = self._by_id.get(id(tensor))
        if same is not None:
            # The same tensor reached through two sources: one graph input, and a guard that they alias.
            self.add_guard("ALIAS", f"{source.expr(self.names)} is {same.source.expr(self.names)}", source,
                           expected=f"the same tensor as {same.source.describe()}", cost=COST_ID)
            return self.remember(source, same.value)
        check_input_class(self, tensor, source)  # NOTE [Subclass tensors guarded by type] (tensor_subclasses.py)
        if tensor.is_neg() or tensor.is_conj():  # NOTE [Lazy negation and conjugation bits]
            self.guard_tensor(source, tensor)
            raise Unsupported(BreakKind.UNSUPPORTED_VALUE,
                              f"tensor with a lazy {'conjugation' if tensor.is_conj() else 'negation'} bit "
                              f"at {source.describe()} (resolve_conj()/resolve_neg() it first)")
        from .shapes import arrived_layout, dynamic_dims, is_symbolic, offset_view_fake, symbolic_fake  # NOTE [Symbolic shapes]
        dims = dynamic_dims(self, tensor, source.describe()) if tensor.dim() and not tensor.is_sparse else {}
        fake = symbolic_fake(self, tensor, source.expr(self.names), dims) if dims else None
        if not tensor.is_sparse:  # NOTE [Changing offsets of scalar views], NOTE [Changing offsets of rows]
            fake = offset_view_fake(self, tensor, source, fake)
        symbolic = fake is not None and is_symbolic(fake)
        if not symbolic:
            fake = self.fake_mode.from_tensor(tensor, static_shapes=True)
            self.guard_tensor(source, tensor)
        else:
            self.guard_tensor(source, tensor, fake)
        node = _placeholder(self.graph, source.describe())
        node.meta["val"] = fake
        node.meta["source"] = source.describe()
        value = TensorValue(node, fake, source, type(tensor))
        entry = GraphInput(source, tensor, value)
        watch_unread(self, value, tensor, symbolic)  # NOTE [Tensors passed through unread]
        if symbolic:  # NOTE [Guards describe inputs as they arrived] (shapes.py)
            entry.layout = arrived_layout(fake)
        self.inputs.append(entry)
        self._by_id[id(tensor)] = entry
        return self.remember(source, value)

    def add_float_input(self, value: float, source: Source) -> "SymFloatValue":
        """A float argument as a graph input (NOTE [Dynamic floats]): guarded by type only."""
        self.guard_type(source, float)
        node = _placeholder(self.graph, source.describe())
        node.meta["val"] = value
        node.meta["source"] = source.describe()
        node.meta["dynamic_float"] = True  # backends/state.py
        from .shapes import input_float_symbol  # NOTE [Float relations]
        sym = SymFloatValue(self, node, value, (), source, input_float_symbol(self, value, source))
        sym.roots = (sym,)
        self.inputs.append(GraphInput(source, value, sym))
        return self.remember(source, sym)

    def add_int_input(self, value: int, source: Source) -> Value:
        """An int argument as a graph input (NOTE [Dynamic ints]): a symbol of the ShapeEnv, guarded by
        type and by the relations the trace relies on; 0 and 1 stay specialised."""
        from .shapes import symbolic_int
        sym = symbolic_int(self, value, source.expr(self.names))
        if not isinstance(sym, torch.SymInt):
            self.guard_constant(source, value)
            return ConstantValue(value, source)
        self.guard_type(source, int)
        node = _placeholder(self.graph, source.describe())
        node.meta["val"] = sym
        node.meta["source"] = source.describe()
        result = SymNodeValue(node, sym, source)
        self.inputs.append(GraphInput(source, value, result))
        return self.remember(source, result)

    def sym_op(self, fn: Callable, args: tuple) -> Value:
        """`fn(*args)` (arithmetic, a comparison) with a symbolic size operand: a graph node and its SymInt
        or SymBool, or a constant when the env knows the result (NOTE [Symbolic shapes])."""
        from .shapes import divisor_checked, sym_or_int
        examples = [a.sym if isinstance(a, SymNodeValue) else a.as_constant() for a in args]
        try:
            result = sym_or_int(fn(*divisor_checked(fn, examples)))
        except Exception as e:  # the user's error for these values (e.g. a division by zero)
            raise UserException(e) from None
        if not isinstance(result, (torch.SymInt, torch.SymBool)):
            return ConstantValue(result)
        node = self.graph.call_function(fn, tuple(_node_of(a) for a in args))
        node.meta["val"] = result
        node.meta["stack_trace"] = self.stack_trace()
        return SymNodeValue(node, result)

    def float_op(self, fn: Callable, args: tuple) -> Value:
        """Float arithmetic with a dynamic float operand: a graph node, or a constant when the result is
        not a float (then the operands are specialised). An operand may be a plain expression of symbolic
        ints (NOTE [Symbolic ints inside dynamic floats])."""
        from .float_parts import example_of, operand_int_roots
        examples = [example_of(a) for a in args]
        syms = [a for a in args if isinstance(a, SymFloatValue)]
        int_roots = operand_int_roots(self, args)
        try:
            result = fn(*examples)
        except Exception as e:  # the user's error for this value: specialise, eager raises it for real
            _specialise_operands(syms, int_roots)
            raise UserException(e) from None
        if type(result) is not float:
            _specialise_operands(syms, int_roots)
            return ConstantValue(result)
        node = self.graph.call_function(fn, tuple(_node_of(a) for a in args))
        node.meta["val"] = result
        node.meta["stack_trace"] = self.stack_trace()
        roots = tuple(dict.fromkeys(r for sym in syms for r in sym.roots))
        value = SymFloatValue(self, node, result, roots)
        value.int_roots = int_roots
        return value

    def float_compare(self, fn: Callable, a: Value, b: Value) -> Value | None:
        """A comparison of float inputs (with symbols) and numbers, kept as a relation (NOTE [Float
        relations]); None when an operand is computed (the env may rewrite its arithmetic, which would round
        differently from the code's) or has no symbol."""
        operands = []
        for v in (a, b):
            if isinstance(v, SymFloatValue) and v.sym is not None and v.roots == (v,):
                operands.append(v.sym)
            elif isinstance(v, ConstantValue) and type(v.value) in (int, float):
                operands.append(v.value)
            else:
                return None
        result = fn(*operands)
        if not isinstance(result, torch.SymBool):
            return ConstantValue(result)  # the env knows it (from relations already guarded)
        node = self.graph.call_function(fn, (_node_of(a), _node_of(b)))
        node.meta["val"] = result
        node.meta["stack_trace"] = self.stack_trace()
        return SymNodeValue(node, result)

    # ---- operations ---------------------------------------------------------------------------
    def call(self, kind: str, target: Any, args: tuple, kwargs: dict) -> Value:
        """Record `target(*args, **kwargs)` (kind call_function) or `args[0].target(...)` (call_method)."""
        args, kwargs = self._checked_call_args(kind, target, args, kwargs)
        args, kwargs = static_kernel_ints(kind, target, args, kwargs)  # NOTE [Ints that shape a kernel stay static]
        subclass = result_class(kind, target, args, kwargs, self)  # NOTE [Tensor subclasses traced as tensors]
        check_data_arguments(kind, target, args, kwargs)  # NOTE [Dynamic NumPy scalars]
        same = dropout_identity(kind, target, args, kwargs)  # NOTE [Dropouts that return their input]
        if getattr(self, "getitem_to_index", 0):
            from .getitem_mode import check_call  # NOTE [Breaks inside getitem-to-index blocks]
            check_call(self, kind, target, args)
        checked = checked_call(self, kind, target, args, kwargs)  # NOTE [Speculated checks], [istft's window check]
        if checked is not None:
            return checked
        if self.default_device is not None and kind == "call_function":
            from .default_device import with_device  # NOTE [Default device mode]
            kwargs = with_device(self.default_device, target, kwargs)
        fake_args, fake_kwargs = tree_map(_fake_of, (args, kwargs), is_leaf=_is_value)
        fakes = [t for t in tree_leaves((fake_args, fake_kwargs)) if isinstance(t, torch.Tensor)]
        versions = [_version(t) for t in fakes]
        check_stored_data(self, fakes)  # NOTE [Stores to the .data of inputs]
        _check_overlapping_write(target, fake_args, fake_kwargs)
        check_mixed_norm(target, fake_args, fake_kwargs)  # NOTE [Mixed dtypes of CPU norms]
        check_split(self, target, fake_args, fake_kwargs)  # NOTE [Unbind along a symbolic length]
        try:
            result = self._run_fake(kind, target, fake_args, fake_kwargs)
        except (Unsupported, UserException) as e:
            mark_symbolic_error(e, (args, kwargs), fakes)  # NOTE [Errors of ops on symbolic values]
            if isinstance(e, UserException) and _refuses_sym_bool(e, args, kwargs):
                args, kwargs = _specialise_sym_bools((args, kwargs))  # NOTE [SymBool arguments of ops]
                return self.call(kind, target, args, kwargs)
            if _refuses_sym_sizes(e) and _is_none(kwargs.get("generator")):  # NOTE [Symbolic sizes an op refuses]
                return self.call(kind, target, args, {k: v for k, v in kwargs.items() if k != "generator"})
            args, result = self._after_failed_fake_call(e, kind, target, args, kwargs, fake_args, fake_kwargs)
        bump_foreach_writes(target, fake_args, fake_kwargs, fakes, versions)  # NOTE [Foreach writes bump their fakes]
        if _has_symbolic((args, kwargs)):
            written = [t for t, v in zip(fakes, versions) if _version(t) != v]
            _forget_constants(result, written, self.graph)  # NOTE [Dynamic floats fold into no constant]
        check_arithmetic(kind, target, args, kwargs)  # NOTE [Arithmetic checks of eager kernels]
        mutated = any(_version(t) != v for t, v in zip(fakes, versions)) or (
            result is None and None in versions)  # an inference tensor has no version: assume an effect
        if mutated or None in versions and _inplace(target):  # NOTE [Inputs of large graphs] in graph_calls.py
            self._check_input_mutation(target, fakes)
        if mutated:
            if self.__dict__.get("hooked_fakes"):
                from .tensor_hooks import check_hooked_unchanged  # NOTE [Tensor hooks registered after the graph]
                check_hooked_unchanged(self)
            self.side_effects.bump()  # NOTE [Eager generators] in translator.py
            from .input_versions import note_bumps
            note_bumps(self, fakes, versions, target)  # NOTE [Version counts of graph outputs]
        from .shapes import has_sym, sym_or_int
        if not mutated and result is None:
            _check_unbumped_write(target, mutated)  # NOTE [Writes that bump no version]
        if not mutated and not _contains_tensor(result):
            if not has_sym(result) or not has_sym(sym_or_int(result)):
                return self._wrap_constant_result(target, sym_or_int(result))
        value = self._record_node(kind, target, args, kwargs, result, mutated)
        return settle_result(value, subclass, mutated, result, (kind, target, args, kwargs), self.grad_enabled) if same is None else same

    def _record_node(self, kind: str, target: Any, args: tuple, kwargs: dict, result: Any, mutated: bool) -> Value:
        """The graph node of a call whose fake run gave `result` (`mutated`: it bumped a version), as a Value."""
        from .handler_reruns import note_op  # NOTE [Failing graphs inside handlers]
        note_op(self, target, args, kwargs, result)
        node_args, node_kwargs = tree_map(_node_of, (args, kwargs), is_leaf=_is_value)
        _check_no_function_args(target, (node_args, node_kwargs))
        if kind == "call_method" or (getattr(target, "__module__", None) or "").startswith("torch"):
            node_args, node_kwargs = tree_map(_python_type_as_dtype, (node_args, node_kwargs))
        if kind == "call_function" and target in (operator.pow, operator.ipow) and _signed_number(node_args[0]):
            target = number_power  # NOTE [Powers of negative numbers in graph code]
        node = self.graph.create_node(kind, target, node_args, node_kwargs)
        if kind == "call_function" and is_whole_torch_function(target):
            guard_reads(self, target)  # NOTE [Names read by whole torch functions]
        node.meta.update(val=result, stack_trace=self.stack_trace())
        mark_node(self, node, kind, target)  # NOTE [Warnings of graph ops]
        check_rerun_of_outside_code(self, node)  # NOTE [Outside code before a failing op] in failing_ops.py
        self.op_count += 1
        if result is None:
            return ConstantValue(None)  # an in-place op kept for its effect (e.g. operator.setitem)
        value = self.wrap_result(node, result)
        if mutated and isinstance(value, TensorValue):  # NOTE [Parameters made while tracing]: `p.mul_(2)`
            for arg in [*args, *kwargs.values()]:  # returns `p` itself, a Parameter when `p` is one
                if isinstance(arg, TensorValue) and arg.fake is result:
                    value.cls = arg.cls
                    break
        return value

    def _checked_call_args(self, kind: str, target: Any, args: tuple, kwargs: dict) -> tuple:
        """The call's (args, kwargs) after the checks made before it is recorded (symbolic floats made graph
        values, narrow int conversions, speculated checks); raises the break for calls that must run in Python."""
        if self.__dict__.get("default_dtype") is not None:  # NOTE [Comparisons under a default dtype set inside]
            args = cast_ints_for_default(self, kind, target, args, kwargs)
        if any(isinstance(v, SymFloatValue) for v in tree_leaves((args, kwargs), is_leaf=_is_value)):
            args, kwargs = self._float_args(kind, target, args, kwargs)
        from .scalar_ranges import check_converted_ints  # NOTE [Scalars converted to a narrow dtype]
        check_converted_ints(kind, target, args, kwargs)
        if self.__dict__.get("speculated_checks"):
            from .speculated_checks import check_after_speculation  # NOTE [Speculated checks]
            check_after_speculation(self, kind, target, args, kwargs)
        if target is _BUFFER and target is not None:  # NOTE [Tensors marked as buffers or parameters] (builtins.py):
            # nn.Buffer(t) marks a plain Tensor with attributes its traced value lacked: made by Python at a break
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, "torch.nn.Buffer marks its tensor with Python attributes")
        return checked_constructor(target, args), kwargs  # NOTE [Legacy constructors of a torch.Size]

    def _after_failed_fake_call(self, e: Exception, kind: str, target: Any, args: tuple, kwargs: dict,
                                fake_args: tuple, fake_kwargs: dict) -> tuple:
        """(args, fake result) of a call whose fake run raised `e`, where NOTE [Packed sequences] or NOTE
        [Scalar arguments given as tensors] can still record it; otherwise `e` is raised again."""
        from .scalar_args import SCALAR_LIST_META_ERROR, scalar_probe
        data_dependent = isinstance(e, Unsupported) and e.graph_break.kind is BreakKind.DATA_DEPENDENT
        packed = self._packed_sequence_call(kind, target, args, kwargs, fake_args) if data_dependent else None
        if packed is None and data_dependent:
            from .tensor_ints import retry_with_ints  # NOTE [Ints of tensors computed from sizes]
            packed = retry_with_ints(self, kind, target, args, kwargs)
        if packed is not None:
            return packed
        probe = scalar_probe(kind, target, fake_args, fake_kwargs)
        if probe is None or (not data_dependent if isinstance(e, Unsupported)
                             else SCALAR_LIST_META_ERROR not in str(e.exc)):
            raise e
        return args, self._run_fake(kind, target, *probe)

    def _packed_sequence_call(self, kind: str, target: Any, args: tuple, kwargs: dict, fake_args: tuple):
        """`(args, fake result)` of a data-dependent call that NOTE [Packed sequences] captures (sizes read
        from an input's element, packed RNN kernels), or None; a failed retry leaves the break as it was."""
        from . import packed_sequences
        sized = packed_sequences.size_args(self, kind, target, args)
        try:
            if sized is not None:
                fake_sized = tree_map(_fake_of, sized, is_leaf=_is_value)
                return sized, self._run_fake(kind, target, fake_sized, tree_map(_fake_of, kwargs, is_leaf=_is_value))
            rule = packed_sequences.fake_rule(self, kind, target, args, kwargs, fake_args)
            if rule is not None:
                return args, self._run_fake("call_function", rule, fake_args, {})
        except (Unsupported, UserException):
            return None
        return None

    def _float_args(self, kind: str, target: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Dynamic floats stay graph inputs of an op only if its result's shapes, dtypes and Python values
        do not depend on them (`torch.arange(0, t)`, `interpolate(scale_factor=t)` do): the op is run on
        fake tensors with other float values to see. Otherwise they are specialised here."""
        def probe(scale):
            def leaf(v):
                return v.example * scale + 0.37 if isinstance(v, SymFloatValue) else _fake_of(v)
            fake_args, fake_kwargs = tree_map(leaf, (args, kwargs), is_leaf=_is_value)
            out = self._run_fake(kind, target, fake_args, fake_kwargs)
            return [(tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else x for x in tree_leaves(out)]
        try:
            same = probe(1.0) == probe(1.7)
        except (Unsupported, UserException):
            same = False
        if same:
            return args, kwargs
        for v in tree_leaves((args, kwargs), is_leaf=_is_value):
            if isinstance(v, SymFloatValue):
                v.specialise()
        return tree_map(lambda v: ConstantValue(v.example) if isinstance(v, SymFloatValue) else v, (args, kwargs),
                        is_leaf=_is_value)

    def set_grad_enabled(self, mode: bool, always: bool = False) -> None:
        """Change grad mode at this point of the graph (and in the tracer's view of it). A context manager
        records a node only where the mode changes; a raw `torch._C._set_grad_enabled(b)` call (`always`)
        records one where eager makes the call (NOTE [Grad-mode nodes])."""
        from .reentrant_checkpoint import check_grad_read  # NOTE [Reentrant checkpoint in the graph]
        check_grad_read(self, "a grad-mode switch")
        self.effects_recorded = getattr(self, "effects_recorded", 0) + 1  # NOTE [Torch state across yields]
        if mode != self.grad_enabled or always:
            self.record_effect(torch._C._set_grad_enabled, (mode,))
            self.grad_enabled = mode

    def record_effect(self, target: Any, args: tuple) -> torch.fx.Node:
        """A node kept for its effect on global state (grad mode, autocast); returns the node."""
        from .handler_reruns import note_effect  # NOTE [Failing graphs inside handlers]
        note_effect(self, target)
        node = self.graph.call_function(target, args)
        node.meta["effect"] = True
        node.meta["stack_trace"] = self.stack_trace()
        self.effects_recorded = getattr(self, "effects_recorded", 0) + 1  # NOTE [Torch state across yields]
        return node

    def _run_fake(self, kind: str, target: Any, args: tuple, kwargs: dict) -> Any:
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(self.fake_mode)
                from .shapes import has_symbols
                if has_symbols(self.fake_mode.shape_env):  # composite ops (gru_cell, ...) decompose with
                    from torch._dispatch.python import enable_python_dispatcher  # SymInts, not `int(size)`
                    stack.enter_context(enable_python_dispatcher())
                dtype = self.__dict__.get("default_dtype")  # NOTE [Default dtype changes]
                if dtype is not None and dtype is not torch._C.get_default_dtype():
                    stack.callback(torch.set_default_dtype, torch._C.get_default_dtype())
                    torch.set_default_dtype(dtype)
                if self.inference_mode != torch._C.is_inference_mode_enabled():
                    stack.enter_context(torch.inference_mode(self.inference_mode))
                stack.enter_context(grad_mode.grad_mode(self.grad_enabled))
                for device_type, dtype, enabled, cache in self.autocast_stack:
                    stack.enter_context(torch.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache))
                if kind == "call_method":
                    return run_held(self, target, lambda: getattr(args[0], target)(*args[1:], **kwargs), kwargs)
                run = target
                if not kwargs:
                    from .packed_sequences import padded_rnn_rule
                    run = padded_rnn_rule(target, args, self) or target  # NOTE [Padded RNN kernels with symbolic lengths]
                return self._fake_meta(run_held(self, target, lambda: run(*args, **kwargs), kwargs))
        except (_fake_tensor().DataDependentOutputException, _fake_tensor().DynamicOutputShapeException) as e:
            from .carried_loops import data_break  # NOTE [Results shaped by data are dynamic in resume functions]
            raise data_break(_target_name(target), e) from None
        except _fake_tensor().UnsupportedOperatorException as e:
            raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{_target_name(target)}: no fake-tensor rule for {e}") from None
        except Unsupported:
            raise
        except RuntimeError as e:
            if any(m in str(e) for m in _FAKE_ONLY_ERRORS):  # a kernel that reads data (packed RNNs): eager runs it
                raise Unsupported(BreakKind.DATA_DEPENDENT,
                                  f"{_target_name(target)} reads tensor data that fake tensors do not have") from None
            if _SYM_SIZES_REFUSED in str(e):  # NOTE [Symbolic sizes an op refuses]
                raise Unsupported(BreakKind.UNSUPPORTED_CALL,
                                  f"{_target_name(target)} does not take symbolic sizes here ({_SYM_SIZES_REFUSED})") from None
            if _no_fake_kernel(e):
                raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"{_target_name(target)} has no fake-tensor rule and its "
                                  f"meta fallback failed ({str(e)[:120]})") from None
            raise internal_break(_target_name(target), e) or UserException(e) from None
        except Exception as e:  # the user's error (bad shapes, wrong dtypes): eager raises it for real, unless
            raise internal_break(_target_name(target), e) or UserException(e) from None  # framejit's (NOTE
            # [Internal failures under the fake mode])

    def _fake_meta(self, result: Any) -> Any:
        """FakeTensorMode returns `torch.tensor(data, device="meta")` as a real meta tensor, which the next
        fake op refuses: such results are made fake (with `torch.set_default_device("meta")` every
        `torch.tensor(...)` is one, NOTE [Default device mode])."""
        def fake(t):
            if isinstance(t, torch.Tensor) and t.is_meta and not isinstance(t, _fake_tensor().FakeTensor):
                return self.fake_mode.from_tensor(t, static_shapes=True)
            return t
        return tree_map(fake, result) if isinstance(result, (torch.Tensor, tuple, list)) else result

    def _check_input_mutation(self, target: Any, fakes: list) -> None:
        """NOTE [Input mutation]: an in-place op on an input stays in the graph (backends write input
        mutations back). It is only sound if no other input shares the mutated input's memory: that is
        checked now and guarded for later calls (`alias_guard`)."""
        for entry in written_candidates(self, target, fakes):  # NOTE [Inputs sharing memory, indexed]
            version = _version(entry.value.fake)
            if version != entry.version or (version is None and _inplace(target)
                                             and any(f is entry.value.fake for f in fakes)):
                entry.version, before = version, entry.version
                entry.writes += 0 if version is None else eager_bumps(target, version, before)
                self.input_written(entry, target)
        check_data_writes(self, target, fakes)  # NOTE [Writes through the .data of inputs]

    def input_written(self, entry: GraphInput, target: Any) -> None:
        """`target` wrote the graph input `entry` (its memory): checked and recorded for the write-back."""
        for other in real_sharers(self, entry):  # NOTE [Inputs sharing memory, indexed]
            if other is not entry:
                raise Unsupported(BreakKind.SIDE_EFFECT, f"in-place {_target_name(target)} mutates "
                                  f"{entry.source.describe()}, which shares memory with {other.source.describe()}")
        if self.__dict__.get("speculated_checks"):  # NOTE [Speculated checks]: a rerun must be exact
            raise Unsupported(BreakKind.SIDE_EFFECT, f"in-place {_target_name(target)} writes an input after a speculated check")
        from .handler_reruns import note_input_write  # NOTE [Failing graphs inside handlers]
        note_input_write(self, entry, target)
        self.mutated_inputs = True
        if entry not in self.mutated_entries:
            self.mutated_entries.append(entry)  # NOTE [Aliased inputs written before the alias is read]:
            self.__dict__.setdefault("first_writes", {})[id(entry)] = self._write_site()

    def _write_site(self) -> tuple:
        """(root frame instruction index, user stack) of the instruction being traced."""
        from .lazy_combinators import _root_index
        return (_root_index(self.tx_stack[-1]), tuple(self.tx_stack[-1].user_stack())) if self.tx_stack else (None, ())

    # NOTE [Aliased inputs written before the alias is read]: `ts.add_(1); return t * 2` with t a view of ts
    # (a 0-dim element of a schedule's timesteps, a slice of a buffer) writes ts while t is still an unread
    # argument, so the write's own check sees no alias; t is read later and the alias check of the whole
    # graph failed where no break can be taken (the return): the frame ran eagerly on every call. The
    # failure now names the root instruction that first wrote the mutated input, and the frame breaks there:
    # the graph before it, the write run as Python, the rest (reads of both) in the resume function.
    def alias_guard(self) -> None:
        alias_guard(self)  # NOTE [One guard for the inputs written in place]

    def _wrap_constant_result(self, target: Any, result: Any) -> Value:
        note_folded(self)  # NOTE [Warnings of graph ops]: no node, its warnings are replayed
        if result is None or isinstance(result, (bool, int, float, torch.dtype, torch.device, torch.Size)) or (
                isinstance(result, tuple) and all(isinstance(r, (int, float, bool)) for r in result)):
            return ConstantValue(result)
        raise Unsupported(BreakKind.UNSUPPORTED_CALL,
                          f"{_target_name(target)} returned {type(result).__name__}, which cannot live in a graph")

    def wrap_result(self, node: torch.fx.Node, result: Any) -> Value:
        if isinstance(result, torch.Tensor):
            # NOTE [Parameters made while tracing]: `torch.nn.Parameter(t)` in the graph makes a Parameter at run time;
            # its value answered type(p) is Tensor and isinstance(p, Parameter) False while tracing (red team 15)
            return TensorValue(node, result, cls=torch.nn.Parameter if node.target is torch.nn.Parameter else torch.Tensor)
        if isinstance(result, (torch.SymInt, torch.SymBool)):  # NOTE [Symbolic shapes]
            return SymNodeValue(node, result)
        if isinstance(result, (tuple, list)):
            items = []
            for i, r in enumerate(result):
                from .shapes import sym_or_int
                r = sym_or_int(r)
                if isinstance(r, (torch.Tensor, torch.SymInt, torch.SymBool)):
                    item = self.graph.call_function(operator.getitem, (node, i))
                    item.meta["val"] = r
                    items.append(TensorValue(item, r) if isinstance(r, torch.Tensor) else SymNodeValue(item, r))
                elif _contains_tensor(r):
                    raise Unsupported(BreakKind.UNSUPPORTED_CALL, "nested tensor containers in an op result")
                else:
                    items.append(ConstantValue(r))
            cls = type(result)
            return (TupleValue if isinstance(result, tuple) else SequenceValue)(items, cls=cls)
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"op result of type {type(result).__name__}")

    def output(self, values: list[TensorValue]) -> None:
        """Finish the graph: it returns `values` and ends in the global state it started with: autocast
        and inference-mode blocks still open (a break inside them) are exited, innermost first, and the
        grad mode is reset (the code after the graph re-enters them: NOTE [Breaks inside with-blocks])."""
        self.alias_guard()
        check_data_outputs(self, values)  # NOTE [Writes through the .data of inputs]
        grad_mode = self.grad_enabled  # the tracer's view stays the mode the code reached (restore_grad_mode)
        for node in reversed(self.open_regions):
            if "restore" in node.meta:  # a block that names its restoring call (NOTE [Saved-tensors-hooks blocks])
                self.record_effect(*node.meta["restore"])
                continue
            exit_fn = (torch.amp.autocast_mode._exit_autocast if node.target is torch.amp.autocast_mode._enter_autocast
                       else torch.autograd.grad_mode._exit_inference_mode)
            self.record_effect(exit_fn, (node,))
            grad_mode = node.meta.get("grad_before", grad_mode)  # exiting inference mode restores it
        if grad_mode != self.entry_grad_enabled:
            self.record_effect(torch._C._set_grad_enabled, (self.entry_grad_enabled,))
        from .state_blocks import end_default_dtype
        end_default_dtype(self)  # NOTE [Default dtype changes]
        self.graph.output(tuple(v.node for v in values))
        from .input_versions import eager_output_versions
        self.output_versions = eager_output_versions(self, values)  # NOTE [Version counts of graph outputs]
        _drop_unused_sizes(self.graph)
        self._drop_undone_grad_switches()

    def _drop_undone_grad_switches(self) -> None:
        """NOTE [Grad-mode nodes]: grad-mode switches stay in the graph where the traced code switches (the graph
        states its own grad mode, also when nothing in it requires grad; backends decide from the inputs whether
        autograd matters: backends/state.py). Only a switch away from the mode in force that the very next node
        switches back (`with torch.no_grad(): pass`) is dropped, as a pair: together they do nothing."""
        mode, erased = self.entry_grad_enabled, set()
        nodes = list(self.graph.nodes)
        for first, second in zip(nodes, nodes[1:]):
            if first.target is torch._C._set_grad_enabled and first.args == (not mode,) and first not in erased:
                mode = first.args[0]
                if second.target is torch._C._set_grad_enabled and second.args == (not mode,):
                    mode = second.args[0]
                    erased.update((first, second))
                    self.graph.erase_node(first)
                    self.graph.erase_node(second)


# NOTE [Dynamic floats fold into no constant]: a dynamic float (NOTE [Dynamic floats]) is run through fake
# tensors as its example value, a plain Python float, so FakeTensorMode's constant propagation made
# `torch.tensor(10) * r` a fake carrying the data 10 * r-of-the-trace: int()/bool()/a slice bound read it as known
# data with no guard on r, and every later value of r got the trace's answer (review revH H8 / revI I3:
# `x[:int(torch.tensor(x.shape[0]) * r)]` kept 7 rows for every r after r = 0.75 made it dynamic). Symbolic
# sizes and ints (SymNodeValue: a SymInt, a SymFloat such as `x.shape[0] / 3`, a SymBool such as `n % 2 == 1`)
# fold the same way: the fake run took a SymFloat as NaN and a SymBool as True (review revI I6/I7:
# float(torch.tensor(2.0) * (x.shape[0] / 3)) was NaN, torch.tensor(2) * (x.shape[0] % 2 == 1) padded even
# sizes). A tensor computed from a dynamic float or a symbolic value carries no known data: a Python read of it
# is the data-dependent break it is for any graph value (NOTE [Ints of tensors computed from sizes] may still
# derive it from the sizes).
# The float may sit in a list or tuple (`torch.tensor((r,))`, `x.new_tensor([r])`), and an op written in place
# (`t.view(1).mul_(r)`) changes the tensor arguments it writes and the bases they view, whose data
# FakeTensorMode keeps (review revH H9): those forget their data too, and so does every other fake of the graph
# whose data shares their storage (a view made before the write, `t.data`, `t.detach()`: review revK K1,
# `u = t.unsqueeze(0); t.add_(r); int(u.sum() * 10)` answered the trace's r on every call).
def _forget_constants(result: Any, operands: list, graph: torch.fx.Graph) -> None:
    written: set = set()
    for leaf in [*operands, *tree_leaves(result)]:
        is_written = any(leaf is op for op in operands)
        while isinstance(leaf, torch.Tensor):
            constant = getattr(leaf, "constant", None)
            if constant is not None:
                if is_written:
                    written.add(constant.untyped_storage().data_ptr())
                leaf.constant = None
            leaf = leaf._base
    written.discard(0)
    if written:  # every other view of the written data (made before the write: `u = t.unsqueeze(0)`, `t.data`)
        for node in graph.nodes:
            for value in tree_leaves(node.meta.get("val")):
                constant = getattr(value, "constant", None) if isinstance(value, torch.Tensor) else None
                if constant is not None and constant.untyped_storage().data_ptr() in written:
                    value.constant = None
