"""CPython's own TypeError messages for calls whose arguments do not fit the callee's parameters.

NOTE [Arity errors as CPython words them]: `bind_arguments` (translator.py) binds the arguments of an
inlined call as CPython does and raises its TypeError where they do not fit, but it wrote messages of its
own: "g() missing required positional argument: 'b'" where CPython says "g() missing 1 required positional
argument: 'b'", and so for several missing arguments ("missing 2 required positional arguments: 'a' and
'b'"), for too many ("takes from 1 to 2 positional arguments but 3 were given", "takes 1 positional argument
but 2 positional arguments (and 1 keyword-only argument) were given"), for keyword-only arguments and for
positional-only ones passed by keyword; which error CPython reports first also differs (keywords are
checked before the positional count). A program that prints or compares the message (h15comp2's
`g.__defaults__ = None` case) saw another text than eager. The message is now CPython's own: on the error
path only, a stub function with the same parameters (names, kinds, which have defaults) and the callee's
qualified name is called with as many placeholder positional arguments and the same keyword names, and the
TypeError it raises gives the text. Parameters that are not identifiers (3.11's `.0` of a comprehension)
keep the old message.
"""
from __future__ import annotations

import inspect
import keyword
import types
from typing import Iterable

_PLACEHOLDER = object()
_STUBS: dict[tuple, types.FunctionType] = {}


def cpython_message(code: types.CodeType, fname: str, nargs: int, keywords: Iterable[str], ndefaults: int,
                    kwdefaults: Iterable[str]) -> str | None:
    """The message of the TypeError CPython raises calling a function of `code` named `fname` (with
    `ndefaults` positional defaults and keyword-only defaults for `kwdefaults`) with `nargs` positional
    arguments and the keyword arguments `keywords`; None when it cannot be told (see NOTE above)."""
    key = (code, fname, ndefaults, frozenset(kwdefaults))
    stub = _STUBS.get(key)
    if stub is None:
        stub = _stub(code, fname, ndefaults, frozenset(kwdefaults))
        if stub is None:
            return None
        _STUBS[key] = stub
    try:
        stub(*[_PLACEHOLDER] * nargs, **{k: _PLACEHOLDER for k in keywords})
    except TypeError as e:
        return str(e)
    return None


def _stub(code: types.CodeType, fname: str, ndefaults: int, kwdefaults: frozenset) -> types.FunctionType | None:
    names = code.co_varnames
    npos, nkw, nposonly = code.co_argcount, code.co_kwonlyargcount, code.co_posonlyargcount
    index = npos + nkw
    varargs = names[index] if code.co_flags & inspect.CO_VARARGS else None
    varkw = names[index + bool(varargs)] if code.co_flags & inspect.CO_VARKEYWORDS else None
    used = [*names[:index], *(n for n in (varargs, varkw) if n is not None)]
    if any(not n.isidentifier() or keyword.iskeyword(n) for n in used) or "_PLACEHOLDER_" in used:
        return None
    params = [n + ("=_PLACEHOLDER_" if i >= npos - ndefaults else "") for i, n in enumerate(names[:npos])]
    if nposonly:
        params.insert(nposonly, "/")
    if varargs is not None:
        params.append("*" + varargs)
    elif nkw:
        params.append("*")
    params += [n + ("=_PLACEHOLDER_" if n in kwdefaults else "") for n in names[npos:index]]
    if varkw is not None:
        params.append("**" + varkw)
    namespace = {"_PLACEHOLDER_": _PLACEHOLDER}
    exec(f"def stub({', '.join(params)}):\n    pass\n", namespace)  # noqa: S102 (names checked above)
    stub = namespace["stub"]
    stub.__name__ = fname.rpartition(".")[2]
    stub.__qualname__ = fname
    return stub


__all__ = ["cpython_message"]
