"""Changes to a tensor that its version counter does not show, counted for those who key on `_version`.

Role: two places trust "the same tensor object at the same `_version`" to mean "the same tensor": the
onnxrt backend's frozen weights (NOTE [Frozen weights] in backends/onnxrt/runtime.py: the same values) and
guard functions' remembered tensors (NOTE [Remembered tensor facts] in guards/codegen.py: the same dtype,
device, sizes, strides, offset and lazy bits). Every in-place op on a tensor bumps its version (view ops
in place too: `t_`, `transpose_`, `squeeze_`, `unsqueeze_`, `as_strided_`, `resize_`, `set_`, in no_grad
and in inference mode). A few changes do not, and this module counts them in one process-wide
`EPOCH[0]`, which the users compare before trusting a version:
- `.data` reads and writes of any tensor (NOTE [Writes through .data]), counted per watched storage too
  (`uses`, NOTE [Uses counted per storage]);
- `torch._C._set_neg` / `torch._C._set_conj` (set a lazy bit in place),
  `torch._C._swap_tensor_impl` (`torch.utils.swap_tensors`, also `module.to()` and `load_state_dict`
  under `torch.__future__.set_swap_module_params_on_conversion(True)`: two objects trade TensorImpls,
  whose version counters may read the same) and `torch._C._autograd._unsafe_set_version_counter`
  (`torch.autograd.grad_mode._unsafe_preserve_version_counter` puts an old version back after an
  in-place change), and the fused optimizer steps (NOTE [Fused optimizer steps bump no version]): each is
  wrapped once, on the module attribute torch's own callers look up, and
  every call bumps `EPOCH`.

NOTE [Writes through .data]
`Tensor.data` is a C getset descriptor of `torch._C.TensorBase`; no hook of torch sees it. The first
`install()` (or `watch()`) installs a Python property named `data` on `torch.Tensor` that calls the
original descriptor, bumps `EPOCH` and, for watched storages (a storage lookup, only while some storage
is watched), their use count. A read without a write counts too: a user then rechecks once more than
needed, never computes with stale facts. The property stays installed for the process (`unwatch_all`
forgets the watched storages). Guard functions only `install()` and compare `EPOCH`.
framejit's capture never sees the property: it handles `t.data` by name (capture/attributes.py).
`Tensor.numpy()` (and `np.asarray(t)`, which calls it) and `Tensor.set_` count a use too (NOTE [NumPy
arrays count a use]).
DLPack exports through `torch._C._to_dlpack(_versioned)` count too, and so do `UntypedStorage` writes
(NOTE [Storage writes count a use]). Not seen: writes into memory shared outside torch's tensors by other
routes (a storage's `data_ptr()`, `torch.utils.dlpack.to_dlpack`, which
holds the original function, ctypes), which change values but no metadata; calls of the wrapped private
functions through another reference taken before the first `watch()` (torch's own callers look them up on
each call; framejit's input_versions.py sets counters only forward, to what eager's writes make them).
"""
from __future__ import annotations

import functools
import itertools
import threading

import torch

_ORIGINAL = torch._C.TensorBase.data  # the getset descriptor
_USES: dict[int, int] = {}  # watched storage (NOTE [Uses counted per storage]) -> uses since first watched
EPOCH = [0]  # bumped on every `.data` use of any tensor and every call of a wrapped function
_TICKS = itertools.count(1)  # NOTE [Bumped before and after]: each bump stores a value never stored before
_installed = False


