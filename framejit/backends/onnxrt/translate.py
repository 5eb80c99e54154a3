"""Translation of a core-aten FX graph (one partition) into ONNX model bytes, op by op, via torchlib.

Each call_function node is handed to its torchlib function (onnxscript's maintained aten -> ONNX op
library, as registered by torch's ONNX registry), which records ONNX nodes into an `onnx_ir` graph.
No torch.export and no Dynamo are involved; see NOTE [Private torch.onnx pieces].

Main entry points:
- `registry()`: the torchlib registry (built once per process, ~0.5 s).
- `unsupported_reason(node, fallback_ops)`: why a node cannot go to ONNX (None when it can); this is
  the capability check the partitioner uses.
- `to_onnx_bytes(gm, opset) -> bytes`: the serialized ModelProto; raises `NodeTranslationError`
  naming the FX node that failed, so the caller can leave that node to eager torch and retry.

Invariant: every ONNX node made for FX node `n` is named `node_<n>__<k>`, so an ONNX Runtime error message can be traced back to the FX node that caused it.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import math
import operator
import weakref

import torch
import torch.fx

from . import attention, attention_masks, lstm_guard, lstm_whole, shapes, splits

# NOTE [Private torch.onnx pieces]
# The per-node translation reuses torch's dynamo-exporter internals (`torch.onnx._internal.exporter`:
# ONNXRegistry, the OpRecorder evaluator and `_handle_call_function_node_with_lowering`), called on our
# own make_fx graph, never on an ExportedProgram. They are private, so every use is in this module;
# they were identical in torch 2.13 and 2.14. If an import or a call breaks in another torch version,
# the failure is caught by the backend and the graph runs eagerly with an `eager_fallback` log line.

# dtypes ONNX Runtime's CPU kernels cover broadly; others (bfloat16, complex, float8...) run eagerly.
SUPPORTED_DTYPES = frozenset({
    torch.float32, torch.float16, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
    torch.uint8, torch.bool,
})

# Ops that the partitioner never sends to ORT whatever torchlib says: they mutate memory (left over
# from functionalization) or produce values that only make sense to torch's runtime.
_NEVER = frozenset({"aten::copy_", "aten::set_", "aten::resize_", "aten::_local_scalar_dense"})


SIZE_REASON = "computes a size, which torch reads from the tensors and passes to ORT parts"
# NOTE [Write-backs of mutated inputs]: a functional graph's in-place updates of its inputs (BatchNorm's
# running statistics, an optimizer step's parameters and state, a weight changed under no_grad) end in
# `copy_(input, new_value)`; ORT has no in-place outputs, so torch writes the value ORT computed. That is
# not computation left to torch: not logged on `eager_fallback` (compiler._log_program).
WRITE_BACK_REASON = "aten::copy_ writes a value computed in ORT back into a mutated input (ORT has no in-place outputs)"


class NodeTranslationError(RuntimeError):
    def __init__(self, node_name: str, message: str):
        super().__init__(f"node {node_name}: {message}")
        self.node_name = node_name


@functools.lru_cache(maxsize=None)
def registry():
    from torch.onnx._internal.exporter import _registration

    with _quiet():
        reg = _registration.ONNXRegistry.from_torchlib()
    lstm_whole.register_translation(reg)  # NOTE [LSTM kept whole]: ORT's LSTM op
    return reg


@functools.lru_cache(maxsize=None)
def translated_op_names() -> frozenset:
    return frozenset(k for k in registry().functions if isinstance(k, str))


@contextlib.contextmanager
def _quiet():
    """Silence torch.onnx's per-node warnings (missing nn_module_stack, torchvision) while we work."""
    loggers = [logging.getLogger(n) for n in (
        "torch.onnx._internal.exporter._core", "torch.onnx._internal.exporter._registration",
        "torch.onnx._internal.exporter._building", "onnxscript")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _tensor_vals(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _tensor_vals(item)]
    return []


# measured on special values: atan2(nan, 1) gave 0 and atan2(-2.5, -0.0) +pi/2; floor_divide(inf, 0.7)
# gave inf (eager: nan); remainder(-0.0, 1.5) gave +0.0; signbit is `x < 0` (false for -0.0, and the
# sign of NaN cannot be read in ONNX); xlogy(0, nan) gave 0 (eager: nan); heaviside(nan, v) gave 1
# (eager: 0) (NOTE [Eager semantics in ONNX] in semantics.py)
_WRONG_ON_SPECIAL_FLOATS = frozenset({"aten::atan2", "aten::floor_divide", "aten::remainder",
                                      "aten::div.Tensor_mode", "aten::div.Scalar_mode", "aten::signbit",
                                      "aten::xlogy", "aten::special_xlogy", "aten::heaviside"})
# eager's topk orders tied values (NaN included) as its partial sort leaves them ([2, 2, 2, 1, 2], k=2
# gave indices [2, 4]); ORT's TopK puts the lower index first. max_pool's index in a window holding NaN
# is eager's last NaN (`val > max || isnan(val)`); ORT's MaxPool skips NaN.
_TIE_ORDER = frozenset({"aten::topk"})
_POOL_WITH_INDICES = frozenset({"aten::max_pool2d_with_indices", "aten::max_pool3d_with_indices"})
# NOTE [Arguments torchlib ignores]: torchlib's translations of these ops accept the named argument and drop
# it (its source: "if want to support divisor_override argument, need to op.Mul(result, mask)"): nn.AvgPool2d
# with divisor_override=2 gave the window means instead of window sums / 2 (0.63 max relative difference,
# tools/nn_sweep.py). A node that passes such an argument (not None) runs in torch.
# torchlib's embedding_bag (every overload) computes only its first output; the other three (offset2bag,
# bag_size, max_indices, which the backward reads) are zeros of the right shapes ("we don't care the
# value"), and its mode="mean" program crashed ONNX Runtime's process (a segfault in session run, torch
# 2.13 / ORT 1.32: nn.EmbeddingBag(10, 5, mode="mean") on (3, 4) indices, tools/nn_sweep.py). It runs in torch.
_EMBEDDING_BAG = frozenset({"aten::embedding_bag", "aten::_embedding_bag", "aten::_embedding_bag_forward_only"})
# Likewise the interpolating upsamples drop their scales (torchlib: "scales_h and scales_w are always ignored
# in PyTorch"); eager maps output to input coordinates with a given scale (F.interpolate(scale_factor=1.5)
# of 5 samples: 7 outputs at 1/1.5 steps, not 5/7): 0.5-0.6 off.
_IGNORED_ARGUMENTS = {**{f"aten::{op}": ("divisor_override",) for op in (
    "avg_pool2d", "avg_pool3d", "avg_pool2d_backward", "avg_pool3d_backward")},
    "aten::upsample_linear1d": ("scales",), "aten::upsample_linear1d_backward": ("scales",),
    **{f"aten::{op}{suffix}": ("scales_h", "scales_w") for op in (
        "upsample_bilinear2d", "upsample_bicubic2d", "_upsample_bilinear2d_aa", "_upsample_bicubic2d_aa")
       for suffix in ("", "_backward")},
    **{f"aten::upsample_trilinear3d{suffix}": ("scales_d", "scales_h", "scales_w") for suffix in ("", "_backward")}}
# torchlib's multilabel_margin_loss differs from eager's (1.2-3.6 off in every reduction, tools/nn_sweep.py)
_WRONG_TRANSLATION = frozenset({"aten::multilabel_margin_loss", "aten::multilabel_margin_loss_forward",
                                "aten::multilabel_margin_loss_backward"})
# as_strided reads its input's storage (a transposed graph input: its original layout); ORT's tensors are
# dense copies in their logical order (seed 1011 of the fuzzer: v.t().as_strided((2, 4), (4, 1)) differed).
# Over anything but a dense buffer it runs in torch (NOTE [Storage read by as_strided]).
_READS_STORAGE = frozenset({"aten::as_strided"})

# torchlib writes these as exp(x) - 1 and log(1 + x): expm1(1e-10) gave 0 (soundness finding #9)
_IMPRECISE = frozenset({"aten::expm1", "aten::log1p"})
# int64 sums and products went through a float: sum([2**60 + 1, 3]) lost its low bits (finding #6)
_INEXACT_ON_INT64 = frozenset({"aten::sum", "aten::prod", "aten::cumprod"})


_CONVERSIONS = {torch.ops.prims.convert_element_type.default, torch.ops.aten._to_copy.default}


def _counts_bools(node: torch.fx.Node) -> bool:
    """An int64 sum of bools (as they are, or converted: type promotion writes the conversion out): a count, at
    most the input's size, so exact in ONNX Runtime (cross_entropy's and nll_loss's count of targets that are
    not ignore_index; 2**25 + 3 Trues summed to eager's count)."""
    if node.target._schema.name != "aten::sum" or not node.all_input_nodes:
        return False
    for arg in node.all_input_nodes:
        if arg.op == "call_function" and arg.target in _CONVERSIONS and isinstance(arg.args[0], torch.fx.Node):
            arg = arg.args[0]
        value = arg.meta.get("val")
        if not isinstance(value, torch.Tensor) or value.dtype != torch.bool:
            return False
    return True


# NOTE [Storage read by as_strided]
# as_strided indexes its input's *storage*: eager's layout of that tensor, not its logical order. An ORT
# output is a dense buffer in logical order, so as_strided may run in ORT only over an input whose eager
# layout is exactly that (contiguous, offset 0, a storage of its own size: fake strides tell). Otherwise
# it runs in torch, over the chain of views (free ops, in torch) from its base; the base itself, when its
# eager layout is not dense (a kernel that kept a transposed input's strides), and every node it is
# computed from then run in torch too, so the storage as_strided reads is eager's own. Measured: (x + 1)
# .t().as_strided((2, 2), (1, 2)), permute then as_strided with an offset, as_strided of as_strided and
# (x.t() * 2).as_strided gave ORT's dense order.
def _dense_input(node: torch.fx.Node) -> bool:
    from ..aliasing import dense_layout
    return dense_layout(node.args[0].meta.get("val"))


_LAYOUT_NODES: "weakref.WeakKeyDictionary[torch.fx.Graph, frozenset[str]]" = weakref.WeakKeyDictionary()


def _eager_layout_nodes(graph: torch.fx.Graph) -> frozenset[str]:
    """Nodes that run in torch because an as_strided reads their layout (NOTE [Storage read by as_strided])."""
    known = _LAYOUT_NODES.get(graph)
    if known is not None:
        return known
    from ..aliasing import is_view, reads_computed_layout
    names: set[str] = set()
    for node in graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload) or \
                node.target._schema.name not in _READS_STORAGE or _dense_input(node):
            continue
        view = node.args[0]
        while is_view(view):
            names.add(view.name)
            view = view.args[0]
        todo = [reads_computed_layout(node)]
        while todo:
            n = todo.pop()
            if n is None or n.op == "placeholder" or n.name in names:
                continue
            names.add(n.name)
            todo.extend(n.all_input_nodes)
    known = _LAYOUT_NODES[graph] = frozenset(names)
    return known


