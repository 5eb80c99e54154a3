"""Traceable stand-ins for library methods whose original code cannot be traced as written.

NOTE [ModelOutput.__post_init__]: transformers' `ModelOutput` (an OrderedDict subclass that is a
dataclass) fills its dict in `__post_init__` from the fields that are not None, after a framework probe
(`is_tensor`, which reads `repr(type(x))`) and an iterator protocol for a first field holding key/value
pairs. The stand-in below computes the same dict for the case models use: when the first field is a
tensor, a non-empty tuple or list whose first element is not a (str, value) pair, or another field is set,
every non-None field is stored, in field order, through `self[...] =` (so the class's own `__setitem__`
runs). Anything else (another lone non-tensor first field, which the original may unpack as pairs; a
field name shadowed by a class property) calls `graph_break`, so the original runs. Its pytree
registration is skipped, as the original skips it while compiling.
Substitutes are found by module and qualified name, so transformers is never imported by framejit, and
by the code itself (NOTE [Substitutes by identity]).
"""
from __future__ import annotations

import collections
import dataclasses
import re
import sys
import types
import weakref
from typing import Any

import torch

from .batchnorm_average import _ORIGINAL as _BATCH_NORM_FORWARD, _REGISTERED as _BATCH_NORM_REGISTERED
from .batchnorm_average import batch_norm_forward
from .modules import graph_break


def model_output_post_init(self):
    class_fields = dataclasses.fields(self)
    if not len(class_fields):
        raise ValueError(f"{self.__class__.__name__} has no fields.")
    if not all(field.default is None for field in class_fields[1:]):
        raise ValueError(f"{self.__class__.__name__} should not have more than one required field.")
    for field in class_fields:
        if isinstance(getattr(type(self), field.name, None), property):
            graph_break("a ModelOutput field shadowed by a property")
    first_field = getattr(self, class_fields[0].name)
    other_fields_are_none = all(getattr(self, field.name) is None for field in class_fields[1:])
    if other_fields_are_none and not isinstance(first_field, torch.Tensor) and first_field is not None:
        # the original iterates it as (key, value) pairs unless its first element is not one; a tuple or
        # list of tensors (`BackboneOutput(feature_maps=(...))`) is then stored as the field
        if type(first_field) not in (tuple, list) or not first_field or _key_value_pair(first_field[0]):
            graph_break("a ModelOutput whose only field is not a tensor")
    for field in class_fields:
        value = getattr(self, field.name)
        if value is not None:
            self[field.name] = value


def _key_value_pair(element) -> bool:
    return isinstance(element, (list, tuple)) and len(element) == 2 and isinstance(element[0], str)


# NOTE [Substitutes by identity]: `functools.wraps` copies `__module__` and `__qualname__` onto a user's
# wrapper, so a name alone would replace a user's patch of the library function by the stand-in (the
# patch's body never ran). A function is substituted only when it is the library's own: torch's functions
# by identity (torch is imported; found through `__wrapped__` when the class was patched before framejit's
# import, none registered when out of reach), the others (transformers is never imported by framejit) by a
# code object with the same qualified name compiled from the file of the module that the name gives.
_BY_NAME: dict[tuple[str, str], Any] = {
    ("transformers.utils.generic", "ModelOutput.__post_init__"): model_output_post_init,
}
_BY_IDENTITY: dict[Any, Any] = {
    _BATCH_NORM_FORWARD: batch_norm_forward,  # NOTE [Cumulative BatchNorm momentum]
} if _BATCH_NORM_REGISTERED else {}


def _library_own(fn: types.FunctionType, module: str, qualname: str) -> bool:
    code = fn.__code__
    file = getattr(sys.modules.get(module), "__file__", None)
    return file is not None and code.co_filename == file and getattr(code, "co_qualname", qualname) == qualname


# NOTE [namedtuple._replace]: every namedtuple's `_replace` runs `self._make(map(kwds.pop, field_names,
# self))`: a map over a function with side effects (a break: maps run lazily) feeding `tuple.__new__`. The
# stand-in pops the same keys in the same order eagerly, with the same closure `field_names` (made for each
# original function) and the same `self._make` lookup and error. Found by the code object all namedtuple
# classes share.
_REPLACE_CODE = collections.namedtuple("_Probe", "a")._replace.__code__
_REPLACES: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def _namedtuple_replace(fn: types.FunctionType) -> types.FunctionType:
    field_names = fn.__closure__[fn.__code__.co_freevars.index("field_names")].cell_contents

    def _replace(self, /, **kwds):
        values = [kwds.pop(name, value) for name, value in zip(field_names, self)]
        result = self._make(values)
        if kwds:  # CPython 3.13 raises TypeError here, earlier versions ValueError
            raise (TypeError if sys.version_info >= (3, 13) else ValueError)(f"Got unexpected field names: {list(kwds)!r}")
        return result
    return _replace


def library_substitute(fn: types.FunctionType) -> types.FunctionType | None:
    if fn.__code__ is _REPLACE_CODE and "field_names" in fn.__code__.co_freevars:
        if fn not in _REPLACES:
            _REPLACES[fn] = _namedtuple_replace(fn)
        return _REPLACES[fn]
    if fn in _BY_IDENTITY:
        return _BY_IDENTITY[fn]
    key = (fn.__module__, fn.__qualname__)
    if key in _BY_NAME and _library_own(fn, *key):
        return _BY_NAME[key]
    return None


