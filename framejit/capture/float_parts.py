"""Dynamic floats computed with symbolic ints inside: `cos(pi * step / T) * lr`.

NOTE [Symbolic ints inside dynamic floats]: `CosineAnnealingLR.get_lr` computes
`(1 + cos(pi * last_epoch / T_max)) / (1 + cos(pi * (last_epoch - 1) / T_max)) * (group["lr"] - eta_min)`,
with `last_epoch` a symbolic int (NOTE [Dynamic ints]) and `group["lr"]` a dynamic float (NOTE [Dynamic floats]).
The left factor is a ShapeEnv float (sym_arith), the right one a computed float (OutputGraph.float_op), and their
product had no symbolic path: both were specialised, and a train step calling `sched.step()` recompiled at every
step until the recompile limit sent it to eager (stock torch.compile compiles it a fixed number of times).
Such an operand is now taken by `float_op` as it is, when its graph node is an expression of plain Python
operations (operator, math, torch's `_sym_*` twins of math, which compute math's result on Python numbers) over
number constants and symbolic int graph inputs read from a source: its value is its hint, and those int inputs
are the computed float's `int_roots`. They are specialised with its float roots (SymFloatValue.specialise), and a
computed float stored back (`group["lr"] = ...`) is rebuilt in Python from both (NOTE [Computed floats rebuilt
in Python] in codegen.py): the same operations on the same numbers as eager, bit for bit. Anything else (a size
read from a tensor, an unbacked symbol, another op) specialises as before.
"""
from __future__ import annotations

import builtins
import math
import operator
from typing import Any

import torch

from .values import SymFloatValue, SymNodeValue

_SYM_MATH = {getattr(torch, f"_sym_{name}") for name in ("sqrt", "cos", "sin", "tan", "cosh", "sinh", "tanh", "asin",
                                                          "acos", "atan", "log2") if hasattr(torch, f"_sym_{name}")}


def plain_target(target: Any) -> bool:
    """A function that computes Python's own arithmetic on Python numbers (NOTE [Computed floats rebuilt in
    Python])."""
    name = getattr(target, "__name__", "")
    return (getattr(operator, name, None) is target or getattr(math, name, None) is target
            or target in (max, min, round) or target in _SYM_MATH)  # max/min of floats: NOTE [Sorting by symbolic
            # keys]; round(a, 2): NOTE [Builtins of dynamic floats]


def int_roots(out, value: SymNodeValue) -> tuple | None:
    """The sourced symbolic int inputs whose plain expression `value` is (NOTE [Symbolic ints inside dynamic
    floats]); None when it is anything else."""
    import torch.fx
    if type(value.sym) not in (torch.SymInt, torch.SymFloat) or type(value.sym.node.hint) not in (int, float):
        return None
    inputs = {e.value.node: e.value for e in out.inputs if type(e.value) is SymNodeValue
              and e.value.source is not None and isinstance(e.value.sym, torch.SymInt)}
    found: dict[Any, SymNodeValue] = {}
    pending = [value.node]
    while pending:
        node = pending.pop()
        if node in inputs:
            found[node] = inputs[node]
            continue
        if node.op != "call_function" or node.kwargs or not plain_target(node.target):
            return None
        for arg in node.args:
            if isinstance(arg, torch.fx.Node):
                pending.append(arg)
            elif type(arg) not in (int, float, bool):
                return None
    return tuple(found.values()) if found else None


def float_operand(out, v: Any) -> bool:
    """`v` may be an operand of float_op: a dynamic float, a number constant, or a plain int expression."""
    from .values import ConstantValue
    if isinstance(v, SymFloatValue) or isinstance(v, ConstantValue) and type(v.value) in (int, float):
        return True
    return isinstance(v, SymNodeValue) and int_roots(out, v) is not None


def example_of(v: Any) -> Any:
    """The value now of a float_op operand."""
    if isinstance(v, SymFloatValue):
        return v.example
    if isinstance(v, SymNodeValue):
        return v.sym.node.hint
    return v.as_constant()