def _is_empty(val: torch.Tensor) -> bool:
    numel = val.numel()
    return isinstance(numel, int) and numel == 0  # an unbacked size is not known to be empty


def _reduces_nothing(node: torch.fx.Node) -> bool:
    """`node` reads an empty tensor and yields a non-empty one: a reduction over nothing (mean and var of
    nothing are NaN in eager, 0 in ORT), so it runs in eager torch (NOTE [Eager semantics in ONNX])."""
    if not any(_is_empty(v) for arg in node.all_input_nodes for v in _tensor_vals(arg.meta.get("val"))):
        return False
    return any(not _is_empty(v) for v in _tensor_vals(node.meta.get("val")))


_VARIANCES = {"aten::var", "aten::std", "aten::var_mean", "aten::std_mean", "prims::var"}


def _no_degrees_of_freedom(node: torch.fx.Node) -> bool:
    """A variance whose reduction factor is at most its correction (x.std(0) of one row): eager warns
    "degrees of freedom is <= 0" on every call (and gives inf/NaN), so it runs in eager torch."""
    if node.target._schema.name not in _VARIANCES:
        return False
    bound = {}
    for i, arg in enumerate(node.target._schema.arguments):
        bound[arg.name] = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name, arg.default_value)
    correction = bound.get("correction")
    if correction is None:  # prims.var's correction is required; aten's default is unbiased (1)
        correction = 1 if bound.get("unbiased", True) else 0
    vals = _tensor_vals(node.args[0].meta.get("val")) if isinstance(node.args[0], torch.fx.Node) else []
    outs = _tensor_vals(node.meta.get("val"))
    if not vals or not outs:
        return False
    numel, out_numel = vals[0].numel(), outs[0].numel()
    if not isinstance(numel, int) or not isinstance(out_numel, int) or numel == 0:
        return False  # symbolic sizes: not decided here; empty inputs: _reduces_nothing
    return numel // max(out_numel, 1) <= correction


