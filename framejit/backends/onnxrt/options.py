"""Options of the onnxrt backend: validation of the user's `options=` dict and ORT session options.

`parse_options(dict | None) -> OnnxrtOptions` is the only entry point; it raises TypeError/ValueError
naming the key and the accepted values, so a typo never silently falls back to a default.
`OnnxrtOptions` is frozen and hashable: its `cache_repr()` is part of the persistent-cache key of every
model made under it (only the keys that change the model bytes are in it).

Accepted keys (all optional):

| key                       | type / values                                   | default                      |
|---------------------------|-------------------------------------------------|------------------------------|
| providers                 | list of ORT execution provider names            | CUDA first when inputs are on CUDA and it exists, else CPU |
| intra_op_num_threads      | int >= 0 (0: ORT's choice)                      | torch.get_num_threads()      |
| inter_op_num_threads      | int >= 0                                        | 1                            |
| graph_optimization_level  | "disable", "basic", "extended", "all"           | "all"                        |
| allow_spinning            | bool: ORT's own spinning policy (`session.intra_op.allow_spinning`, unbounded) | False, see NOTE [No spinning]|
| spin_duration_us          | int >= 0: without `allow_spinning`, idle intra-op workers spin at most this long, then sleep (0: never spin) | 200, see NOTE [Bounded spinning] |
| opset                     | int, ONNX opset of the exported models, 18..23  | torchlib's default (18)      |
| fallback_ops              | iterable of aten op names ("aten::gelu", ...)   | () : ops forced to run eagerly |
| freeze_weights            | bool: weights are ORT constants in inference programs, rebuilt when they change (NOTE [Frozen weights], runtime.py; not seen: writes into a weight's memory from outside torch's tensors and storages, through raw pointers (ctypes on `data_ptr()`) or a `torch.utils.dlpack.to_dlpack` capsule, see watch.py) | True |
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import torch

# NOTE [No spinning]
# ORT's intra-op worker threads spin between runs by default. On the 2-core reference machine this
# slowed the *next eager* torch measurement from ~1 ms to ~9 ms (NOTES.md), and it steals cores from
# eager partitions that run between two ORT partitions of the same graph. framejit therefore sets
# `session.intra_op.allow_spinning` to "0" unless the user explicitly asks for spinning.

# NOTE [Bounded spinning]
# Without spinning, every operator ORT splits over its 2 threads wakes a sleeping worker, which costs more
# than small operators take; torch's OpenMP workers spin a while after each parallel region and never
# pay it. Measured (zoo, size bench, torch and ORT at 2 threads, each configuration timed in blocks of
# consecutive calls, blocks interleaved, run as SCHED_FIFO so that the shared machine's load of ~9 did
# not reach it): eager/framejit went from 0.79 to 1.18 (mlp), 1.26 -> 1.48 (cnn), 0.86 -> 0.93 (gpt),
# 0.84 -> 0.93 (bert), 0.79 -> 0.93 (vit), 0.75 -> 1.39 (gru_cell), 0.91 -> 0.98 (moe) when idle workers
# spin at most 200 us (ORT >= 1.27's `session.intra_op.spin_duration_us`) before they sleep. 50 us was
# slower (mlp 1.01, vit 1.23 vs 1.18, 1.27), 1000 us no faster than 200 us; ORT's own
# `session.force_spinning_stop` (spin during a run only) matched 200 us on the larger models but not on
# mlp (1.01: a loop of calls sleeps between them). Unlike ORT's unbounded spinning (NOTE [No spinning]),
# the eager call timed right after a compiled one was not slower than after a non-spinning one (mlp 0.91
# vs 0.89 ms, vit 11.1 vs 11.1 ms): a worker gives its core back 200 us after its last work. One thread per
# session (intra_op_num_threads=1) has no worker and does not spin. ORT before 1.27 may not know the duration and
# would spin unbounded, so there the workers do not spin. Per-session thread pools are kept: ORT's global
# pool (`set_global_thread_pool_sizes` + `use_per_session_threads = False`) measured the same (mlp 1.17 vs
# 1.19-1.20, vit 1.25-1.30 vs 1.06-1.31, bert 0.98-1.06 vs 0.98; separate processes, eager's own 2-thread
# time varied 13-16 ms for vit between processes), and once it exists ORT refuses every per-session
# pool of the process, the user's own sessions included, for good.
_DEFAULT_SPIN_US = 200
_BOUNDED_SPIN_ORT = (1, 27)

_OPT_LEVELS = ("disable", "basic", "extended", "all")
_MIN_OPSET, _MAX_OPSET = 18, 23


@dataclasses.dataclass(frozen=True)
class OnnxrtOptions:
    providers: tuple[str, ...] | None = None
    intra_op_num_threads: int | None = None
    inter_op_num_threads: int = 1
    graph_optimization_level: str = "all"
    allow_spinning: bool = False
    spin_duration_us: int = _DEFAULT_SPIN_US
    opset: int | None = None
    fallback_ops: frozenset[str] = frozenset()
    freeze_weights: bool = True

    def cache_repr(self) -> str:
        """The options that change the exported model bytes (ORT session settings do not)."""
        return f"opset={self.opset};fallback_ops={sorted(self.fallback_ops)}"


ACCEPTED_KEYS = tuple(f.name for f in dataclasses.fields(OnnxrtOptions))


def _check_int(key: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"onnxrt option {key!r} must be an int >= {minimum}, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"onnxrt option {key!r} must be an int >= {minimum}, got {value}")
    return value


def _check_providers(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise TypeError(
            "onnxrt option 'providers' must be a list of provider names such as "
            f"['CPUExecutionProvider'], got {type(value).__name__}"
        )
    import onnxruntime

    available = onnxruntime.get_available_providers()
    for name in value:
        if name not in available:
            raise ValueError(
                f"onnxrt option 'providers': {name!r} is not available; accepted: {', '.join(available)}"
            )
    if not value:
        raise ValueError("onnxrt option 'providers' must name at least one provider")
    return tuple(value)


def _check_fallback_ops(value: Any) -> frozenset[str]:
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        raise TypeError(
            "onnxrt option 'fallback_ops' must be a list of op names like ['aten::gelu'], "
            f"got {type(value).__name__}"
        )
    names = []
    for name in value:
        if not isinstance(name, str) or "::" not in name:
            raise ValueError(
                f"onnxrt option 'fallback_ops': {name!r} is not an op name like 'aten::gelu' "
                "or 'aten::add.Tensor'"
            )
        names.append(name)
    return frozenset(names)


def parse_options(options: Mapping[str, Any] | None) -> OnnxrtOptions:
    """Validate the user's options; unknown keys and bad values raise naming the accepted ones."""
    if options is None:
        return OnnxrtOptions()
    if isinstance(options, OnnxrtOptions):
        return options
    if not isinstance(options, Mapping):
        raise TypeError(f"onnxrt options must be a dict or None, got {type(options).__name__}")
    unknown = sorted(set(options) - set(ACCEPTED_KEYS))
    if unknown:
        raise ValueError(f"unknown onnxrt option(s) {unknown}; accepted: {', '.join(ACCEPTED_KEYS)}")
    values: dict[str, Any] = {}
    for key, value in options.items():
        if key == "providers":
            values[key] = None if value is None else _check_providers(value)
        elif key in ("intra_op_num_threads", "inter_op_num_threads", "spin_duration_us"):
            values[key] = _check_int(key, value, 0)
        elif key == "graph_optimization_level":
            if value not in _OPT_LEVELS:
                raise ValueError(
                    f"onnxrt option 'graph_optimization_level' must be one of {', '.join(_OPT_LEVELS)}, "
                    f"got {value!r}"
                )
            values[key] = value
        elif key in ("allow_spinning", "freeze_weights"):
            if not isinstance(value, bool):
                raise TypeError(f"onnxrt option {key!r} must be a bool, got {type(value).__name__}")
            values[key] = value
        elif key == "opset":
            values[key] = None if value is None else _check_int(key, value, _MIN_OPSET)
            if value is not None and value > _MAX_OPSET:
                raise ValueError(f"onnxrt option 'opset' must be in {_MIN_OPSET}..{_MAX_OPSET}, got {value}")
        elif key == "fallback_ops":
            values[key] = _check_fallback_ops(value)
    return OnnxrtOptions(**values)