def operand_int_roots(out, args: tuple) -> tuple:
    """The int roots of float_op operands, each once."""
    roots: dict[int, SymNodeValue] = {}
    for a in args:
        found = a.int_roots if isinstance(a, SymFloatValue) else \
            int_roots(out, a) if isinstance(a, SymNodeValue) else ()
        roots.update((id(r), r) for r in found or ())
    return tuple(roots.values())


# NOTE [Comparisons of computed floats guarded by replay]: `a < best * rel_epsilon` (ReduceLROnPlateau's is_better),
# `T_cur >= T_i` after `T_cur = T_cur + 1` (CosineAnnealingWarmRestarts) compare a float COMPUTED from dynamic
# floats. It cannot be a ShapeEnv relation (NOTE [Float relations]: the env rewrites the arithmetic, which may round
# otherwise at the boundary), and since 1fc472a it was a graph break on every call (NOTE [Comparisons of computed
# dynamic floats] in comparisons.py). Each operand whose graph node is a plain expression (NOTE [Computed floats
# rebuilt in Python]) over float and int inputs read from sources and number constants is printed as that same
# expression (`___operator.mul(L['s'].best, 0.9999)`: the same Python operations on the same numbers, in the same
# order, so bit for bit the value the code computes), and the comparison's outcome is a guard line that recomputes
# it (`___operator.lt(L['a'], ...)` or `not ...`). The inputs stay dynamic (guarded by type, so the replay runs no
# user code); another outcome misses and traces the other branch (stock torch.compile compiles one entry per
# branch too). Before it is used, the printed expression is evaluated on the values of this trace and must give
# the operand's value bit for bit; anything else (a float read from a size, an unbacked symbol, another op, a
# non-finite constant) returns None and stays a break.
_TEXT_MODULES = (operator, math, builtins, torch)

# NOTE [Outcomes of float comparisons that keep changing]: each outcome of a guarded comparison is an entry of its
# own, and a frame making several (ReduceLROnPlateau.step: `a < best * rel_epsilon`, then `old_lr - new_lr > eps`,
# beside its int counters) compiles one entry per combination it meets: 8 over 14 steps, then the recompile limit
# ran the whole frame eagerly for good. A frame that misses on a FLOAT_RELATION guard of its newest entry with half
# the recompile limit of entries traced breaks at such comparisons from then on (the older entries stay: each is
# sound), as it did before (NOTE [Comparisons of computed dynamic floats] in comparisons.py). The
# mark rides in the hook's dynamic floats, as a changing string's does (NOTE [Strings that change between
# calls]). A frame with few outcomes (CosineAnnealingWarmRestarts' restart `T_cur >= T_i`; two comparisons in a
# loop) keeps one entry per outcome and no break.
BREAK_RELATIONS = "<float relations break>"


def relation_missed(hook, failures: list) -> None:
    """A miss of `hook` (a FrameHook) on a FLOAT_RELATION guard with half the recompile limit of entries traced:
    mark the frame (NOTE [Outcomes of float comparisons that keep changing])."""
    from .. import config, logs
    if BREAK_RELATIONS in hook.dynamic_floats or not any(f.guard.kind == "FLOAT_RELATION" for f in failures):
        return
    if hook._traced_entries() * 2 >= config.recompile_limit:
        hook.dynamic_floats = hook.dynamic_floats | {BREAK_RELATIONS}
        logs.log("recompiles", "%s: the outcome of a comparison of computed floats changed again; such comparisons"
                 " are graph breaks from now on", hook._name())