def _draws_random_numbers(node: torch.fx.Node) -> bool:
    """A seeded random op (rand, randn, bernoulli, native_dropout, ...); attention ops carry the same tag
    but draw nothing when their `dropout_p` is 0."""
    if torch.Tag.nondeterministic_seeded not in node.target.tags:
        return False
    for i, arg in enumerate(node.target._schema.arguments):
        if arg.name == "dropout_p":
            value = node.args[i] if i < len(node.args) else node.kwargs.get("dropout_p", arg.default_value)
            return value not in (0, 0.0, None)
    return True


def _argument(node: torch.fx.Node, name: str) -> object:
    """The value `node` passes for its op's argument `name` (positional or keyword), None if absent."""
    names = [a.name for a in node.target._schema.arguments]
    if name not in names:
        return None
    index = names.index(name)
    return node.args[index] if len(node.args) > index else node.kwargs.get(name)


def unsupported_reason(node: torch.fx.Node, fallback_ops: frozenset) -> str | None:
    """None if `node` can be translated to ONNX and run by ORT, else a short reason."""
    if node.target is operator.getitem:
        return None
    if isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool)):
        # NOTE [One program for every size] (compiler.py): ORT parts take sizes as scalar inputs
        return SIZE_REASON
    if not isinstance(node.target, torch._ops.OpOverload):
        return f"{node.target} is not an aten op"
    name = node.target.name()
    overload = name if node.target._overloadname == "default" else f"{name}.{node.target._overloadname}"
    if name == "aten::copy_" and node.args and getattr(node.args[0], "op", None) == "placeholder":
        return WRITE_BACK_REASON  # NOTE [Write-backs of mutated inputs]
    if name in _NEVER or name in fallback_ops or overload in fallback_ops:
        return f"{overload} is excluded from ONNX (mutation, runtime-only or fallback_ops)"
    if node.target._schema.is_mutable:
        return f"{overload} mutates its inputs"
    if _draws_random_numbers(node):
        # ORT's random ops have their own generator: in torch, the same torch.manual_seed gives eager's numbers
        return f"{overload} draws random numbers, which come from torch's generator as in eager"
    if not registry().is_registered(node.target):
        return f"no torchlib translation for {overload}"
    vals = _tensor_vals(node.meta.get("val"))
    for arg in node.all_input_nodes:
        vals += _tensor_vals(arg.meta.get("val"))
    if "val" not in node.meta:
        return f"{overload} has no shape/dtype metadata"
    reason = _differs_from_eager(node, overload, vals)
    if reason is not None:
        return reason
    for val in vals:
        if val.dtype not in SUPPORTED_DTYPES:
            return f"{overload} uses dtype {val.dtype}, which ONNX Runtime does not run here"
        if val.layout != torch.strided:
            return f"{overload} uses layout {val.layout}"
    return None