# NOTE [cached_property's first read]: `o.prop` of a `functools.cached_property` not yet in `o.__dict__`
# calls `cached_property.__get__`, which on 3.11 takes an RLock (`with self.lock:`, a break) and on 3.12+
# writes `instance.__dict__[attrname] = val` through the dict it read (a break too: NOTE [Instance dicts as
# dicts]), so the first read of every cached property broke. descriptors._python_descriptor_get calls this
# stand-in instead, only for an attribute read that found `attrname` absent from the instance dict (a
# guarded lookup fact; a direct `__get__` call runs the original): it computes the value and stores it
# with object.__setattr__, which for a name whose class entry is the cached_property (a non-data
# descriptor) is that same `__dict__` write, replayed after the graph (a class without instance dicts, or
# a store the replay cannot make as eager does, is a break as for any store). The lock only orders threads.
def cached_property_first_read(self, instance, owner=None):
    if self.attrname is None:
        raise TypeError("Cannot use cached_property instance without calling __set_name__ on it.")
    val = self.func(instance)
    object.__setattr__(instance, self.attrname, val)
    return val


# NOTE [Pure library checks on constants]: a few library functions are pure checks of constant data
# (huggingface_hub's strict-dataclass `type_validator(name, value, expected_type)`, run by every
# `config.x = v` on transformers configs). Called with constant arguments (or objects from outside,
# then guarded by identity) while tracing, they are
# evaluated for real at trace time: the same answer, or the same exception, eager gets; with any
# non-constant argument they are inlined as usual.
# `collections.namedtuple(name, fields, ...)` is one too: with constant arguments the class is made at
# trace time (as TorchDynamo does); its `__module__` is the traced frame's module, as eager's would be.
# NOTE [Regular expressions on constants]: the `re` module's functions with constant arguments (a pattern
# string or a compiled pattern from outside, pinned by identity; a constant string) are evaluated at trace
# time: parameter-name parsing (`re.match(r"layers\.(\d+)\.", name)`, `re.sub`, `re.split`) in model code was a
# break per call of each (inlined, they reach re's cache dict and the C matcher). Their results are constants
# (strings, lists of strings, and Pattern/Match objects, immutable, whose methods fold as str's do:
# calls._PURE_CONSTANT_TYPES; but finditer/scanner, whose results are stateful, stay calls: calls._PURE_RE_METHODS);
# a compiled pattern from outside is such a constant (values/builder.py). With re.DEBUG (printed on every
# call) nothing is folded.
_RE_FUNCTIONS = {("re", name) for name in ("match", "search", "fullmatch", "split", "findall", "sub", "subn",
                                           "compile", "escape")}
_PURE_ON_CONSTANTS = {("huggingface_hub.dataclasses", "type_validator"), ("collections", "namedtuple"),
                      *_RE_FUNCTIONS, ("re", "finditer")}
_RE_CALLBACK_FORMS = (re.sub, re.subn, re.finditer)


def is_pure_on_constants(fn: types.FunctionType) -> bool:
    return (getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)) in _PURE_ON_CONSTANTS


def call_pure(tx, fn: types.FunctionType, args: list, kwargs: dict):
    """The Value of `fn(*args, **kwargs)` evaluated now, or None when an argument is not constant."""
    from .breaks import UserException
    from .values import ObjectValue
    from .values.builder import wrap_unguarded

    def real(value):  # a constant, or an object from outside pinned by identity
        if value.is_constant():
            return value.as_constant()
        if isinstance(value, ObjectValue) and value.source is not None:
            tx.output.guard_id(value.source, value.obj)
            return value.obj
        raise LookupError

    if fn in _RE_CALLBACK_FORMS and (fn is re.finditer or not all(v.is_constant() for v in (*args, *kwargs.values()))):
        # NOTE [Regular expressions with Python callbacks] (regex_calls.py)
        from .regex_calls import module_regex_call
        return module_regex_call(tx, fn, args, kwargs)
    try:
        real_args = [real(a) for a in args]
        real_kwargs = {k: real(v) for k, v in kwargs.items()}
    except LookupError:
        return None
    if any(isinstance(v, re.RegexFlag) and v & re.DEBUG for v in (*real_args, *real_kwargs.values())):
        return None  # re.DEBUG prints the parsed pattern on every call (re's cache is bypassed): not folded
    if fn is collections.namedtuple and "module" not in real_kwargs:
        real_kwargs["module"] = tx.f_globals.get("__name__")
    try:
        result = fn(*real_args, **real_kwargs)
    except Exception as e:  # noqa: BLE001 - raised as the eager call raises it
        raise UserException(e) from None
    if fn is collections.namedtuple:
        from .made_classes import note_made_class
        note_made_class(result, fn, real_args, real_kwargs)  # NOTE [Classes made per call]
    if (fn.__module__, fn.__qualname__) in _RE_FUNCTIONS:
        from .folded_results import folded_value  # a new list of strings from re.split/findall
        return folded_value(result)
    return wrap_unguarded(result)
