"""Uses of `.data` on frozen weights: the one in-place change a tensor's version does not show.

Role: runtime.py's frozen weights (NOTE [Frozen weights]) are ORT constants checked on every call by
tensor identity and `_version`. `param.data` is a new tensor with a version counter of its own, so
`param.data.mul_(2)`, `param.data.copy_(w)` and `param.data = w` leave `param._version` as it was (and
so do `.data` of any alias, `param.view(-1).data.mul_(2)`, and a version put back by
`_unsafe_preserve_version_counter`). The counting lives in framejit/tensor_watch.py (NOTE [Writes through
.data], per storage: NOTE [Uses counted per storage]), shared with guard functions' remembered tensors:
one `.data` property for the process. A part compares the counts it froze with (`uses(t)`) when the
process-wide `EPOCH[0]` moved.
Writes through a storage (`untyped_storage().copy_/fill_/[i] =`, `storage().copy_`) count a use (NOTE
[Storage writes count a use] in tensor_watch.py). Not seen (documented in options.py): writes into memory
shared outside torch's tensors and storages through an alias made and dropped between two calls other than
a NumPy array, a `set_` alias or a DLPack export (ctypes on `data_ptr()`); those count a use when made (NOTE [NumPy arrays count a use] in
tensor_watch.py), aliases held from before are fed (NOTE [Weights whose storage is held elsewhere are fed]
in runtime.py) and aliases held after the freeze are seen (NOTE [Holders appearing after the freeze]).
"""
from __future__ import annotations

from ...tensor_watch import EPOCH, uses, unwatch_all, watch  # noqa: F401