def session_options(opts: OnnxrtOptions):
    """An `onnxruntime.SessionOptions` for `opts` (spinning off unless asked, see NOTE [No spinning])."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    threads = opts.intra_op_num_threads
    so.intra_op_num_threads = torch.get_num_threads() if threads is None else threads
    so.inter_op_num_threads = opts.inter_op_num_threads
    so.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[opts.graph_optimization_level]
    spin = "1" if opts.allow_spinning else "0"
    bounded = not opts.allow_spinning and opts.spin_duration_us > 0 and so.intra_op_num_threads != 1 \
        and _ort_version(ort.__version__) >= _BOUNDED_SPIN_ORT  # NOTE [Bounded spinning]
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if bounded else spin)
    if bounded:
        so.add_session_config_entry("session.intra_op.spin_duration_us", str(opts.spin_duration_us))
    so.add_session_config_entry("session.inter_op.allow_spinning", spin)
    # NOTE [ORT logs nothing]
    # Severity 4 (fatal only). ORT's warnings are about its own optimisations, and its errors are
    # raised as exceptions too: a kernel failing at run time (an index out of range) raises to
    # runtime.py, the call reruns eagerly and eager's exception reaches the user, who may catch it. At
    # severity 3 ORT also wrote an "[E:onnxruntime ... ExecuteKernel]" line to stderr that eager never
    # prints. framejit logs the failure itself (eager_fallback).
    so.log_severity_level = 4
    return so


def _ort_version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def providers_for(opts: OnnxrtOptions, device: torch.device) -> list[str] | None:
    """Execution providers for a graph whose inputs live on `device`; None when none can run it."""
    import onnxruntime as ort

    if opts.providers is not None:
        return list(opts.providers)
    if device.type == "cpu":
        return ["CPUExecutionProvider"]
    if device.type == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers():
        return [("CUDAExecutionProvider", {"device_id": device.index or 0}), "CPUExecutionProvider"]
    return None
