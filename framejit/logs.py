"""FRAMEJIT_LOGS parsing and the named log artifacts, in the style of TORCH_LOGS.

Every log goes through the standard `logging` module under the `framejit` logger tree, so users can
route it like any other log. An *artifact* is a named stream (`graph_breaks`, `recompiles`, ...) with its
own logger `framejit.<artifact>`; it is emitted only when enabled, either by `FRAMEJIT_LOGS` or by
`framejit.set_logs(...)`.

Syntax of FRAMEJIT_LOGS: a comma-separated list of names; `+name` enables it at DEBUG level, `-name`
silences it, `all` enables every artifact, `help` prints the list of names.

Output: the first time any artifact is enabled, one stream handler (stderr, `[framejit.<artifact>]`
prefix) is added to the `framejit` logger, unless that logger already has a handler of the user's.
Records also propagate to the root logger, so `caplog` and handlers there see them; when a root
handler will emit a record, framejit's own handler leaves it to that one (NOTE [One output per record]).

Usage inside framejit:

    from framejit import logs
    if logs.enabled("graph_code"):
        logs.log("graph_code", "%s", gm.code)
"""
from __future__ import annotations

import logging
import sys

from . import config

ARTIFACTS: dict[str, str] = {
    "graph_breaks": "one record per graph break: function, user file:line and source, reason, hint",
    "recompiles": "a recompile: function, file:line, the failing guard with expected and actual values",
    "recompiles_verbose": "a recompile with every failing guard of every entry",
    "guards": "the generated guard function of every compiled entry",
    "graph": "each captured FX graph, as a readable table",
    "graph_code": "each captured FX graph, as Python code",
    "bytecode": "original and transformed bytecode of every compiled frame",
    "output_code": "what the backend made of each graph",
    "fusion": "fusion decisions of the triton backend",
    "cache": "persistent cache hits, misses, writes and rejected entries",
    "eager_fallback": "frames or graphs that ran eagerly, and why",
}

_ROOT = logging.getLogger("framejit")
_enabled: dict[str, int] = {}
_handler: logging.Handler | None = None


class UnknownLogName(ValueError):
    pass


def _parse(spec: str) -> dict[str, int]:
    result: dict[str, int] = {}
    for raw in spec.split(","):
        name = raw.strip()
        if not name:
            continue
        level = logging.INFO
        if name.startswith("+"):
            level, name = logging.DEBUG, name[1:]
        elif name.startswith("-"):
            level, name = logging.CRITICAL + 1, name[1:]
        if name == "help":
            print(help_text(), file=sys.stderr)
            continue
        names = list(ARTIFACTS) if name == "all" else [name]
        for n in names:
            if n not in ARTIFACTS:
                raise UnknownLogName(
                    f"unknown log name {n!r} in FRAMEJIT_LOGS/set_logs; accepted: all, help, "
                    f"{', '.join(ARTIFACTS)} (prefix + for debug, - to silence)"
                )
            result[n] = level
    return {k: v for k, v in result.items() if v <= logging.CRITICAL}


def help_text() -> str:
    lines = ["FRAMEJIT_LOGS names (prefix + for debug, - to silence; 'all' for every one):"]
    lines += [f"  {name:20s} {doc}" for name, doc in ARTIFACTS.items()]
    return "\n".join(lines)


def set_logs(spec: str | None = None, **flags: bool) -> None:
    """Enable logs from Python: `set_logs("graph_breaks,recompiles")` or `set_logs(graph_breaks=True)`.

    Calling it replaces the previous selection (including what FRAMEJIT_LOGS chose).
    """
    if spec is not None and not isinstance(spec, str):
        raise TypeError(f"set_logs(spec) must be a str like 'graph_breaks,recompiles', got {type(spec).__name__}")
    parts = [spec] if spec else []
    for name, on in flags.items():
        if name not in ARTIFACTS:
            raise UnknownLogName(f"unknown log name {name!r}; accepted: {', '.join(ARTIFACTS)}")
        if on:
            parts.append(name)
    _configure(",".join(parts))


def _configure(spec: str) -> None:
    global _handler
    selection = _parse(spec)  # before touching the current selection: a bad spec changes nothing
    _enabled.clear()
    _enabled.update(selection)
    for name in ARTIFACTS:
        logger = _ROOT.getChild(name)
        logger.setLevel(_enabled.get(name, logging.WARNING))
    if _enabled and _handler is None and not _ROOT.handlers:
        _handler = logging.StreamHandler()
        _handler.setFormatter(logging.Formatter("[framejit.%(artifact)s] %(message)s"))
        _handler.addFilter(_ArtifactFilter())
        _ROOT.addHandler(_handler)
        _ROOT.propagate = True


# NOTE [One output per record]: framejit's default handler sits on the `framejit` logger and records
# propagate on to the root logger. Had the user configured logging (`logging.basicConfig()`), every
# record would print twice; so the default handler drops a record that a root handler will emit. The
# user's own handlers (on `framejit`, an artifact logger or the root) always see every record.
class _ArtifactFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.artifact = record.name.rsplit(".", 1)[-1]
        return not _root_will_emit(record)


def _root_will_emit(record: logging.LogRecord) -> bool:
    logger: logging.Logger | None = _ROOT
    while logger is not None:  # propagation from `framejit` upwards stops at propagate=False
        if not logger.propagate:
            return False
        logger = logger.parent
        if logger is not None and any(record.levelno >= h.level for h in logger.handlers):
            return True
    return False


def enabled(name: str) -> bool:
    return name in _enabled


def log(name: str, msg: str, *args: object, debug: bool = False) -> None:
    """Emit one record on artifact `name` if it is enabled."""
    if name not in _enabled:
        return
    _ROOT.getChild(name).log(logging.DEBUG if debug else logging.INFO, msg, *args)


def getLogger(name: str) -> logging.Logger:
    return _ROOT.getChild(name)


_configure(config.logs)
