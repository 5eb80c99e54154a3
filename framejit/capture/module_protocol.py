"""The container protocol of torch's module containers (nn.Sequential, nn.ModuleList, nn.ModuleDict,
nn.ParameterList): modelled from `_modules`, or the class's own methods when they are replaced.

NOTE [Module container protocol]: `for m in seq`, `len(seq)`, `seq[i]`, `bool(seq)` and `k in mdict` are
traced from the container's `_modules` (protocol.iterate, length, getitem, truth, contains), which is
what torch's own `__iter__`/`__len__`/`__getitem__`/`__contains__` compute. That holds only while
`type(seq).__iter__` (and so on) *is* torch's own function: a user subclass may override one, or a user
may patch it on the class (`nn.ModuleList.__iter__ = f`), before or after the first call. So each use
checks that the method resolved on the instance's class is the one torch defined (snapshotted when this
module is imported) and guards that lookup (NOTE [Lookup facts]: absent from the subclasses before the
owner, the owner's entry pinned, the subclass's MRO). When it is not torch's own, the method is called
as the program calls it (inlined like any method); `bool(seq)` also needs `__bool__` to stay absent.
Instance attributes do not matter here: CPython looks these special methods up on the type.
"""
from __future__ import annotations

import operator
import types
from typing import Any

import torch

from . import lookup
from .breaks import BreakKind, Unsupported, UserException
from .sources import DictSlotSource
from .values import ConstantValue, DictValue, NNModuleValue, TupleValue, Value
from .values.builder import wrap

CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict, torch.nn.ParameterList)
_METHODS = ("__iter__", "__len__", "__getitem__", "__contains__", "__bool__")
_TORCH_OWN = {(cls, name): cls.__dict__[name] for cls in CONTAINERS for name in _METHODS if name in cls.__dict__}


def replaced(tx, module: Any, name: str) -> bool:
    """True when `type(module).<name>` is not torch's own method of a module container (a subclass's
    override or a patch), or when a module of any other class defines it as a Python function (NOTE
    [Other modules' container methods]): the program's method is to be called. The lookup is guarded."""
    cls = type(module)
    if not isinstance(module, CONTAINERS):
        return _python_method(tx, cls, name)
    index, impl = lookup.mro_lookup(cls, name)
    lookup.guard_lookup(tx.output, cls, name)
    if index is None:
        return False
    return _TORCH_OWN.get((cls.__mro__[index], name)) is not impl


# NOTE [Other modules' container methods]: a module class that is not one of the containers modelled
# from `_modules` may still define `__iter__`, `__getitem__`, `__contains__` or `__len__` in Python:
# nn.ParameterDict (`iter(self._keys)`, `getattr(self, key)`, `key in self._keys`), or a user's registry
# module. Those methods are inlined like any method; `for k in pdict`, `pdict[k]`, `k in pdict`,
# `pdict.items()` were graph breaks ("iteration over a ParameterDict"), and the iterator the break made
# could not cross into the resume function, so the rest of the frame ran eagerly. The lookup is guarded
# either way (a method added to the class later recompiles); a method written in C is not inlined.
def _python_method(tx, cls: type, name: str) -> bool:
    index, impl = lookup.mro_lookup(cls, name)
    if index is None or not isinstance(impl, types.FunctionType):
        return False
    lookup.guard_lookup(tx.output, cls, name)
    return True


def has_bool(tx, module: Any) -> bool:
    """`type(module).__bool__` exists (guarded either way): truth is then its answer, not `len() > 0`."""
    lookup.guard_lookup(tx.output, type(module), "__bool__")
    return lookup.mro_lookup(type(module), "__bool__")[0] is not None


def module_truth(tx, v) -> bool:
    """`bool(m)` of a module: its class's `__bool__`, else its `__len__`, else True, as CPython decides."""
    from .protocol import length, truth
    cls = type(v.obj)
    for name in ("__bool__", "__len__"):
        lookup.guard_lookup(tx.output, cls, name)
        if lookup.mro_lookup(cls, name)[0] is None:
            continue
        if name == "__len__" and not replaced(tx, v.obj, name):
            return length(tx, v) > 0
        return truth(tx, tx.call_method_of(v, name, [], {}))
    return True


# NOTE [Child tables written in the frame]: `ml.append(m)`, `ml.insert(i, m)`, `ml.extend(ms)`, `del ml[i]`,
# `seq[i] = m`, `mdict[k] = m`, `m._modules[k] = m` and `setattr(m, k, sub)` write the module's `_modules` dict
# (or, in `__delitem__`, store a new one into `m._modules`) through the trace's value of it; the real dict
# is only written when the side effects are replayed after the graph. Iteration, `len()`, indexing and `in`
# of a container read that value then (the container's children as the frame left them: an appended child
# is called by `for c in ml` and by Sequential's forward, `ml[-1]` is the new last child), not the real
# dict guarded at the start of the frame (review revAJ HIGH: the old children were run). The key guard of
# the real dict still stands for the entry. Module walks (children(), named_modules(), ...) break instead.
def written_children(tx, v: NNModuleValue) -> DictValue | None:
    """The trace's value of `v`'s `_modules` when the frame wrote it (NOTE [Child tables written in the
    frame]), else None: the real dict is what the program sees."""
    effects = tx.output.side_effects
    table = effects.attr(v.obj, "_modules")  # `self._modules = OrderedDict(...)` (Sequential.__delitem__)
    if table is None:
        table = effects.written_dict(v.obj.__dict__.get("_modules"))
    if table is None:
        return None
    from .reentrant_reads import region_saw
    region_saw(effects, table)  # NOTE [State the frame writes around a reentrant call]
    if not isinstance(table, DictValue) or not all(type(k) is str for k in table.items):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"the children of a {type(v.obj).__name__} written "
                                                      "into a table the trace does not model")
    return table


