"""Stock torch.compile's graph and op counts for the HF tests, recorded per environment, live on a miss.

NOTE [Stock counts table]
The HF tests (test_hf_models, test_hf_training, test_dynamic_models) assert that framejit captures no more
graphs than stock `torch.compile` (a counting eager backend) over the very same calls, holding at least
harness.OP_SHARE of its tensor ops. Computing that reference live was ~44% of those tests' CPU (measured,
loaded machine: switch_transformers 35 s of stock for 18 s of framejit, bert 3.7 s for 2.0 s), and each
reference is used by one test only, so a per-process cache saves nothing. Instead the counts are recorded:

- The reference is a pure function of: the Python minor version, torch's and transformers' versions
  (exact, local suffix included), torch._dynamo's config (its bool/int/float settings), the model (its
  class, its config and generation config as JSON, every submodule's class and training flag, every
  parameter's and buffer's name, dtype, shape, requires_grad and bytes), the calls (every key and value:
  tensor bytes, dtype, shape, requires_grad; other values by repr), what is called (`forward`, `generate`,
  a training step) and how the counts are taken (REVISION). `key()` digests all of it from the live
  objects at the point where the test would run the reference.
- `stock_counts()` looks the digest up in stock_counts/<environment>.json. A hit returns the recorded
  counts; a miss computes the reference live, as before (never a stale compare) and warns once per process,
  naming which part of the key changed when the test's earlier entry is found.
- `python -m tests.models.hf.stock_table` (re)writes this environment's file: it deletes it and runs the
  HF tests with HF_STOCK_COUNTS=record (every reference live, then recorded with the test's id). Run it
  with each venv whose suite should hit (CI: .venv and .venv312) after torch or transformers changes.
  HF_STOCK_COUNTS=live ignores the table.
- test_hf_models.py::test_stock_table_matches_a_live_reference recomputes two recorded entries live in
  every run, so a dependency missing from the key shows up as a failure rather than a silent mismatch.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

# Bump when what a recorded count means changes (CountingBackend, harness.op_count, the way
# harness.stock_reference or a test drives the reference).
REVISION = 1
MODE_VAR = "HF_STOCK_COUNTS"  # "table" (default), "live" (ignore the table), "record" (live, then recorded)
DIRECTORY = Path(__file__).with_name("stock_counts")


@dataclasses.dataclass(frozen=True)
class StockCounts:
    """What the tests read of the reference: its graph count and the tensor ops in its graphs."""
    graph_count: int
    ops: int
    source: str  # "table" or "live"


def environment() -> str:
    import transformers
    return (f"py{sys.version_info.major}.{sys.version_info.minor}-torch{torch.__version__}"
            f"-transformers{transformers.__version__}")


def table_path() -> Path:
    return DIRECTORY / f"{environment()}.json"


def _update(h: "hashlib._Hash", value: Any) -> None:
    """Feed a value into the digest: tensors by their bytes and metadata, containers recursively."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}{value.requires_grad}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, dict):
        h.update(f"D{len(value)}|".encode())
        for k, v in value.items():
            _update(h, k)
            _update(h, v)
    elif isinstance(value, (list, tuple)):
        h.update(f"L{type(value).__name__}{len(value)}|".encode())
        for v in value:
            _update(h, v)
    elif value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device)):
        h.update(f"V{type(value).__name__}:{value!r}|".encode())
    else:
        raise TypeError(f"stock table key: no digest for a {type(value).__qualname__}")


def _digest(value: Any) -> str:
    h = hashlib.sha256()
    _update(h, value)
    return h.hexdigest()[:24]


def _model_parts(model: torch.nn.Module, method: str | None) -> list:
    parts: list = [f"{type(model).__module__}.{type(model).__qualname__}"]
    for attr in ("config", "generation_config") if method == "generate" else ("config",):
        config = getattr(model, attr, None)
        if config is not None:
            parts.append(config.to_json_string(use_diff=False))
    parts.append([(n, f"{type(m).__module__}.{type(m).__qualname__}", m.training) for n, m in model.named_modules()])
    parts.append(dict(model.named_parameters()))
    parts.append(dict(model.named_buffers()))
    return parts


def _dynamo_config() -> dict:
    import torch._dynamo.config as dynamo_config  # read only: the reference compiler's settings
    return {k: v for k, v in sorted(dynamo_config.get_config_copy().items()) if isinstance(v, (bool, int, float))}


