"""Ops of a graph whose success at run time depends on the values of tensors, not only on their shapes.

NOTE [Ops that fail on values]: tracing runs every op on fake tensors, which checks (and guards) everything
that depends on sizes, strides, dtypes and devices: broadcasting, matmul's inner sizes, a reshape's element
count, an in-place op's overlap. What fake tensors cannot tell is what depends on the data: an index out of
range, an integer division by zero, a singular matrix, a probability outside [0, 1], a class target out of
range, an assert on values, every op on a size that data decides (`nonzero`, `.item()`: unbacked symbols),
and an op that warns (NOTE [Warnings of graph ops]: the "error" filter raises its warning). Only such an op
can raise at run time, so NOTE [Effects between failing ops] (graph_errors.py) counts only these as "may
fail": a Python effect between two other ops cannot be on the wrong side of a failure, and the graph needs no
snapshot of the inputs it writes (review revS HIGH-2: a hand-written Adam step with a Python step counter
cloned its parameters and moments on every call, 20.6 -> 116.7 ms/step). Kept broad on purpose: any op
framejit does not know (a custom op, a higher-order op, a call into a module, a function from outside torch)
and any call on Python numbers but reads of sizes and comparisons counts as may fail. Out of memory can fail
any op and is not counted (a known gap: eager then made effects the failed call does not).
"""
from __future__ import annotations

import operator
import re
from typing import Any

import torch

# names (lower case) containing one of these: ops that read data to decide whether they raise
_SUBSTRINGS = ("index", "gather", "scatter", "embedding", "nll_loss", "cross_entropy", "margin_loss", "ctc_loss",
               "bincount", "histc", "histogram", "one_hot", "repeat_interleave", "unpool", "masked_scatter",
               "narrow", "multinomial", "cholesky", "inverse", "solve", "svd", "eig", "lstsq", "pinv", "matrix_power",
               "matrix_rank", "linalg", "istft", "quantile", "segment", "assert", "check", "searchsorted",
               "local_scalar", "constrain", "sparse")
# whole words of a name split at "_" and ".": short names a substring would over-match (relu, input)
# (var/std: "degrees of freedom is <= 0" warns from the real kernel only, raising under the "error" filter)
_WORDS = frozenset(("lu", "inv", "ldl", "qr", "det", "put", "take", "var", "std"))
# integer division and powers raise on values (by zero, negative exponents); float ones never do
_INTEGRAL_WORDS = frozenset(("div", "divide", "floordiv", "truediv", "rdiv", "rfloordiv", "rtruediv", "ifloordiv",
                             "itruediv", "mod", "rmod", "imod", "remainder", "fmod", "pow", "rpow", "ipow",
                             "lshift", "rshift", "rlshift", "rrshift", "ilshift", "irshift"))
# targets whose result and arguments fake tracing checks fully (beyond the names above)
_PLAIN_MODULES = ("torch", "_operator", "operator", "builtins", "math")


# Python number results that cannot raise (reads of sizes, comparisons; SAFE_INT_OPS are no op at all): any other
# call on numbers may (`//` or `%` by zero, `math.sqrt(-1.0)`, `int(nan)`)
_SCALAR_SAFE = frozenset((operator.getitem, getattr, operator.eq, operator.ne, operator.lt, operator.le, operator.gt,
                          operator.ge, operator.not_, operator.neg, operator.pos, operator.abs, operator.truth,
                          "size", "dim", "numel", "stride", "storage_offset", "item", "tolist", "nelement",
                          "ndimension", "element_size", "is_contiguous", "is_floating_point", "is_complex"))


def _name(target: Any) -> str:
    if isinstance(target, str):
        return target.lower()
    if isinstance(target, torch._ops.OpOverload):
        return target._opname.lower()
    return str(getattr(target, "__name__", "")).lower()


def _unbacked(value: Any) -> bool:
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    try:
        return bool(free_unbacked_symbols(value))
    except Exception:  # a value free_unbacked_symbols does not walk: no symbols known
        return False