def _differs_from_eager(node: torch.fx.Node, overload: str, vals: list) -> str | None:
    """Why ORT's translation of this (registered, typed) node would give other values than eager's, if it
    would: the op-specific cases of `unsupported_reason`."""
    schema_name = node.target._schema.name
    if {schema_name, f"{schema_name}.{node.target._overloadname}"} & _WRONG_ON_SPECIAL_FLOATS and any(
            isinstance(v, torch.Tensor) and v.is_floating_point() for v in vals):
        return f"{overload} differs from eager on NaN, inf or -0.0 in ONNX (NOTE [Eager semantics in ONNX])"
    if any(v.dtype == torch.float16 and v.device.type == "cpu" for arg in node.all_input_nodes
           for v in _tensor_vals(arg.meta.get("val"))):
        # ORT's CPU provider runs float16 ops in float32 between inserted casts, and its optimizer then
        # drops a float32 -> float16 -> float32 pair: (x.half() * 3).float() was never rounded to float16
        # (3.85137 vs eager's 3.85156), x.half() * 3 rounded twice differently (red team, issue 12). A
        # cast *to* float16 rounds exactly; what reads float16 runs in torch.
        return f"{overload} reads float16: ORT's CPU provider skips eager's float16 rounding"
    if schema_name in _READS_STORAGE and not _dense_input(node):
        return f"{overload} reads its input's storage, which ONNX tensors do not have"
    if node.name in _eager_layout_nodes(node.graph):
        return "its result's memory layout is read by an as_strided (NOTE [Storage read by as_strided])"
    if schema_name in _TIE_ORDER:
        return f"{overload}: the order of tied values' indices is eager's own partial sort, not ORT's"
    if node.target is lstm_whole.LSTM_WHOLE and lstm_whole.stays_in_torch(node) is not None:
        return lstm_whole.stays_in_torch(node)
    if schema_name in _EMBEDDING_BAG:
        return f"{overload}: torchlib computes only its first output and crashed ORT in mean mode"
    ignored = [name for name in _IGNORED_ARGUMENTS.get(schema_name, ()) if _argument(node, name) is not None]
    if ignored:
        return f"{overload}: torchlib ignores its {', '.join(ignored)} (NOTE [Arguments torchlib ignores])"
    if schema_name in _WRONG_TRANSLATION:
        return f"{overload}: torchlib's translation differs from eager"
    if schema_name in _POOL_WITH_INDICES and any(v.is_floating_point() for v in vals) and any(
            u.target is operator.getitem and u.args[1] == 1 for u in node.users):
        return f"{overload}: its indices in windows holding NaN differ from eager's in ONNX"
    if schema_name in _IMPRECISE:
        return f"{overload} loses precision near 0 in ONNX (written as exp(x) - 1 / log(1 + x))"
    if schema_name in _INEXACT_ON_INT64 and any(
            isinstance(v, torch.Tensor) and v.dtype == torch.int64 for v in vals) and not _counts_bools(node):
        return f"{overload} of int64 is not exact in ONNX Runtime beyond 2**53"
    if schema_name in ("aten::pow", "aten::float_power") and not _tensor_vals(node.meta["val"])[0].is_floating_point() \
            and not _tensor_vals(node.meta["val"])[0].is_complex():
        # NOTE [Integer powers in torch]: ORT's integer Pow is a double pow cast back, INT_MIN where that
        # overflows or is inf (3 ** 41, 0 ** -2 in int64); eager multiplies (wrapping) and gives 0 for
        # 0 ** -n (tests/backends/test_integer_and_negative_powers.py)
        return f"{overload} of integers: ORT's Pow is a double pow (INT_MIN on overflow and 0 ** -n), not eager's"
    if node.target in _ARANGES and _tensor_vals(node.meta["val"])[0].is_floating_point() and \
            not _exact_float_arange(node):
        return f"{overload} of floats: ORT's Range counts and steps in the result's dtype, eager in double " \
            "(NOTE [Float aranges that ORT computes exactly])"
    if _no_degrees_of_freedom(node):
        return f"{overload} has no degrees of freedom left: eager warns on every call"
    if _reduces_nothing(node):
        return f"{overload} makes values out of an empty tensor (ORT's reductions of nothing differ from eager's)"
    if any(_is_empty(v) and not _static_empty(v) for v in _tensor_vals(node.meta.get("val"))):
        return f"{overload} makes an empty tensor of symbolic sizes (NOTE [Empty results as constants])"
    return None


def insert_type_promotion(gm: torch.fx.GraphModule) -> None:
    """Make aten's implicit type promotion explicit (ONNX ops need equal input dtypes), in place; nodes of
    reduced-precision CPU tensors, which run in torch, keep eager's (NOTE [Reduced-precision kernels kept
    whole on CPU]: the pass wrote `exp_avg.lerp_(g, 0.1)` of bfloat16 as lerp.Tensor with the weight rounded
    to bfloat16, AdamW's state an ulp off eager in 22 of 128 elements after one compiled step)."""
    from torch.onnx._internal.fx import passes
    from torch.onnx._internal.fx.passes import type_promotion

    from ..reduced_cpu import reduced_on_cpu
    rule_of = type_promotion.get_type_promotion_rule

    def rule_unless_in_torch(node, table):
        vals = [node.meta.get("val")] + [arg.meta.get("val") for arg in node.all_input_nodes]
        rule = None if reduced_on_cpu(vals) else rule_of(node, table)
        return _UnderTracedDefault(rule, vals[0].dtype) if rule is not None and isinstance(
            vals[0], torch.Tensor) and vals[0].dtype in (torch.float32, torch.float64) else rule
    type_promotion.get_type_promotion_rule = rule_unless_in_torch
    try:
        with _quiet():
            passes.InsertTypePromotion(gm).run()
    finally:
        type_promotion.get_type_promotion_rule = rule_of
    _pin_arange_dtypes(gm)