def _child_names(tx, v: NNModuleValue) -> tuple[list[str], DictValue | None]:
    tx.guard_module_keys(v)  # a key added or removed after the first call (red team, issue 12)
    table = written_children(tx, v)
    return (list(table.items) if table is not None else list(v.obj._modules)), table


def _child(tx, v: NNModuleValue, table: DictValue | None, name: str) -> Value:
    return table.items[name] if table is not None else tx.getattr(v, name)


def module_children(tx, v: NNModuleValue) -> list[Value]:
    mod = v.obj
    if isinstance(mod, torch.nn.ModuleDict):
        return [ConstantValue(k) for k in _child_names(tx, v)[0]]
    if isinstance(mod, (torch.nn.Sequential, torch.nn.ModuleList)):
        names, table = _child_names(tx, v)
        if table is not None:
            return list(table.items.values())
        return [wrap(tx.output, child, DictSlotSource(v.source, "_modules", name)) if v.source else
                NNModuleValue(child) for name, child in mod._modules.items()]
    if isinstance(mod, torch.nn.ParameterList):
        guard_parameter_list_length(tx, v)
        return [tx.getattr(v, str(i)) for i in range(len(mod))]
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"iteration over a {type(mod).__name__}")


def module_length(tx, v: NNModuleValue) -> int:
    """`len()` of a module container (torch's own `__len__`)."""
    if isinstance(v.obj, torch.nn.ParameterList):
        tx.guard_module_keys(v)
        guard_parameter_list_length(tx, v)
        return len(v.obj)
    return len(_child_names(tx, v)[0])


def module_contains(tx, v: NNModuleValue, key: Any) -> bool:
    """`key in mdict` of a ModuleDict (torch's own `__contains__`)."""
    try:
        return key in dict.fromkeys(_child_names(tx, v)[0])
    except TypeError as e:  # an unhashable key, as the dict raises it
        raise UserException(e) from None


def check_walk(tx, v: NNModuleValue) -> None:
    """A module walk (children(), named_modules(), ...) reads the real `_modules` of each module it visits:
    a break when the frame wrote one (NOTE [Child tables written in the frame]); at the break the writes
    are replayed, and the rest of the frame walks the real children."""
    if written_children(tx, v) is not None:
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"walking the children of a {type(v.obj).__name__} "
                                                      "written while tracing")


def guard_parameter_list_length(tx, v: NNModuleValue) -> None:
    """ParameterList's length is its `_size`, which `append` grows: an appended parameter was not seen by
    an entry that iterated the list before (red team, issue 12)."""
    if v.source is None:
        return
    e = v.source.expr(tx.output.names)
    n = len(v.obj)
    tx.output.add_guard("LENGTH", f"{e}._size == {n}", v.source, expected=str(n), actual=f"{e}._size")


def module_getitem(tx, v: NNModuleValue, key: Any) -> Value:
    mod = v.obj
    if isinstance(mod, torch.nn.ModuleDict):
        names, table = _child_names(tx, v)
        return _child(tx, v, table, key) if key in names else _raise(KeyError(key))
    if isinstance(mod, (torch.nn.Sequential, torch.nn.ModuleList)):
        names, table = _child_names(tx, v)
        if isinstance(key, slice):
            children = [_child(tx, v, table, n) for n in names[key]]
            return ModuleSliceValue(children, isinstance(mod, torch.nn.Sequential))
        try:
            name = names[operator.index(key)]
        except Exception as e:
            raise UserException(e) from None
        return _child(tx, v, table, name)
    if isinstance(mod, torch.nn.ParameterList):
        guard_parameter_list_length(tx, v)
        return tx.getattr(v, str(operator.index(key) % len(mod)))
    raise Unsupported(BreakKind.UNSUPPORTED_CALL, f"subscript of a {type(mod).__name__}")


def _raise(exc: Exception):
    raise UserException(exc)


class ModuleSliceValue(TupleValue):
    """`seq[a:b]` of nn.Sequential/ModuleList: a fresh container of the same children, modelled as a
    tuple of the children's values (it iterates and indexes like the slice, and calls them in order
    when it was a Sequential)."""

    def __init__(self, children: list[Value], sequential: bool) -> None:
        super().__init__(children)
        self.sequential = sequential
