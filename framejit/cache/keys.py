"""Cache keys: a sha256 over the runtime versions and the parts a caller says change the result.

Role: `cache_key(kind="onnx", graph=..., inputs=..., backend=..., options=...)` turns everything that
changes a compiled artifact into one 64-digit hex string. The caller decides what the parts are (the
canonical graph code, input metadata, the backend's version key, the device, relevant options); this
module always adds framejit's version, the Python implementation and version, torch's version and the
machine architecture, so an entry can never be loaded by a runtime that did not write it.

Invariants:
- Deterministic across processes and runs: the parts are serialised as canonical JSON (sorted keys,
  no whitespace choices left open), never with `repr` of arbitrary objects, `id()` or `hash()`.
- Any change of any part, or of a part's name, gives a different key.
- Only JSON-like values (str, int, float, bool, None, and lists/tuples/dicts of them with str keys)
  are accepted; anything else is a TypeError naming the part, because its text form would not be
  stable.

Main functions: `cache_key(**parts) -> str`, `runtime_versions() -> dict[str, str]`,
`is_valid_key(key) -> bool`.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import re
import sys

_KEY_RE = re.compile(r"[0-9a-f]{64}")
_SCALARS = (str, int, float, bool, type(None))


@functools.lru_cache(maxsize=None)
def runtime_versions() -> dict[str, str]:
    """The versions every key depends on; also recorded in each entry (see NOTE [Entry file format])."""
    # NOTE [Torch version in keys]
    # torch.__version__ carries the local build tag ("2.14.1+cu130" vs "2.14.1+cpu"); the package
    # metadata does not ("2.14.1"), and two such builds produce different kernels. So we import torch
    # here. Callers that make keys (backends, the frame cache) have imported it already.
    import torch

    from framejit import __version__ as framejit_version

    from .. import logs
    # NOTE [Source digest in keys]: an edited checkout turns every entry written before into a miss, which
    # no single process can see; two processes' logs show it as two different digests (issue 16: a "warm"
    # process that traced again in a shared tree another helper was editing).
    logs.log("cache", "framejit source digest %s (part of every cache key: an edit of framejit makes earlier "
             "entries misses)", source_digest()[:16])
    return {
        "framejit": framejit_version,
        "framejit_source": source_digest(),
        "python": f"{sys.implementation.name}-{'.'.join(map(str, sys.version_info[:3]))}",
        "torch": torch.__version__,
        "machine": platform.machine(),
    }


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
    """A sha256 over framejit's own Python sources (paths and contents).

    NOTE [Source digest in keys]
    What a persisted entry means (guards, graphs, lowered code) depends on framejit's code, not only on
    its version string: an edited checkout, a development install or a patched release with the same
    `__version__` must not load entries another framejit wrote. The FORMAT/REVISION constants cover the
    changes someone remembered to bump; this digest covers the rest. It is content-based, so identical
    installs on different machines (a shared Redis cache) still share entries. Computed once per
    process, the first time a key is made (a few milliseconds for the whole package)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256()
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            digest.update(rel.encode() + b"\0")
            with open(path, "rb") as f:
                digest.update(hashlib.sha256(f.read()).digest())
    return digest.hexdigest()


def _check_part(name: str, value: object, path: str = "") -> None:
    where = f"{name}{path}"
    if isinstance(value, _SCALARS):
        if isinstance(value, float) and value != value:
            raise ValueError(f"cache_key part {where!r} is NaN, which has no stable text form")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_part(name, item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise TypeError(f"cache_key part {where!r} has a non-str dict key {k!r}")
            _check_part(name, item, f"{path}[{k!r}]")
        return
    raise TypeError(
        f"cache_key part {where!r} must be str, int, float, bool, None or a list/tuple/dict of those, "
        f"got {type(value).__name__}; pass a canonical string instead"
    )


def cache_key(**parts: object) -> str:
    """A hex sha256 over the runtime versions and `parts` (see the module docstring)."""
    if not parts:
        raise ValueError("cache_key needs at least one part, e.g. cache_key(kind='onnx', graph=code)")
    for name, value in parts.items():
        _check_part(name, value)
    document = {"runtime": runtime_versions(), "parts": parts}
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def is_valid_key(key: object) -> bool:
    """True for the keys `cache_key` makes: 64 lowercase hex digits (also keeps keys out of paths)."""
    return isinstance(key, str) and _KEY_RE.fullmatch(key) is not None
