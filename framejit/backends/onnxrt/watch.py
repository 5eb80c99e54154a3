"""Uses of `.data` on frozen weights: the one in-place change a tensor's version does not show.

Role: runtime.py's frozen weights (NOTE [Frozen weights]) are ORT constants checked on every call by
tensor identity and `_version`. `param.data` is a new tensor with a version counter of its own, so
`param.data.mul_(2)`, `param.data.copy_(w)` and `param.data = w` leave `param._version` as it was.
This module counts every `.data` use (get or set) of a watched tensor; a part compares the counts it
froze with (`uses(t)`) when the process-wide `EPOCH[0]` moved.

NOTE [Writes through .data]
`Tensor.data` is a C getset descriptor of `torch._C.TensorBase`; no hook of torch sees it. The first
`watch()` installs a Python property named `data` on `torch.Tensor` that calls the original descriptor
and, only for watched tensors (an id lookup, about 0.1 us more per `.data` use anywhere), bumps their
use count and `EPOCH`. A read without a write counts too: the part then rebuilds its session once
more than needed, never computes with stale weights. The property stays installed for the process
(`unwatch_all` forgets the watched tensors; the property then only does the id lookup).
framejit's capture never sees the property: it handles `t.data` by name (capture/attributes.py).
Not seen (documented in options.py): writes into memory shared outside torch's tensors
(`param.detach().numpy()[...] = v`, `untyped_storage()` writes, ctypes), and
`torch.utils.swap_tensors` between two tensors that have the same version number.
"""
from __future__ import annotations

import weakref

import torch

_ORIGINAL = torch._C.TensorBase.data  # the getset descriptor
_USES: dict[int, int] = {}  # id(watched tensor) -> `.data` uses since it was first watched
EPOCH = [0]  # bumped on every `.data` use of a watched tensor
_installed = False


def _get_data(self):
    key = id(self)
    if key in _USES:
        _USES[key] += 1
        EPOCH[0] += 1
    return _ORIGINAL.__get__(self, type(self))


def _set_data(self, value):
    key = id(self)
    if key in _USES:
        _USES[key] += 1
        EPOCH[0] += 1
    _ORIGINAL.__set__(self, value)


def _install() -> None:
    global _installed
    if not _installed:
        torch.Tensor.data = property(_get_data, _set_data, doc=_ORIGINAL.__doc__)
        _installed = True


def watch(tensor: torch.Tensor) -> int:
    """Count `.data` uses of `tensor` from now on (NOTE [Writes through .data]); returns `uses(tensor)`."""
    _install()
    key = id(tensor)
    if key not in _USES:
        _USES[key] = 0
        weakref.finalize(tensor, _USES.pop, key, None)
    return _USES[key]


def uses(tensor: torch.Tensor) -> int:
    """How many times `.data` of `tensor` was read or assigned since it was first watched."""
    return _USES.get(id(tensor), 0)


def unwatch_all() -> None:
    """Forget every watched tensor (for tests)."""
    _USES.clear()
