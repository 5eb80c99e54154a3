"""Running catalog models eagerly, under stock torch.compile (the reference) and under framejit.

Role: the pieces that tests/models/hf/test_hf_models.py, tools/hf_triage.py and benchmarks/models.py
share, so that all three measure the same thing:
- `assert_outputs_close(actual, expected)`: recursive comparison of what a transformers model returns
  (ModelOutput fields in order, tuples, dicts, KV caches compared field by field, tensors with a
  tolerance); an unknown type is an error, never silently equal.
- `stock_reference(model, calls)`: the graphs stock `torch.compile(backend=<counting eager>)` captures
  over the same calls (torch._dynamo is reset around it; only tests, tools and benchmarks may use it);
  `op_count(backend)`: the tensor operations in a counting backend's graphs (how much work they hold);
  `stock(model, calls)`: the reference's graph and op counts, recorded or live (NOTE [Stock counts table]).
- `eager_frame_count()`, `eager_frame_reasons()`: the frames framejit has run wholly eagerly so far in
  this process, from `framejit.stats()` (the one place that reads that stat).
- `calls(arch)`: the keyword inputs of the two calls every check makes (two seeds, the same shapes), and
  `resized_call(arch)`: a third call at another batch and sequence size for the few marked `resize`.

All forwards run under `torch.no_grad()` (the catalog is for inference).
"""
from __future__ import annotations

import logging
import warnings
from typing import Any, Callable

import torch

import framejit
from tests.helpers import CountingBackend
from tests.models.hf import catalog, stock_table

ATOL = RTOL = 1e-5

# NOTE [HF op share]: framejit's graphs must hold at least this share of the tensor ops (call nodes) of
# stock torch.compile's graphs over the same calls. Graph counts alone let a model "pass" whose breaks
# leave most of its work outside any graph (measured: mbart, 2 graphs of 2 ops vs stock's 1 of 219);
# the slack allows for legitimately different but equivalent captures (vit today: 61 ops each).
OP_SHARE = 0.9


def silence_transformers() -> None:
    """No config or deprecation chatter from transformers (nor the reference's break warnings) in runs."""
    warnings.filterwarnings("ignore", module=r"transformers(\.|$)")
    warnings.filterwarnings("ignore", message=r".*(attention_mask|sdpa|SDPA|deprecated).*")
    try:
        from transformers.utils import logging as hf_logging
        hf_logging.set_verbosity_error()
    except ImportError:
        pass
    logging.getLogger("transformers").setLevel(logging.ERROR)
    logging.getLogger("torch._dynamo").setLevel(logging.ERROR)  # the reference's graph-break warnings
    warnings.filterwarnings("ignore", module=r"torch\._dynamo(\.|$)")


def calls(arch: catalog.Arch) -> list[dict]:
    """Fresh keyword inputs for the two calls every check makes (seeds 0 and 1, the same shapes)."""
    return [arch.make_inputs(0), arch.make_inputs(1)]


def resized_call(arch: catalog.Arch) -> dict | None:
    """Inputs of the extra call at another batch and sequence size, for architectures marked `resize`."""
    return arch.make_inputs(2, batch=1, seq=catalog.SEQ_ALT) if arch.resize else None


def run(model: Callable, kwargs: dict) -> Any:
    with torch.no_grad():
        return model(**kwargs)


def eager_frame_count() -> int:
    """Frames framejit decided to run wholly eagerly so far: stats()["eager_frames"] (NOTE [Eager frames]);
    before that stat existed, the eager entries made (stats()["eager_entries"])."""
    stats = framejit.stats()
    return int(stats["eager_frames"] if "eager_frames" in stats else stats["eager_entries"])


def eager_frame_reasons() -> list:
    """framejit's records of the frames it ran wholly eagerly (function, location, reason), if it keeps them."""
    return list(framejit.stats().get("eager_frame_reasons", []))


def stock_reference(model: torch.nn.Module, inputs: list[dict], method: str | None = None) -> CountingBackend:
    """The graphs stock torch.compile captures over `inputs` (a fresh dynamo state, a counting eager backend).

    With `method` (e.g. "generate"), `model.forward` is compiled for the duration and `model.<method>` is
    called: torch.compile's module wrapper would hand `generate` the uncompiled module."""
    import torch._dynamo  # the reference compiler: tests and tools only, never framejit's own code
    torch._dynamo.reset()
    backend = CountingBackend()
    if method:  # generate() and friends call self(...): compile the forward they reach
        model.forward = torch.compile(model.forward, backend=backend)
    compiled = getattr(model, method) if method else torch.compile(model, backend=backend)
    try:
        for kwargs in inputs:
            run(compiled, kwargs)
    finally:
        if method:
            del model.forward
        torch._dynamo.reset()
    return backend


def op_count(backend: CountingBackend) -> int:
    """Tensor operations (call nodes) in all of a counting backend's graphs: how much work was captured."""
    return sum(backend.op_count(i) + sum(1 for n in gm.graph.nodes if n.op == "call_module")
               for i, gm in enumerate(backend.graphs))


def stock(model: torch.nn.Module, inputs: list[dict], method: str | None = None) -> stock_table.StockCounts:
    """stock_reference's graph count and op_count over `inputs`: the recorded ones for exactly this
    environment, model and inputs, else computed live (NOTE [Stock counts table])."""
    return stock_table.stock_counts(method or "forward", model, inputs, lambda: stock_reference(model, inputs, method),
                                    method=method, ops=op_count)


def assert_outputs_close(actual: Any, expected: Any, path: str = "out", *, atol: float = ATOL,
                         rtol: float = RTOL) -> None:
    """`actual` equals `expected` in type and structure, with tensors close to within atol/rtol."""
    assert type(actual) is type(expected), f"{path}: type {type(actual).__name__} != {type(expected).__name__}"
    if isinstance(expected, torch.Tensor):
        assert actual.shape == expected.shape and actual.dtype == expected.dtype, \
            f"{path}: {actual.dtype}{list(actual.shape)} != {expected.dtype}{list(expected.shape)}"
        torch.testing.assert_close(actual, expected, atol=atol, rtol=rtol, equal_nan=True, msg=lambda m: f"{path}: {m}")
    elif isinstance(expected, dict):  # ModelOutput is an OrderedDict: its set fields, in order
        assert list(actual.keys()) == list(expected.keys()), f"{path}: keys {list(actual)} != {list(expected)}"
        for key in expected:
            assert_outputs_close(actual[key], expected[key], f"{path}.{key}", atol=atol, rtol=rtol)
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), f"{path}: length {len(actual)} != {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_outputs_close(a, e, f"{path}[{i}]", atol=atol, rtol=rtol)
    elif type(expected).__module__ == "transformers.cache_utils":  # KV caches and their layers
        assert_outputs_close(vars(actual), vars(expected), path, atol=atol, rtol=rtol)
    elif expected is None or isinstance(expected, (bool, int, float, str, torch.device, torch.dtype)):
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"
    else:
        raise TypeError(f"{path}: cannot compare a {type(expected).__module__}.{type(expected).__qualname__}")


__all__ = ["ATOL", "OP_SHARE", "RTOL", "assert_outputs_close", "calls", "eager_frame_count", "eager_frame_reasons",
           "op_count", "resized_call", "run", "silence_transformers", "stock", "stock_reference"]