class _UnderTracedDefault:
    """NOTE [Promotions under a default dtype set inside]: `n * 1.5` or `n / 3` of an int `n` after
    `torch.set_default_dtype(torch.float64)` in the graph was traced as float64, but InsertTypePromotion previews
    the promotion under the caller's default (float32) and asserts that they agree, so the whole graph ran
    eagerly (the inference path, and the halves of NOTE [Default dtype of promotions in joint halves]). The
    preview of a node with a float32 or float64 result runs under that dtype as the default: where the
    promotion reads the default this is the traced one, elsewhere the default does not change the result."""

    def __init__(self, rule, dtype: torch.dtype) -> None:
        self.rule, self.dtype = rule, dtype

    def __getattr__(self, name: str):
        return getattr(self.rule, name)

    def preview_type_promotion(self, args, kwargs):
        previous = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)
        try:
            return self.rule.preview_type_promotion(args, kwargs)
        finally:
            torch.set_default_dtype(previous)


# NOTE [arange with bounds of two types]: `torch.arange(1., n + 1)` (a class-weight vector, positions from a
# float start) is traced as `aten.arange.start(1.0, 5)` with no dtype: eager makes the default float dtype.
# torchlib's translation without a dtype feeds the bounds to ONNX Range as they are, a float and an int64, which
# ORT refuses to load ("Type parameter (T) of Optype (Range) bound to different types"), so the node ran in
# torch (logged under eager_fallback). Every arange whose dtype is unset gets its traced result's dtype, for
# which torchlib casts both bounds first; for a float dtype that is eager's result only where NOTE [Float
# aranges that ORT computes exactly] holds (other float aranges stay in torch).
_ARANGES = (torch.ops.aten.arange.default, torch.ops.aten.arange.start, torch.ops.aten.arange.start_step)


# NOTE [Float aranges that ORT computes exactly]: ONNX Range, given float bounds (torchlib casts them to the
# result's dtype), counts `ceil((limit - start) / delta)` and accumulates `value += delta` in that dtype; eager
# counts in double and computes each value from double `start + i * step`. `arange(1.0, 1.3, 0.1)` had 3
# elements in ORT and 4 in eager, `arange(0, 1, 0.1)` drifted by ulps, and `arange(1., n + 1)` with n = 2**24 + 8
# lost an element and stuck at 2**24 (review revU U2, U4). The node goes to ORT only where both computations are
# exact: bounds that are plain numbers (a symbolic size has no bound known here), integer-valued, a step of 1
# or -1, and every bound within the dtype's exact integers (|v| + 1 <= 2**mantissa bits), so the count and
# every value are the same integers in any precision. Any other float arange runs in torch.
def _exact_float_arange(node: torch.fx.Node) -> bool:
    start, end, step = 0, None, 1
    if node.target is torch.ops.aten.arange.default:
        end = _argument(node, "end")
    else:
        start, end = _argument(node, "start"), _argument(node, "end")
        if node.target is torch.ops.aten.arange.start_step:
            step = _argument(node, "step")
    bounds = (start, end, step)
    if not all(isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) and b == int(b)
               for b in bounds) or abs(step) != 1:
        return False
    limit = round(1 / torch.finfo(_tensor_vals(node.meta["val"])[0].dtype).eps)  # 2 ** mantissa bits
    return max(abs(start), abs(end)) + 1 <= limit


def _pin_arange_dtypes(gm: torch.fx.GraphModule) -> None:
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op == "call_function" and node.target in _ARANGES and node.kwargs.get("dtype") is None \
                and isinstance(val, torch.Tensor):
            node.kwargs = {**node.kwargs, "dtype": val.dtype}
    gm.recompile()