def key_parts(kind: str, model: torch.nn.Module, calls: list, method: str | None = None) -> dict[str, str]:
    """The digests the key is made of (named, so that a miss can say which part changed)."""
    return {"environment": _digest([environment(), REVISION]), "dynamo_config": _digest(_dynamo_config()),
            "model": _digest(_model_parts(model, method)), "calls": _digest([kind, method, calls])}


def key(parts: dict[str, str]) -> str:
    return _digest(sorted(parts.items()))


def _mode() -> str:
    mode = os.environ.get(MODE_VAR, "table")
    if mode not in ("table", "live", "record"):
        raise ValueError(f"{MODE_VAR}={mode!r}: expected table, live or record")
    return mode


_loaded: dict[Path, dict] = {}
_warned = False


def _table(path: Path) -> dict:
    if path not in _loaded:
        _loaded[path] = json.loads(path.read_text())["entries"] if path.exists() else {}
    return _loaded[path]


def _test_id() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]


def _record(path: Path, digest: str, counts: StockCounts, parts: dict[str, str]) -> None:
    entries = json.loads(path.read_text())["entries"] if path.exists() else {}
    entries[digest] = {"graphs": counts.graph_count, "ops": counts.ops, "test": _test_id(), "parts": parts}
    path.parent.mkdir(exist_ok=True)
    body = {"environment": environment(), "revision": REVISION,
            "entries": dict(sorted(entries.items(), key=lambda kv: kv[1]["test"]))}
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body, indent=1) + "\n")
    tmp.replace(path)
    _loaded.pop(path, None)


def _warn_miss(path: Path, parts: dict[str, str], entries: dict) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    test = _test_id()
    earlier = [e["parts"] for e in entries.values() if e.get("test") == test]
    changed = sorted({k for p in earlier for k in parts if p.get(k) != parts[k]}) if earlier else None
    why = f"its recorded entry differs in {', '.join(changed)}" if changed else f"no entry in {path.name}"
    warnings.warn(f"stock counts table: {test} computed stock torch.compile live ({why}); regenerate with "
                  f"`python -m tests.models.hf.stock_table` (NOTE [Stock counts table]). Later misses are not "
                  f"reported.", stacklevel=3)


def stock_counts(kind: str, model: torch.nn.Module, calls: list, live: Callable[[], Any],
                 method: str | None = None, ops: Callable[[Any], int] | None = None) -> StockCounts:
    """The reference's counts for `kind` (e.g. "forward") of `model` over `calls`: from the table, or
    `live()` (a CountingBackend after running the reference) on a miss. `ops(backend)` counts its ops."""
    mode = _mode()
    parts = key_parts(kind, model, calls, method)
    digest = key(parts)
    path = table_path()
    if mode == "table":
        entries = _table(path)
        if digest in entries:
            return StockCounts(entries[digest]["graphs"], entries[digest]["ops"], "table")
        _warn_miss(path, parts, entries)
    backend = live()
    counts = StockCounts(backend.graph_count, ops(backend) if ops else 0, "live")
    if mode == "record":
        _record(path, digest, counts, parts)
    return counts


# The tests whose references the table holds (every stock reference of these files goes through stock_counts).
TEST_FILES = ("tests/models/hf/test_hf_models.py", "tests/models/hf/test_hf_training.py",
              "tests/models/test_dynamic_models.py", "tests/models/hf/test_hf_generate_train.py",
              "tests/models/hf/test_hf_reentrant_checkpoint.py")
TESTS = ("test_forward or test_generate_greedy or test_classification_head_training or than_stock "
         "or test_stock_table or test_generate_of_the_compiled_module or test_training_step_with_optimizer")


def main(argv: list[str]) -> int:
    """Rewrite this environment's table: delete it, run the tests with HF_STOCK_COUNTS=record."""
    import subprocess
    root = Path(__file__).resolve().parents[3]
    path = table_path()
    if path.exists():
        path.unlink()
    env = dict(os.environ, **{MODE_VAR: "record"})
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TEST_FILES, "-k", TESTS, *argv]
    print(f"recording {path.relative_to(root)}: {' '.join(cmd)}", flush=True)
    rc = subprocess.call(cmd, cwd=root, env=env)
    entries = json.loads(path.read_text())["entries"] if path.exists() else {}
    print(f"{len(entries)} entries in {path.relative_to(root)} (pytest exit status {rc}; a failing framejit check "
          f"does not stop its reference from being recorded)")
    return 0 if entries else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))


__all__ = ["DIRECTORY", "MODE_VAR", "REVISION", "StockCounts", "environment", "key", "key_parts", "stock_counts",
           "table_path"]