def _foreign(node: torch.fx.Node) -> bool:
    """A call whose code framejit does not know: outside torch, a custom or higher-order op, a module."""
    target = node.target
    if node.op == "call_module" or isinstance(target, torch._ops.HigherOrderOperator):
        return True
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return getattr(target, "namespace", "aten") not in ("aten", "prims")
    if node.op != "call_function":
        return False
    module = getattr(target, "__module__", None) or ""
    return module.split(".")[0] not in _PLAIN_MODULES


def _integral(value: Any) -> bool:
    """`value` is no floating-point or complex tensor (a Python number, an integer tensor)."""
    return not (isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex()))


def _tensor_indices(node: torch.fx.Node) -> bool:
    """`node` indexes (getitem/setitem) with an integer tensor: an index out of range raises at run time."""
    if len(node.args) < 2 or not isinstance(node.args[0], torch.fx.Node) or \
            not isinstance(node.args[0].meta.get("val"), torch.Tensor):
        return False
    index = node.args[1]
    for item in (index if isinstance(index, (tuple, list)) else (index,)):
        value = item.meta.get("val") if isinstance(item, torch.fx.Node) else item
        if isinstance(value, torch.Tensor) and value.dtype not in (torch.bool, torch.uint8):
            return True
    return False


def fails_on_values(node: torch.fx.Node) -> bool:
    """The op `node` may raise at run time on values that fake tracing could not check (NOTE [Ops that fail on
    values])."""
    if node.op not in ("call_function", "call_method", "call_module"):
        return False
    if _foreign(node) or "op_warnings" in node.meta:
        return True  # a warning the op shows raises under the "error" filter (NOTE [Warnings of graph ops])
    if any(_unbacked(n.meta.get("val")) for n in (node, *node.all_input_nodes)):
        return True
    value = node.meta.get("val")
    if isinstance(value, (int, float, complex, torch.SymInt, torch.SymFloat, torch.SymBool)):
        try:
            return node.target not in _SCALAR_SAFE
        except TypeError:  # an unhashable target
            return True
    from .requests import draws_random
    if draws_random(node.target, node.args, node.kwargs):
        return True  # a probability or a standard deviation out of range raises (bernoulli, normal)
    name = _name(node.target)
    if node.target in (operator.getitem, operator.setitem) or name in ("__getitem__", "__setitem__"):
        return _tensor_indices(node)
    if any(s in name for s in _SUBSTRINGS):
        return True
    words = set(re.split(r"[_.]", name))
    if not _WORDS.isdisjoint(words):
        return True
    return not _INTEGRAL_WORDS.isdisjoint(words) and _integral(value)


__all__ = ["fails_on_values"]


# NOTE [Outside code before a failing op]: a graph that raises at run time is rerun eagerly (NOTE [Graph failures
# rerun eagerly] in requests.py, NOTE [Effects between failing ops] in graph_errors.py), which runs again every op
# the failed call already ran. For torch's own ops that is unobservable (the inputs they write are put back), but
# a custom op (torch.library: a Python kernel) may have effects of its own (review revS MED-2: a custom op
# appending to a list ran twice where eager runs it once, when an index after it in the graph was out of range).
# So an op that may fail on values (fails_on_values) after such an op in the same graph is a graph break: the
# graph ends before it, its custom ops run once there, and the failing op runs (and reruns) in later code. A
# custom op that itself fails after an earlier one is not counted (each would be its own graph): known gap.
_TORCH_NAMESPACES = frozenset(("aten", "prims", "framejit"))


def runs_outside_code(node: torch.fx.Node) -> bool:
    target = node.target
    return isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)) and \
        getattr(target, "namespace", "aten") not in _TORCH_NAMESPACES


def check_rerun_of_outside_code(output: Any, node: torch.fx.Node) -> None:
    """The op `node` just recorded (NOTE [Outside code before a failing op])."""
    if runs_outside_code(node):
        output.__dict__["outside_code_ran"] = True
    elif output.__dict__.get("outside_code_ran") and fails_on_values(node):
        from .breaks import BreakKind, Unsupported
        node.graph.erase_node(node)
        raise Unsupported(BreakKind.SIDE_EFFECT, "an op that may fail at run time after a custom op in the same "
                          "graph: a rerun would run the custom op again")