def to_onnx_bytes(gm: torch.fx.GraphModule, opset: int | None) -> bytes:
    """Serialize the partition `gm` (placeholders and call_function nodes with meta['val'])."""
    import onnx_ir as ir
    from torch.onnx._internal.exporter import _core

    reg = registry()
    opset_version = opset or reg.opset_version
    graph = ir.Graph([], [], nodes=[], opset_imports={"": opset_version}, name="framejit_partition")
    model = ir.Model(graph, ir_version=10, producer_name="framejit")
    values: dict = {}
    onnx_opset = _core._get_onnxscript_opset(opset_version)
    constant_farm = _SignedConstants()
    fused = attention.find(gm)  # NOTE [Attention as one ORT op]
    fallbacks: list = []  # NOTE [Boolean masks as an additive bias]
    with _quiet():
        for node in gm.graph.nodes:
            try:
                if node.name in fused and fused[node.name].mask_kind is not None:
                    _translate_node(model, graph, node, values, reg, onnx_opset, constant_farm)
                    unfused = values[node.name]
                    unfused.name = f"{node.name}_unfused"
                    attention.emit(graph, node, fused[node.name], values)
                    values[node.name].name = f"{node.name}_fused"
                    values[node.name] = attention_masks.guard(graph, node.name, values[node.name], unfused, fallbacks)
                    values[node.name].name = node.name
                elif node.name in fused:
                    attention.emit(graph, node, fused[node.name], values)
                elif splits.takes(node):  # NOTE [Splits as one multi-output Split]
                    splits.emit(graph, node, values)
                else:
                    _translate_node(model, graph, node, values, reg, onnx_opset, constant_farm)
                if node.target is lstm_whole.LSTM_WHOLE:
                    lstm_guard.guard(graph, node, values)  # NOTE [ORT's LSTM eats NaN]
            except Exception as exc:  # torchlib raises many kinds; all mean "this node cannot go"
                raise NodeTranslationError(node.name, f"{type(exc).__name__}: {exc}") from exc
        attention_masks.move_fallbacks(graph, fallbacks)
        if fused:  # the aten nodes the fused ones replace
            from onnx_ir.passes.common import RemoveUnusedNodesPass
            RemoveUnusedNodesPass()(model)
        _add_function_opsets(model)
        fold_transposes_into_gemm(graph)
        matrix_times_vector_as_matrix_product(model)  # NOTE [Transposed matrix times a vector]
        shapes.fold_reshape_shapes(graph, gm)  # NOTE [Shapes from the graph's inputs]
        return ir.serde.serialize_model(model).SerializeToString()


class _SignedConstants(dict):
    """The exporter's constant farm (one ONNX Constant per `(python value, dtype)` key), with -0.0 and 0.0
    as different keys: as dict keys they are equal, so `scalar_tensor(-0.0)` reused the Constant made for
    `x <= 0.0` and became +0.0 (threshold(x, 0.0, -0.0) returned +0.0)."""

    @staticmethod
    def _key(key):
        if isinstance(key, float):
            return (key, math.copysign(1.0, key))
        if isinstance(key, (tuple, list)):
            return (type(key).__name__, *map(_SignedConstants._key, key))
        return key

    def get(self, key, default=None):
        return super().get(self._key(key), default)

    def __getitem__(self, key):
        return super().__getitem__(self._key(key))

    def __setitem__(self, key, value) -> None:
        super().__setitem__(self._key(key), value)

    def __contains__(self, key) -> bool:
        return super().__contains__(self._key(key))


# NOTE [Transposes folded into Gemm]
# aten's linear lowers to `addmm(bias, x, t(weight))`, which torchlib writes as Transpose + Gemm. ORT
# is meant to fold such a Transpose into Gemm's transB (GemmTransposeFusion), but on the graphs made
# here it did not (4 of 5 Transposes were left in the zoo MLP's optimised model), and with weights as
# inputs (NOTE [Weights are inputs]) every call then transposed every weight: 313 us of the MLP's
# ~0.8 ms per call in ORT's profile. So the translator does that fold itself: a Gemm input made by a
# 2-D Transpose(perm=[1, 0]) reads the Transpose's input and flips transA/transB; a Transpose left
# without consumers is removed.


def fold_transposes_into_gemm(graph) -> int:
    """Fold 2-D transposes into the Gemm nodes that consume them (in place); returns how many."""
    import onnx_ir as ir

    folded = 0
    for node in list(graph):
        if node.op_type != "Gemm" or node.domain not in ("", "ai.onnx"):
            continue
        for index, flag in ((0, "transA"), (1, "transB")):
            producer = node.inputs[index].producer() if node.inputs[index] is not None else None
            if producer is None or producer.op_type != "Transpose" or producer.domain not in ("", "ai.onnx"):
                continue
            perm = producer.attributes.get("perm")
            if perm is None or list(perm.value) != [1, 0]:
                continue
            current = node.attributes.get(flag)
            flipped = 0 if (current is not None and current.value) else 1
            node.attributes[flag] = ir.AttrInt64(flag, flipped)
            node.replace_input_with(index, producer.inputs[0])
            folded += 1
            if not producer.outputs[0].uses() and not producer.outputs[0].is_graph_output():
                graph.remove(producer, safe=True)
    return folded