def compared_floats(out, fn: Any, a: Any, b: Any) -> Any:
    """`fn(a, b)` of operands at least one of which is a computed dynamic float, as a constant bool whose outcome
    is guarded by replaying both operands' arithmetic (NOTE [Comparisons of computed floats guarded by replay]),
    or None."""
    from ..guards import COST_TENSOR
    from .values import ConstantValue
    if BREAK_RELATIONS in out.dynamic_floats:  # NOTE [Outcomes of float comparisons that keep changing]
        return None
    leaves: dict = {}
    texts = [operand_text(out, v, leaves) for v in (a, b)]
    if None in texts:
        return None
    result = fn(example_of(a), example_of(b))
    if type(result) is not bool:
        return None
    check = f"{_name(out, fn)}({texts[0]}, {texts[1]})"
    readable = f"{fn.__name__}({_readable(out, a, leaves)}, {_readable(out, b, leaves)})"
    sources = sorted({leaf[0] for leaf in leaves.values()})
    out.add_guard("FLOAT_RELATION", check if result else f"not {check}", None,
                  expected=f"{readable} is {result}", actual="{" + ", ".join(f"{t!r}: {t}" for t in sources) + "}",
                  cost=COST_TENSOR + 1)
    return ConstantValue(result)


def _readable(out, v: Any, leaves: dict) -> str:
    from .sources import _DescribeNames
    described = {node: (root.source.expr(_DescribeNames()), value) for node, (_, value, root) in leaves.items()}
    if not hasattr(v, "node"):
        return repr(v.as_constant())
    printed = _node_text(out, v.node, described, lambda fn: getattr(fn, "__name__", "?"))
    return printed[0] if printed is not None else "?"


def operand_text(out, v: Any, leaves: dict) -> str | None:
    """`v` printed as Python source over its inputs' sources, adding those to `leaves` (node: (text, value,
    root)); None when it is not a plain expression whose replay gives its value bit for bit."""
    from .values import ConstantValue
    if isinstance(v, ConstantValue):
        return _constant_text(v.value)
    if isinstance(v, SymFloatValue):
        roots = (*v.roots, *v.int_roots)
    elif isinstance(v, SymNodeValue) and isinstance(v.sym, torch.SymInt):
        roots = int_roots(out, v)
    else:
        return None
    if not roots:
        return None
    for root in roots:
        if root.source is None or getattr(root, "size_of", None) is not None:
            return None
        value = root.example if isinstance(root, SymFloatValue) else root.sym.node.hint
        if type(value) not in (int, float):
            return None
        leaves[root.node] = (root.source.expr(out.names), value, root)
    printed = _node_text(out, v.node, leaves, lambda fn: _name(out, fn))
    if printed is None:
        return None
    text, value = printed
    now = example_of(v)
    return text if type(value) is type(now) and repr(value) == repr(now) else None  # bit for bit, or not used


def _node_text(out, node: Any, leaves: dict, name_of: Any) -> tuple[str, Any] | None:
    """(source text, value now) of a plain expression node, or None."""
    import torch.fx
    if node in leaves:
        return leaves[node][:2]
    if getattr(node, "op", None) != "call_function" or node.kwargs or not plain_target(node.target):
        return None
    texts, values = [], []
    for arg in node.args:
        part = _node_text(out, arg, leaves, name_of) if isinstance(arg, torch.fx.Node) else \
            (_constant_text(arg), arg) if type(arg) in (int, float, bool) else None
        if part is None or part[0] is None:
            return None
        texts.append(part[0])
        values.append(part[1])
    name = name_of(node.target)
    try:
        value = node.target(*values)
    except Exception:  # noqa: BLE001 - not the value the code computed: not used
        return None
    return (f"{name}({', '.join(texts)})", value) if name is not None else None


def _name(out, fn: Any) -> str | None:
    """`fn` as text in a guard function: an attribute of a module the guard's namespace holds."""
    name = getattr(fn, "__name__", "")
    for module in _TEXT_MODULES:
        if getattr(module, name, None) is fn:
            return f"{out.name_of(module, module.__name__)}.{name}"
    return None


def _constant_text(value: Any) -> str | None:
    if type(value) is float and not math.isfinite(value):
        return None
    return repr(value) if type(value) in (int, float, bool) else None
