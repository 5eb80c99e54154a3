"""Fake tensor modes that leave no weak references on the user's tensors once a trace is done.

Role: a `FakeTensorMode` remembers every real tensor it converted (`from_tensor`, make_fx's inputs) in its
describer's `WeakIdKeyDictionary`s, one `weakref` per tensor and storage, for as long as the mode lives,
and it lives as long as any fake tensor it made: the `meta["val"]` of a graph framejit keeps, so as long
as the compiled entry or backend program. `torch.utils.swap_tensors` refuses a tensor with a weak
reference ("Cannot swap t1 because it has weakref associated with it"), so after one compiled call a
parameter could no longer be swapped (`swap_tensors`, `module.to()` and `load_state_dict` under
`torch.__future__.set_swap_module_params_on_conversion(True)`), where eager swaps it (NOTE [Traces leave no
weak references]). Main functions: `tracing()` (around a frame's translation: the modes made inside forget
their real tensors when the outermost one ends), `register()` (a mode made by capture), `forget_real_tensors`
(one mode) and `forget_modes_of(gm)` (the modes of a traced graph's values, for backends after make_fx).
"""
from __future__ import annotations

import contextlib
import weakref

# NOTE [Traces leave no weak references]
# TorchDynamo clears the same two dictionaries at the end of a compile (`_clear_fake_mode_weakrefs` in
# torch/_dynamo/convert_frame.py). Cleared only when the trace that used the mode is over: while tracing,
# the describer is what maps a second view of one real storage to the same fake storage (so that writes
# through views are seen on the fakes: NOTE [Input mutation] in capture/graph.py); the fakes themselves
# keep their ids and stay valid. Frame translations nest in no ordinary program, but `tracing()` counts
# depth so that an inner one never clears an outer one's modes. Backends that trace with make_fx call
# `forget_modes_of(traced)` once make_fx returned (onnxrt/lowering.py, triton/lowering.py).
_MODES: "weakref.WeakSet" = weakref.WeakSet()
_DEPTH = [0]


def forget_real_tensors(mode) -> None:
    """Drop the weak references `mode` keeps to real tensors and storages it converted."""
    describer = getattr(getattr(getattr(mode, "fake_tensor_converter", None), "meta_converter", None),
                        "describer", None)
    if describer is not None:
        describer.lookup_tensor.clear()
        describer.lookup_storage.clear()


def register(mode) -> None:
    """A mode made for a frame's translation: it forgets its real tensors when `tracing()` ends."""
    _MODES.add(mode)


@contextlib.contextmanager
def tracing():
    """Around one frame's translation and compilation (NOTE [Traces leave no weak references])."""
    _DEPTH[0] += 1
    try:
        yield
    finally:
        _DEPTH[0] -= 1
        if not _DEPTH[0]:
            modes = list(_MODES)
            _MODES.clear()
            for mode in modes:
                forget_real_tensors(mode)
            del modes
            _collect_young()  # NOTE [Trace garbage collected]


# NOTE [Trace garbage collected]: a trace leaves reference cycles behind (its values and OutputGraph refer to each
# other; exceptions caught while tracing keep their tracebacks, whose frames hold the exception; the first
# trace of a process imports torch._dynamo, whose `torch.fx.wrap()` keeps its own frame in a local), and
# through the frames of framejit's convert and translator calls they hold every object the traced call got
# or made: the arguments, a resume function's locals. Eager keeps none of them past its own frame, so after
# a call that traced, `weakref.WeakValueDictionary` caches still answered objects eager had dropped, a local
# deleted after a break outlived eager's `del` (its `weakref.finalize` ran at the next automatic collection,
# never with collection off), where hit calls already freed it (NOTE [Arguments handed to resume functions] in
# capture/lifetimes.py). Tracing runs with collection off (NOTE [No GC while restoring] in capture/hook.py),
# so everything it made is in the youngest generation: collecting only that one when the outermost trace
# ends frees those cycles (their frames, values and graphs, never the entry: the hook still holds it) and
# costs a walk of what the trace made (a full collection of the process heap costs 0.3-0.7 s).
def _collect_young() -> None:
    import gc
    gc.collect(0)


def forget_modes_of(gm) -> None:
    """Forget the real tensors of every fake mode whose fakes are `gm`'s node values (after make_fx)."""
    seen = set()
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        for item in (val if isinstance(val, (tuple, list)) else (val,)):
            mode = getattr(item, "fake_mode", None)
            if mode is not None and id(mode) not in seen:
                seen.add(id(mode))
                forget_real_tensors(mode)