# NOTE [Transposed matrix times a vector]
# ONNX Runtime (1.32, CPU, graph optimization level EXTENDED or above: what sessions use) fuses
# `MatMul(Transpose(A), b)` into one FusedMatMul with transA, which computes a wrong product when `b` is 1-D
# (the batched case too): torch.mv(W.t(), u), W.transpose(-2, -1) @ u and spectral_norm's power iteration
# (`mv(weight_mat.H, u)`: its v buffer, outputs and gradients off by 1-60 in train mode) were off by the size
# of the values; with a 2-D `b` (and with a 1-D left operand) the fused product is right. So a MatMul whose
# right operand is known 1-D multiplies by the column `Unsqueeze(b, -1)` and drops that dimension again
# (`Squeeze(.., -1)`): the same product, which ORT computes right whether it fuses it or not. torchlib
# functions that hold a MatMul (aten_addmv: torch.addmv(b, W.t(), u) was off too) are inlined first (ORT
# inlines them anyway), so that their MatMul reads the call's operands, whose shapes are known.
def matrix_times_vector_as_matrix_product(model) -> int:
    """Make every MatMul of a matrix (or batch) by a 1-D tensor a product with a column (in place)."""
    import numpy as np
    import onnx_ir as ir
    from onnx_ir.passes.common import InlinePass

    InlinePass(criteria=lambda function: any(n.op_type == "MatMul" for n in function))(model)
    graph, count = model.graph, 0
    for node in list(graph):
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
            continue
        left, right = node.inputs
        if right is None or right.shape is None or len(right.shape) != 1 or left is None or \
                left.shape is None or len(left.shape) < 2:
            continue
        label = f"{node.name}_column"  # still node_<n>__<k>... (the module docstring's invariant)
        axes = ir.node("Constant", [], {"value": ir.tensor(np.array([-1], dtype=np.int64))}, name=f"{label}0")
        column = ir.node("Unsqueeze", [right, axes.outputs[0]], name=f"{label}1")
        product = ir.node("MatMul", [left, column.outputs[0]], name=f"{label}2")
        squeezed = ir.node("Squeeze", [product.outputs[0], axes.outputs[0]], name=f"{label}3")
        for k, made in enumerate((axes, column, product)):
            made.outputs[0].name = f"framejit_column_{node.name}_{k}"
        old = node.outputs[0]
        squeezed.outputs[0].shape, squeezed.outputs[0].type = old.shape, old.type
        graph.insert_before(node, [axes, column, product, squeezed])
        name = old.name
        old.replace_all_uses_with(squeezed.outputs[0], replace_graph_outputs=True)
        graph.remove(node, safe=True)
        squeezed.outputs[0].name = name
        count += 1
    return count


def _translate_node(model, graph, node, values, reg, onnx_opset, constant_farm) -> None:
    from torch.onnx._internal.exporter import _core

    if node.op == "placeholder":
        _core._handle_placeholder_node(node, values, graph_like=graph, lower="at_conversion", opset=onnx_opset)
    elif node.op == "call_function" and _fused_op(node) is not None:
        _emit_fused(graph, node, values, _fused_op(node))
    elif node.op == "call_function" and _exact_constant(node) is not None:
        _emit_constant(graph, node, values, _exact_constant(node))
    elif node.op == "call_function" and _static_empty(node.meta.get("val")):
        _emit_constant(graph, node, values, 0)  # NOTE [Empty results as constants]
    elif node.op == "call_function":
        first = graph.num_nodes()
        _core._handle_call_function_node_with_lowering(
            model, node, values, graph_like=graph, constant_farm=constant_farm, registry=reg,
            opset=onnx_opset, node_name_to_local_functions={},
        )
        attention.zero_unfused_masked_rows(graph, node, values)  # NOTE [Fully masked rows of SDPA]
        for k in range(first, graph.num_nodes()):  # see the naming invariant in the docstring
            graph.node(k).name = f"node_{node.name}__{k - first}"
    elif node.op == "output":
        _core._handle_output_node(node, values, graph_like=graph)
    else:
        raise NotImplementedError(f"unexpected {node.op} node in a partition")


# NOTE [Fused ops in the lowering]
# torchlib writes aten.gelu as its formula (Div, Erf, Add, Mul, Mul: five ORT kernels, each a pass over
# memory), in a form ORT's own GeluFusion does not match (the 0.5 multiplies 1 + erf before x does).
# The translator emits ONNX Runtime's contrib op instead: com.microsoft Gelu (erf) or FastGelu (tanh
# approximation), one vectorised kernel, for float32 inputs (the CPU kernels' type). LayerNorm needs no
# such help: torchlib emits LayerNormalization, which ORT fuses with residual adds into
# SkipLayerNormalization.
_MSFT = "com.microsoft"


def _fused_op(node: torch.fx.Node) -> str | None:
    """The contrib op standing for `node`, or None (NOTE [Fused ops in the lowering])."""
    if node.target is not torch.ops.aten.gelu.default:
        return None
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype != torch.float32:
        return None
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    return {"none": "Gelu", "tanh": "FastGelu"}.get(approximate)


# NOTE [Sign of gelu's zeros]
# Where gelu underflows to zero (x below about -10, and x = -0.0) ORT's Gelu gives -0.0, as the formula
# x * 0.5 * (1 + erf(x / sqrt 2)) does. Eager's float32 kernel does not follow one rule: its vectorised path
# (every tensor of two or more elements on an AVX2 CPU) gives +0.0, its scalar path (one element) and float64
# give -0.0, and FastGelu's tanh form agrees with eager's. So the lowering asks eager's vectorised kernel once
# per process which sign it gives, and when that is +0.0 adds +0.0 to the contrib op's result (-0.0 + 0.0 is
# +0.0, every other value is unchanged): a one-element tensor then differs in the sign of its zero, as eager's
# own paths differ from each other.
_POSITIVE_ZEROS: dict[str, bool] = {}


def _eager_gelu_zeros_positive(approximate: str) -> bool:
    if approximate not in _POSITIVE_ZEROS:
        probe = torch.tensor([-0.0, -30.0] * 16)
        _POSITIVE_ZEROS[approximate] = not bool(
            torch.nn.functional.gelu(probe, approximate=approximate).signbit().any())
    return _POSITIVE_ZEROS[approximate]


