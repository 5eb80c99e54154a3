"""Every framejit knob, declared once, typed and documented.

Environment variables are read when this module is imported; Python code may change the attributes at
run time (`framejit.config.recompile_limit = 4`). Other modules read `config.<name>` at the moment they
need it, never copy it at import time, so that changes take effect.

| attribute            | env var                  | meaning                                                       |
|----------------------|--------------------------|---------------------------------------------------------------|
| disable              | FRAMEJIT_DISABLE=1       | run every compiled function eagerly                           |
| logs                 | FRAMEJIT_LOGS            | which logs to emit (see framejit.logs)                         |
| dump_dir             | FRAMEJIT_DUMP=<dir>      | write every generated artifact as readable files              |
| cache_dir            | FRAMEJIT_CACHE_DIR       | persistent cache directory                                    |
| cache_enabled        | FRAMEJIT_CACHE=0         | turn the persistent cache off                                 |
| cache_size_mb        | FRAMEJIT_CACHE_SIZE_MB   | size limit of the persistent cache (LRU eviction)             |
| recompile_limit      | FRAMEJIT_RECOMPILE_LIMIT | compiled entries per code object before running eagerly       |
| inline_depth_limit   | -                        | deepest chain of inlined user calls                           |
| dynamic_floats       | FRAMEJIT_DYNAMIC_FLOATS=0| float arguments that changed value become graph inputs        |
"""
from __future__ import annotations

import os


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    return value.strip().lower() not in ("0", "false", "no", "off")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {value!r}") from None


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "framejit")


disable: bool = _env_flag("FRAMEJIT_DISABLE", False)
logs: str = os.environ.get("FRAMEJIT_LOGS", "")
dump_dir: str | None = os.environ.get("FRAMEJIT_DUMP") or None
cache_dir: str = os.environ.get("FRAMEJIT_CACHE_DIR") or _default_cache_dir()
cache_enabled: bool = _env_flag("FRAMEJIT_CACHE", True)
cache_size_mb: int = _env_int("FRAMEJIT_CACHE_SIZE_MB", 1024)
recompile_limit: int = _env_int("FRAMEJIT_RECOMPILE_LIMIT", 8)
inline_depth_limit: int = 32
dynamic_floats: bool = _env_flag("FRAMEJIT_DYNAMIC_FLOATS", True)
