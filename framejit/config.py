"""Every framejit knob, declared once, typed and documented.

Environment variables are read when this module is imported; Python code may change the attributes at
run time (`framejit.config.recompile_limit = 4`). Other modules read `config.<name>` at the moment they
need it, never copy it at import time, so that changes take effect. An environment value that cannot be
read raises ValueError at import, naming the variable and the accepted values (NOTE [Bad environment
values]).

| attribute            | env var                  | meaning                                                       |
|----------------------|--------------------------|---------------------------------------------------------------|
| disable              | FRAMEJIT_DISABLE=1       | run every compiled function eagerly (1/true/yes/on, 0/false/no/off) |
| logs                 | FRAMEJIT_LOGS            | which logs to emit (see framejit.logs)                         |
| dump_dir             | FRAMEJIT_DUMP=<dir>      | write every generated artifact as readable files              |
| cache_dir            | FRAMEJIT_CACHE_DIR       | persistent cache directory                                    |
| cache_enabled        | FRAMEJIT_CACHE=0         | turn the persistent cache off                                 |
| cache_size_mb        | FRAMEJIT_CACHE_SIZE_MB   | size limit of the persistent cache (LRU eviction)             |
| remote_cache         | FRAMEJIT_REMOTE_CACHE    | redis://[user:password@]host:port/db (or rediss://): a shared cache tier (cache/remote.py) |
| cache_key_file       | FRAMEJIT_CACHE_KEY_FILE  | file holding the key that signs remote entries (or FRAMEJIT_CACHE_KEY, read when needed) |
| remote_cache_timeout_ms | FRAMEJIT_REMOTE_CACHE_TIMEOUT_MS | bound on one Redis call (default 250)             |
| remote_cache_max_mb  | FRAMEJIT_REMOTE_CACHE_MAX_MB | largest remote entry read or written (default 64)         |
| recompile_limit      | FRAMEJIT_RECOMPILE_LIMIT | compiled entries per code object before running eagerly (0: never compile, run eagerly) |
| inline_depth_limit   | -                        | deepest chain of inlined user calls                           |
| dynamic_floats       | FRAMEJIT_DYNAMIC_FLOATS=0| float arguments that changed value become graph inputs        |
| automatic_dynamic    | FRAMEJIT_AUTOMATIC_DYNAMIC=0 | with dynamic=None: tensor dims whose size changed, and int arguments that changed, become symbolic |
"""
from __future__ import annotations

import os


# NOTE [Bad environment values]: a value framejit cannot read is an error at import time naming the
# variable and what it accepts, never a silent default: `FRAMEJIT_DISABLE=maybe` must not compile, and
# `FRAMEJIT_CACHE_SIZE_MB=-5` must not mean "evict everything".
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    word = value.strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ValueError(f"{name}={value!r} is not a switch; accepted: {', '.join(_TRUE)} (on) or "
                     f"{', '.join(_FALSE)} (off), or unset")


def _env_int(name: str, default: int, minimum: int, meaning: str) -> int:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        number = None
    if number is None or number < minimum:
        raise ValueError(f"{name}={value!r} is not accepted; expected an integer >= {minimum} ({meaning}), "
                         f"or unset for the default {default}")
    return number


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "framejit")


disable: bool = _env_flag("FRAMEJIT_DISABLE", False)
logs: str = os.environ.get("FRAMEJIT_LOGS", "")
dump_dir: str | None = os.environ.get("FRAMEJIT_DUMP") or None
cache_dir: str = os.environ.get("FRAMEJIT_CACHE_DIR") or _default_cache_dir()
cache_enabled: bool = _env_flag("FRAMEJIT_CACHE", True)
cache_size_mb: int = _env_int("FRAMEJIT_CACHE_SIZE_MB", 1024, 0, "megabytes")
remote_cache: str | None = os.environ.get("FRAMEJIT_REMOTE_CACHE") or None
cache_key_file: str | None = os.environ.get("FRAMEJIT_CACHE_KEY_FILE") or None
remote_cache_timeout_ms: int = _env_int("FRAMEJIT_REMOTE_CACHE_TIMEOUT_MS", 250, 1, "milliseconds per Redis call")
remote_cache_max_mb: int = _env_int("FRAMEJIT_REMOTE_CACHE_MAX_MB", 64, 1, "megabytes")
recompile_limit: int = _env_int("FRAMEJIT_RECOMPILE_LIMIT", 8, 0, "compiled entries per function; 0: never compile")
inline_depth_limit: int = 32
dynamic_floats: bool = _env_flag("FRAMEJIT_DYNAMIC_FLOATS", True)
automatic_dynamic: bool = _env_flag("FRAMEJIT_AUTOMATIC_DYNAMIC", True)  # NOTE [Automatic dynamic] in capture/hook.py