# NOTE [Bumped before and after]: EPOCH moves before each counted change and again after it. A reader
# that records EPOCH before checking what it trusts (NOTE [Facts remembered with what was read before
# them] in guards/codegen.py) then never records, from another thread, an epoch that a change in
# progress has already reached: with one bump before the change only, a guard could read the bumped
# epoch, check the tensor's old facts and remember them with that epoch while the change was still to
# come. Each bump stores the next value of one counter (`next` is atomic), not `EPOCH[0] + 1`: two
# threads bumping at once could otherwise store a value a reader had already recorded, after a change.
# NOTE [Uses counted per storage]: a use is counted for the storage the tensor views, not the tensor
# object: `.data` of any alias of a watched tensor (`w.view(-1).data.mul_(0)`, `w.detach().data.fill_(1)`)
# writes its memory just as `w.data` does, and the frozen weights of onnxrt missed it (served the old
# values). Keys are the addresses of the StorageImpls (`untyped_storage()._cdata`: views, `.data` and
# `detach()` share it; never the data pointer, which a FakeTensor refuses to give and which every empty
# storage shares), so no weak reference to the tensor is kept (`torch.utils.swap_tensors` refuses a tensor
# that has one; NOTE [Traces leave no weak references] in fake_modes.py). An entry outlives its storage, and
# a later storage at the same address starts from the old count: harmless, as users compare a count with
# the one `watch()` returned and counts only grow. `uses()` of a storage never watched (or forgotten by
# `unwatch_all`) is -1, which no count equals: an unknown storage is never taken as unchanged. The wrapped
# private functions count a use of each tensor they are given, before and after the call
# (`_swap_tensor_impl` trades storages; `_unsafe_set_version_counter` puts a version back after a write,
# `torch.autograd.graph._unsafe_preserve_version_counter`, which frozen weights missed too). `t.data = w`
# counts a use of w's storage too: t then writes w's memory with t's own version counter. `t.set_(w)`, which
# does the same (it bumps t's version only), counts a use of w's storage (NOTE [NumPy arrays count a use]).
def _storage_key(tensor) -> int | None:
    try:
        if _HAS_TORCH_FUNCTION(tensor):  # a subclass's __torch_function__ or a user's TorchFunctionMode
            with torch._C.DisableTorchFunction():  # must not see framejit's query (eager makes none)
                return tensor.untyped_storage()._cdata
        return tensor.untyped_storage()._cdata
    except Exception:  # no storage (a functional or sparse tensor, ...): all such tensors share the key None,
        return None  # so their uses are over-counted together, never missed


_HAS_TORCH_FUNCTION = torch._C._has_torch_function_unary


def _count_use(tensor) -> None:
    if _USES and isinstance(tensor, torch.Tensor):
        key = _storage_key(tensor)
        if key in _USES:
            _USES[key] += 1


def _count_uses(args) -> None:
    if _USES:
        for arg in args:
            for tensor in (arg if isinstance(arg, (tuple, list)) else (arg,)):
                _count_use(tensor)


def _get_data(self):
    EPOCH[0] = next(_TICKS)
    _count_use(self)
    try:
        return _ORIGINAL.__get__(self, type(self))
    finally:
        EPOCH[0] = next(_TICKS)


def count_unbumped_write(tensor) -> None:
    """A compiled call wrote `tensor` without moving its version, as eager's write through `.data` does:
    counted as a `.data` use (NOTE [Unbumped writes of compiled calls count a use])."""
    EPOCH[0] = next(_TICKS)
    _count_use(tensor)
    EPOCH[0] = next(_TICKS)


# NOTE [Unbumped writes of compiled calls count a use]: a graph that writes an input through its `.data`
# (`pe.data.mul_(d)`, NOTE [Writes through the .data of inputs] in capture/data_alias.py) reads `.data` inside
# the graph (`_get_data_attr`), not through the property above, and the call leaves the input's version as
# eager does (KeptVersions puts it back after a functionalizing backend's write-back). Nothing counted the
# write, so onnxrt's frozen copy of that weight in another graph (a frozen EMA model) kept the old values
# (review revD HIGH-2: 2.22, 2.22, 2.22 where eager gives 2.22, 7.00, 12.39). KeptVersions counts a use of
# every input such a call wrote with no bump, after the call.


def _set_data(self, value):
    EPOCH[0] = next(_TICKS)
    _count_use(self)
    _count_use(value)  # self then shares value's storage with a counter of its own (NOTE [Uses counted per storage])
    try:
        _ORIGINAL.__set__(self, value)
    finally:
        EPOCH[0] = next(_TICKS)


# NOTE [NumPy arrays count a use]: `w.detach().numpy()[i] = v` writes w's memory through an array that
# lives only for that statement: no version moves, and by the next call no holder is left to count
# (NOTE [Holders appearing after the freeze] in backends/onnxrt/runtime.py), so onnxrt's frozen weights
# served the old values. `Tensor.numpy` is a C method; once installed, torch.Tensor gets a non-data
# descriptor under that name whose class lookup (`torch.Tensor.numpy`) answers the C method itself (what
# capture reads and guards) and whose instance lookup (`t.numpy`, also `np.asarray(t)` through
# `Tensor.__array__`) counts a use of t's storage, bumping EPOCH, before it makes the array, like `.data`.
# `Tensor.set_` is wrapped the same way: `torch.empty(0).set_(w.untyped_storage(), 0, (9,)).add_(1)` (or
# `.set_(w.detach())`) makes and drops an alias with a counter of its own; the use is counted for the
# storage or tensor it is given and for the tensor it changes. `torch._C._to_dlpack(_versioned)` (what
# `Tensor.__dlpack__`, hence `torch.from_dlpack(w.detach())` and `np.from_dlpack`, calls) is wrapped like the
# private functions below (`torch.utils.dlpack.to_dlpack` holds the original: not counted). Only while some
# storage is watched does a call cost more than one Python call.
class _Counting:
    def __init__(self, original, counted) -> None:
        self.original, self.counted = original, counted

    def __get__(self, tensor, owner=None):
        if tensor is None:
            return self.original
        if not _USES or torch.compiler.is_compiling():  # stock torch.compile traces torch's own method
            return self.original.__get__(tensor, owner)
        return self.counted.__get__(tensor, owner)