def _emit_fused(graph, node: torch.fx.Node, values: dict, op_type: str) -> None:
    import onnx_ir as ir
    from torch.onnx._internal.exporter import _core

    onnx_node = ir.Node(_MSFT, op_type, [values[node.args[0].name]], name=f"node_{node.name}__0")
    graph.append(onnx_node)
    out = onnx_node.outputs[0]
    approximate = {"Gelu": "none", "FastGelu": "tanh"}[op_type]
    if _eager_gelu_zeros_positive(approximate):
        import numpy as np

        _core._set_shape_type(out, node.meta["val"], complex_to_float=True)
        zero = ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", ir.tensor(np.zeros((), np.float32)))],
                       name=f"node_{node.name}__1")
        graph.append(zero)
        add = ir.Node("", "Add", [out, zero.outputs[0]], name=f"node_{node.name}__2")
        graph.append(add)
        out = add.outputs[0]
    _core._set_shape_type(out, node.meta["val"], complex_to_float=True)
    out.name = node.name
    values[node.name] = out


# NOTE [Constants in their own dtype]
# torchlib writes `scalar_tensor(v, dtype=d)` and `full(size, v, dtype=d)` as a float32 Constant of v cast to
# d, so in float64 every Python float the lowering turns into a tensor (the scalar of `x * 0.1`, `x + 0.1`,
# `0.7 - x`, `where(c, x, 0.1)`, `clamp(x, 0.1)`, `full`) was rounded to float32 first: results 1e-9 to 1e-8
# off eager's, which converts the double once, and dropout's scale 1 / (1 - p) was off in float64 (NOTE
# [Dropout's draw apart from its product] in dropout.py). Such a node with a plain number and plain int sizes
# is a Constant (or ConstantOfShape) holding the value converted to d as torch converts it. torchlib's
# masked_fill casts its number from float32 too: one float32 cannot hold is a where over such a constant
# (semantics._rewrite_masked_fill). Ops that take the number as a float attribute (leaky_relu's and elu's
# alpha) are not covered: they still see it in float32 in float64 graphs.
_CONSTANT_OPS = (torch.ops.aten.scalar_tensor.default, torch.ops.aten.full.default)


def _exact_constant(node: torch.fx.Node):
    """The number `node` fills its result with, when it is emitted as an exact constant, else None (NOTE
    [Constants in their own dtype])."""
    if node.target not in _CONSTANT_OPS:
        return None
    val = node.meta.get("val")
    value = node.args[0] if node.target is torch.ops.aten.scalar_tensor.default else node.args[1]
    if not isinstance(val, torch.Tensor) or val.dtype not in SUPPORTED_DTYPES or type(value) not in (bool, int, float):
        return None
    if not all(type(s) is int for s in val.shape):
        return None
    return value


def _emit_constant(graph, node: torch.fx.Node, values: dict, value) -> None:
    import onnx_ir as ir
    from torch.onnx._internal.exporter import _core

    val = node.meta["val"]
    filled = torch.tensor(value, dtype=val.dtype).numpy()
    if val.dim() == 0:
        onnx_node = ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", ir.tensor(filled))],
                            name=f"node_{node.name}__0")
    else:
        import numpy as np

        sizes = ir.tensor(np.array(val.shape, np.int64))
        shape = ir.Node("", "Constant", [], attributes=[ir.AttrTensor("value", sizes)], name=f"node_{node.name}__0")
        graph.append(shape)
        onnx_node = ir.Node("", "ConstantOfShape", [shape.outputs[0]],
                            attributes=[ir.AttrTensor("value", ir.tensor(filled.reshape(1)))],
                            name=f"node_{node.name}__1")
    graph.append(onnx_node)
    out = onnx_node.outputs[0]
    _core._set_shape_type(out, val, complex_to_float=True)
    out.name = node.name
    values[node.name] = out


# NOTE [Empty results as constants]
# ORT's optimizer (level BASIC and above, 1.32) drops an Expand of a size-1 dimension to size 0:
# `t.unsqueeze(1).expand(3, 0) * 2` gave (3, 1) where eager gives (3, 0), and mean's backward over a dimension
# of size 0 is exactly that expand (x.t().mean(1) of a (0, 3) x: "invalid gradient, got [1, 3] but expected
# [0, 3]" on backward; revD D3). An empty result is known whole from its shape and dtype, so every node whose
# value is an empty tensor of plain int sizes is emitted as a Constant (ConstantOfShape) of that shape, whatever
# its op: ORT then computes no empty tensor from anything, and what reads one and makes values runs in torch
# (`_reduces_nothing`). An empty result of symbolic sizes (none is known: 0 is specialised) runs in torch.
def _static_empty(val) -> bool:
    return isinstance(val, torch.Tensor) and val.dtype in SUPPORTED_DTYPES and \
        all(type(s) is int for s in val.shape) and val.numel() == 0


def _add_function_opsets(model) -> None:
    """Declare every domain used by a node or a local function (torchlib helpers live in their own)."""
    for func in model.functions.values():
        model.opset_imports.setdefault(func.domain, 1)
        for domain, version in func.opset_imports.items():
            model.opset_imports.setdefault(domain, version)
    for node in model.graph:
        if node.domain not in model.opset_imports:
            model.opset_imports[node.domain] = node.version or 1
