"""`torch.utils._pytree.tree_map` / `tree_leaves` over abstract values.

NOTE [pytree calls]: library code maps functions over nested outputs with torch's pytree
(`tree_map(lambda t: t.detach(), out)`). As a torch function the call became one graph op, which cannot
hold containers of tensors (a break); inlined, torch's pytree walks registries keyed by classes and a
TreeSpec dataclass. Here the walk is done on the values themselves, as torch's default registry does it:
dicts, OrderedDicts, lists, tuples and namedtuples are nodes (children in insertion order, rebuilt as the
same type: a namedtuple through its class), everything else is a leaf unless its type is registered as a
node (HF's ModelOutput, deque, structseqs, user registrations: a break, as is a dict or list subclass
whose type is registered). The registry is guarded by size, so a registration after the first call
recompiles. `is_leaf`, `rests` whose structure differs from the tree's, and defaultdicts are breaks.
"""
from __future__ import annotations

import collections
from typing import Any

from .breaks import BreakKind, Unsupported
from .values import ConstantValue, DictValue, ListValue, TupleValue, Value
from .values.mappings import DefaultDictValue


def _registry():
    import torch.utils._pytree as pytree
    return pytree.SUPPORTED_NODES


def _guard_registry(tx) -> None:
    out = tx.output
    nodes = _registry()
    out.add_guard("PYTREE_REGISTRY", f"___len({out.name_of(nodes, 'pytree_nodes')}) == {len(nodes)}", None,
                  expected=f"{len(nodes)} pytree node types registered")


def _is_namedtuple(cls: type) -> bool:
    """torch's own test (a tuple subclass with string `_fields` and callable `_make`/`_asdict`): a tuple
    subclass with `_fields` alone is a leaf to torch (and a break here, as other tuple subclasses)."""
    import torch.utils._pytree as pytree
    check = getattr(pytree, "is_namedtuple_class", None)
    if check is not None:
        return cls is not tuple and bool(check(cls))
    return issubclass(cls, tuple) and isinstance(getattr(cls, "_fields", None), tuple) and cls is not tuple


def _kind(value: Value) -> str:
    """'dict', 'list', 'tuple' or 'leaf' for torch's default registry; a break for other nodes."""
    if isinstance(value, DefaultDictValue):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "pytree over a defaultdict")
    if isinstance(value, DictValue) and value.cls in (dict, collections.OrderedDict):
        return "dict"
    if isinstance(value, ListValue) and value.cls is list:
        return "list"
    if isinstance(value, TupleValue) and (value.cls is tuple or _is_namedtuple(value.cls)):
        return "tuple"
    try:
        cls = value.python_type()
    except Exception:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"pytree over {value.describe()}") from None
    if cls in _registry() or (issubclass(cls, tuple) and cls is not tuple):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"pytree over a registered node type {cls.__name__}")
    return "leaf"


def _children(value: Value, kind: str) -> list[Value]:
    if kind == "dict":
        return list(value.items.values())
    return list(value.items)


def _flatten(value: Value, leaves: list[Value]) -> None:
    kind = _kind(value)
    if kind == "leaf":
        leaves.append(value)
        return
    for child in _children(value, kind):
        _flatten(child, leaves)


def _up_to(spec: Value, rest: Value, leaves: list[Value]) -> None:
    """The subtrees of `rest` at `spec`'s leaves (torch's flatten_up_to), when the structures agree."""
    kind = _kind(spec)
    if kind == "leaf":
        leaves.append(rest)
        return
    if kind == "dict":  # torch compares the key sets and takes the rest's values in the tree's key order
        same = _kind(rest) == "dict" and set(rest.items) == set(spec.items)
        others = [rest.items[key] for key in spec.items] if same else []
    else:
        same = _kind(rest) == kind and rest.cls is spec.cls and len(rest.items) == len(spec.items)
        others = list(rest.items)
    if not same:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "tree_map over trees whose structures differ")
    for a, b in zip(_children(spec, kind), others):
        _up_to(a, b, leaves)


def _spec(value: Value) -> tuple:
    """The tree's structure as plain data, taken before `func` runs (torch flattens first: a func that
    changes the containers does not change the result's structure)."""
    kind = _kind(value)
    if kind == "leaf":
        return ("leaf",)
    keys = list(value.items) if kind == "dict" else None
    return (kind, value.cls, keys, [_spec(child) for child in _children(value, kind)])


def _rebuild(tx, spec: tuple, leaves: list[Value]) -> Value:
    kind = spec[0]
    if kind == "leaf":
        return leaves.pop(0)
    _, cls, keys, specs = spec
    children = [_rebuild(tx, child, leaves) for child in specs]
    if kind == "dict":
        return DictValue(dict(zip(keys, children)), cls=cls)
    if kind == "list":
        return ListValue(children)
    if cls is tuple:
        return TupleValue(children)
    from .values import ClassValue
    return tx.call(ClassValue(cls), children, {})  # torch rebuilds a namedtuple as cls(*values)


def tree_map(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    is_leaf = kwargs.pop("is_leaf", ConstantValue(None))
    if kwargs or len(args) < 2 or not (is_leaf.is_constant() and is_leaf.as_constant() is None):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "tree_map with is_leaf or unknown arguments")
    func, tree, rests = args[0], args[1], args[2:]
    _guard_registry(tx)
    leaves: list[Value] = []
    _flatten(tree, leaves)
    columns = []
    for rest in rests:
        column: list[Value] = []
        _up_to(tree, rest, column)
        columns.append(column)
    spec = _spec(tree)
    mapped = [tx.call(func, [leaf, *(column[i] for column in columns)], {}) for i, leaf in enumerate(leaves)]
    return _rebuild(tx, spec, mapped)


def tree_leaves(tx, args: list[Value], kwargs: dict[str, Value]) -> Value:
    is_leaf = kwargs.pop("is_leaf", ConstantValue(None))
    if kwargs or len(args) != 1 or not (is_leaf.is_constant() and is_leaf.as_constant() is None):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "tree_leaves with is_leaf or unknown arguments")
    _guard_registry(tx)
    leaves: list[Value] = []
    _flatten(args[0], leaves)
    return ListValue(leaves)


def register(handlers: dict[Any, Any]) -> None:
    import torch.utils._pytree as pytree
    handlers[pytree.tree_map] = tree_map
    handlers[pytree.tree_leaves] = tree_leaves