def _counted_numpy(self, *args, **kwargs):
    EPOCH[0] = next(_TICKS)
    _count_use(self)
    try:
        return _ORIGINAL_NUMPY(self, *args, **kwargs)
    finally:
        EPOCH[0] = next(_TICKS)


def _counted_set(self, *args, **kwargs):
    EPOCH[0] = next(_TICKS)
    _count_use(self)
    for source in (*args[:1], *kwargs.values()):
        _count_source(source)
    try:
        return _ORIGINAL_SET(self, *args, **kwargs)
    finally:
        _count_use(self)
        EPOCH[0] = next(_TICKS)


def _count_source(source) -> None:
    if isinstance(source, torch.Tensor):
        _count_use(source)
    elif isinstance(source, (torch.UntypedStorage, torch.TypedStorage)):
        untyped = source if isinstance(source, torch.UntypedStorage) else source._untyped_storage
        if untyped._cdata in _USES:
            _USES[untyped._cdata] += 1


_ORIGINAL_NUMPY = torch._C.TensorBase.numpy
_ORIGINAL_SET = torch._C.TensorBase.set_
for _counted, _original in ((_counted_numpy, _ORIGINAL_NUMPY), (_counted_set, _ORIGINAL_SET)):
    functools.update_wrapper(_counted, _original)  # t.numpy's name, doc and signature stay torch's
_COUNTED = {"numpy": (_ORIGINAL_NUMPY, _counted_numpy), "set_": (_ORIGINAL_SET, _counted_set)}


def _bumping(original):
    def wrapper(*args, **kwargs):
        if torch.compiler.is_compiling():  # stock torch.compile traces the original (torch.from_dlpack)
            return original(*args, **kwargs)
        EPOCH[0] = next(_TICKS)
        _count_uses(args)  # NOTE [Uses counted per storage]
        try:
            return original(*args, **kwargs)
        finally:
            _count_uses(args)
            EPOCH[0] = next(_TICKS)  # NOTE [Bumped before and after]
    wrapper.__name__ = original.__name__
    wrapper.__qualname__ = getattr(original, "__qualname__", original.__name__)
    wrapper.__doc__ = original.__doc__
    wrapper.__wrapped__ = original
    return wrapper


# NOTE [Counting wrappers run in Python]: a compiled frame that calls a `_bumping` wrapper (an
# `AdamW(fused=True).step()` inside the compiled function: torch.optim looks up `torch._fused_adamw_`, the
# wrapper) inlined it with `is_compiling()` True and called the original at the break (NOTE [Writes that bump
# no version]), so EPOCH never moved and onnxrt's frozen weights served the weights of before the step (eval
# outputs 0.13-0.37 off eager's from the 3rd eval on). framejit never inlines the wrapper: a call of it is a
# break and runs the wrapper itself, which bumps EPOCH and counts the uses as eager's call does.
def _never_inlined(wrapper) -> None:
    from .capture.breaks import DISABLED
    DISABLED.add(wrapper.__code__)


_never_inlined(_bumping(len))


# NOTE [Storage writes count a use]: `w.untyped_storage().copy_(src)`, `.fill_(v)` and `s[i] = v` (and
# `w.storage().copy_(...)`, which calls the untyped storage's copy_) write w's memory without bumping any
# version: onnxrt's frozen weights (NOTE [Frozen weights]) served the old values (a Linear's bias copied
# over: outputs 2.45 off eager's; a weight filled: 0.45). `UntypedStorage.copy_`, `fill_` and `__setitem__`
# are wrapped on the class like `_swap_tensor_impl`: each call bumps EPOCH and counts a use of the storage
# written. Writes through the storage's `data_ptr()` (ctypes) stay unseen.
def _storage_writing(original):
    def wrapper(self, *args, **kwargs):
        if torch.compiler.is_compiling():
            return original(self, *args, **kwargs)
        EPOCH[0] = next(_TICKS)
        _count_source(self)
        try:
            return original(self, *args, **kwargs)
        finally:
            _count_source(self)
            EPOCH[0] = next(_TICKS)  # NOTE [Bumped before and after]
    functools.update_wrapper(wrapper, original)
    return wrapper


_never_inlined(_storage_writing(len))  # NOTE [Counting wrappers run in Python]


_STORAGE_WRITES = ("copy_", "fill_", "__setitem__")


# NOTE [Fused optimizer steps bump no version]: `torch._fused_adam_`, `_fused_adamw_`, `_fused_sgd_` and
# `_fused_adagrad_` (what `torch.optim.Adam/AdamW/SGD/Adagrad(..., fused=True)` call, looked up on `torch` at
# each step) write the parameters in place without bumping their version counters (checked with torch
# 2.13: a Linear's weight stays at _version 1 across `AdamW(fused=True).step()`; the foreach and for-loop
# steps bump it). onnxrt's frozen weights (NOTE [Frozen weights]) trusted the version and served the weights of
# before the step: eval outputs 0.5-0.9 off after each fused AdamW step. They are wrapped like
# `_swap_tensor_impl`: each call bumps EPOCH and counts a use of every tensor in its lists.
_FUSED_OPTIMIZER_STEPS = tuple((torch, name) for name in ("_fused_adam_", "_fused_adamw_", "_fused_sgd_",
                                                          "_fused_adagrad_"))


def install() -> None:
    """Count from now on (NOTE [Writes through .data]); a no-op once done."""
    if not _installed:
        _install()


def _install() -> None:
    global _installed
    if not _installed:
        torch.Tensor.data = property(_get_data, _set_data, doc=_ORIGINAL.__doc__)
        for name, (original, counted) in _COUNTED.items():  # NOTE [NumPy arrays count a use]
            if name not in torch.Tensor.__dict__:
                setattr(torch.Tensor, name, _Counting(original, counted))
        for module, name in ((torch._C, "_set_neg"), (torch._C, "_set_conj"), (torch._C, "_swap_tensor_impl"),
                             (torch._C._autograd, "_unsafe_set_version_counter"), (torch._C, "_to_dlpack"),
                             (torch._C, "_to_dlpack_versioned"), *_FUSED_OPTIMIZER_STEPS):
            original = getattr(module, name, None)
            if original is not None and not hasattr(original, "__wrapped__"):
                setattr(module, name, _bumping(original))
        for name in _STORAGE_WRITES:  # NOTE [Storage writes count a use]
            original = getattr(torch.UntypedStorage, name, None)
            if original is not None and not hasattr(original, "__wrapped__"):
                setattr(torch.UntypedStorage, name, _storage_writing(original))
        _installed = True


def watch(tensor: torch.Tensor) -> int:
    """Count `.data` uses of `tensor` and its aliases from now on (NOTE [Writes through .data], NOTE [Uses
    counted per storage]); returns `uses(tensor)`."""
    _install()
    return _USES.setdefault(_storage_key(tensor), 0)


def uses(tensor: torch.Tensor) -> int:
    """How many times `.data` of a tensor over `tensor`'s storage was read or assigned (or a wrapped function
    was given one) since that storage was first watched; -1 for a storage not watched."""
    return _USES.get(_storage_key(tensor), -1)  # NOTE [Uses counted per storage]


def unwatch_all() -> None:
    """Forget every watched storage (for tests; `uses()` of a storage watched before is then -1)."""
    _USES.clear()


# NOTE [Versions recorded inside a call, read after it]: a check made inside a graph's call that keeps a
# version to compare at the backward (NOTE [Inputs the graph writes, saved by eager] in
# backends/joint_outputs.py) must keep the version the tensor has when the call returns to the program. The
# wrapper of NOTE [Version counts of written inputs] (capture/input_versions.py) sets the written inputs'
# counters to eager's counts after the backend's call, so a version read inside it (the backend's write-back
# bumps, eager's write once: 2 where eager has 1) never matched again and every backward raised (review revO
# HIGH-1: a weight written under no_grad inside the function, then used). The wrapper opens a list for the
# call (`settling`); `read_after_call(entry)` puts the check's `[k, alias, version, ...]` on it, and the wrapper,
# after setting the counters, reads `entry[2] = entry[1]._version` again (`read_again`). Outside such a wrapper (a
# backend that bumps as eager does) the version read inside the call stands. One list per thread.
_SETTLING = threading.local()


def read_after_call(entry: list) -> None:
    """Have the wrapper of the running call read `entry[1]._version` into `entry[2]` when the call returns."""
    pending = getattr(_SETTLING, "pending", None)
    if pending is not None:
        pending.append(entry)


def settling() -> tuple:
    """Open the list of the call about to run; returns (the list, the one open before it)."""
    before = getattr(_SETTLING, "pending", None)
    _SETTLING.pending = pending = []
    return pending, before


def settled(opened: tuple) -> list:
    """Close the call's list (the one open before it is open again); returns the entries put on it."""
    pending, _SETTLING.pending = opened
    return pending


def read_again(pending: list) -> None:
    """After the wrapper set the counters: each entry's version as the program now sees it."""
    for entry in pending:
        entry[2] = entry[1]._version
