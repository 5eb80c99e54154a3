"""The `framejit` command line (console script `framejit`, also `python -m framejit`).

Subcommands:
    framejit warm TARGET [-- ARGS]       run TARGET with the persistent cache on; print what was compiled
    framejit explain TARGET [-- ARGS]    run TARGET under framejit.explain and print the report
    framejit cache ls|stats|clear|verify inspect and maintain the cache directory (FRAMEJIT_CACHE_DIR);
                                         with --remote, the Redis tier (FRAMEJIT_REMOTE_CACHE)
    framejit warm --remote TARGET        also copy every entry the run used into the Redis tier
    framejit backends                    list backends and whether their requirements are installed

TARGET is a script path (run as `__main__`, with sys.argv = [path, *ARGS] and its directory first on
sys.path, like `python path`) or a `module:function` entry point (imported with the current directory
first on sys.path, like `python -m`; called with no arguments and sys.argv = [TARGET, *ARGS]; an int
it returns is the exit status, as for console scripts).

Invariants:
- Errors of the command itself (missing target, bad entry point, unusable cache directory, a feature
  that is not available) are one line on stderr, "framejit: error: ...", and a non-zero exit:
  1 for errors, 2 for usage errors and unavailable features. Errors raised by the user's code print
  their traceback and exit 1, as Python would.
- `warm` reads its numbers from `framejit.stats()` (filled by the capture frontend) and from
  `framejit.cache.counters`; every key may be missing and is then shown as "-". The keys it uses
  (NOTE [warm stats keys]) are the contract with the frontend.

Main names: `main(argv) -> int`, `build_parser()`, `resolve_target(target) -> Target`, `TargetError`.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import os
import runpy
import sys
import threading
import time
import traceback
from typing import Callable, Iterator, Sequence

from . import config
from .cache import CacheError, Store, counters
from .cache.admin import EntryInfo

EXIT_ERROR = 1
EXIT_UNAVAILABLE = 2


class TargetError(Exception):
    """TARGET cannot be resolved; str(exc) is the one-line message."""


class _CommandError(Exception):
    """A one-line error of the command itself, with its exit status."""

    def __init__(self, message: str, status: int = EXIT_ERROR):
        super().__init__(message)
        self.status = status


# -- formatting -------------------------------------------------------------------------------------
def format_table(
    headers: Sequence[str] | None, rows: Sequence[Sequence[object]], right: Sequence[int] = ()
) -> str:
    """A plain-text table (no header line when `headers` is None); columns in `right` are right-aligned."""
    cells = ([[str(c) for c in headers]] if headers is not None else []) + [[str(c) for c in row] for row in rows]
    if not cells:
        return ""
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = []
    for row in cells:
        parts = [cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def human_bytes(n: object) -> str:
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    for limit, div, unit in ((60, 1, "s"), (3600, 60, "m"), (86400, 3600, "h")):
        if seconds < limit:
            return f"{seconds / div:.0f}{unit}"
    return f"{seconds / 86400:.1f}d"


# -- targets ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Target:
    """A resolved TARGET: `run(args)` runs it; `fn` is the entry point's function (None for scripts)."""

    description: str
    run: Callable[[Sequence[str]], object]
    fn: Callable | None = None


@contextlib.contextmanager
def _process_state(argv: list[str], path_entry: str | None) -> Iterator[None]:
    """Run the target with its own sys.argv (and sys.path entry); restore both afterwards, so that
    `main()` can also be called in-process (tests, notebooks)."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = argv
    if path_entry is not None:
        sys.path.insert(0, path_entry)
    try:
        yield
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


def _script_target(path: str) -> Target:
    if not os.path.exists(path):
        raise TargetError(f"no such script: {path}")
    if not os.access(path, os.R_OK):
        raise TargetError(f"cannot read script: {path}")
    full = os.path.abspath(path)

    def run(args: Sequence[str]) -> object:
        with _process_state([path, *args], os.path.dirname(full)):
            runpy.run_path(full, run_name="__main__")
        return None

    return Target(path, run)


def _import_entry_module(module: str):
    try:
        with _process_state(sys.argv, os.getcwd()):
            return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            raise TargetError(f"bad entry point: no module named {exc.name!r}") from None
        raise  # an import inside the user's module failed: the user's traceback is the useful report


def _entry_point_target(target: str) -> Target:
    module_name, _, attr_path = target.partition(":")
    dotted = lambda s: bool(s) and all(part.isidentifier() for part in s.split("."))  # noqa: E731
    if not dotted(module_name) or not dotted(attr_path):
        raise TargetError(f"bad entry point {target!r}: expected module:function, e.g. mypkg.train:main")
    obj = _import_entry_module(module_name)
    for attr in attr_path.split("."):
        if not hasattr(obj, attr):
            raise TargetError(f"bad entry point {target!r}: {module_name!r} has no attribute {attr_path!r}")
        obj = getattr(obj, attr)
    if not callable(obj):
        raise TargetError(f"bad entry point {target!r}: {attr_path} is a {type(obj).__name__}, not callable")
    fn = obj

    def run(args: Sequence[str]) -> object:
        with _process_state([target, *args], os.getcwd()):
            return fn()

    return Target(target, run, fn)


def resolve_target(target: str) -> Target:
    """A script path or a module:function entry point (see the module docstring); raises TargetError."""
    if os.path.exists(target) or target.endswith(".py") or os.sep in target:
        return _script_target(target)
    if ":" in target:
        return _entry_point_target(target)
    raise TargetError(f"no such script or entry point {target!r}: expected a script path or module:function")


def _exit_status(value: object) -> int:
    """The exit status for a SystemExit code or an entry point's return value."""
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    return 0


def run_user_code(fn: Callable[[], object]) -> int:
    """Run the user's code like `python` would; returns its exit status instead of exiting."""
    try:
        return _exit_status(fn())
    except SystemExit as exc:
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
            return EXIT_ERROR
        return _exit_status(exc.code)
    except KeyboardInterrupt:
        return 130
    except BaseException:  # the user's error: show it as Python would, then report what was warmed
        traceback.print_exc()
        return EXIT_ERROR


def _strip_separator(args: Sequence[str]) -> list[str]:
    args = list(args)
    return args[1:] if args[:1] == ["--"] else args


# -- warm -------------------------------------------------------------------------------------------
# NOTE [warm stats keys]
# `framejit.stats()` is the frontend's view of this process; `warm` shows these keys when present:
#   totals: frames_traced, frames_compiled, graphs, backend_compiles, eager_entries, cache_hits,
#   cache_misses, cache_bytes_written, compile_time_s;
#   frames: a list with one dict per compiled frame: function, location ("file:line"), backend, graphs,
#   compile_time_s and cache ("hit" or "miss").
# Cache totals fall back to framejit.cache.counters, which this package fills itself.
_TOTALS = (
    ("frames compiled", "frames_compiled"),
    ("graphs", "graphs"),
    ("backend compiles", "backend_compiles"),
    ("frames traced", "frames_traced"),
    ("frames run eagerly", "eager_entries"),
    ("cache hits", "cache_hits"),
    ("cache misses", "cache_misses"),
    ("cache bytes written", "cache_bytes_written"),
    ("compile time", "compile_time_s"),
)
_FRAME_COLUMNS = ("function", "location", "backend", "graphs", "compile_time_s", "cache")


def _framejit_stats() -> dict:
    import framejit

    try:
        stats = framejit.stats()
    except Exception:  # the numbers are a report, never a reason to fail the run
        return {}
    return dict(stats) if isinstance(stats, dict) else {}


def _format_total(key: str, value: object) -> str:
    if value is None:
        return "-"
    if key == "cache_bytes_written":
        return human_bytes(value)
    if key.endswith("_s") and isinstance(value, (int, float)):
        return f"{value:.3f} s"
    return str(value)


def warm_report(stats: dict, cache_delta: dict, target: str, status: int, wall_s: float, cache_dir: str) -> str:
    """The final table of `framejit warm` (NOTE [warm stats keys])."""
    fallbacks = {
        "cache_hits": cache_delta.get("hits"),
        "cache_misses": cache_delta.get("misses"),
        "cache_bytes_written": cache_delta.get("bytes_written"),
    }
    lines = [f"framejit warm: {target} (exit {status}, {wall_s:.2f} s); cache: {cache_dir}"]
    frames = stats.get("frames")
    if isinstance(frames, list) and frames:
        rows = []
        for frame in frames:
            frame = frame if isinstance(frame, dict) else {}
            time_s = frame.get("compile_time_s")
            rows.append([
                *(frame.get(c, "-") for c in _FRAME_COLUMNS[:4]),
                f"{time_s:.3f}" if isinstance(time_s, (int, float)) else "-",
                frame.get("cache", "-"),
            ])
        headers = ("function", "location", "backend", "graphs", "compile s", "cache")
        lines += ["", format_table(headers, rows, right=(3, 4))]
    else:
        lines += ["", "no per-frame report (framejit.stats() has no 'frames')"]
    totals = [(label, _format_total(key, stats.get(key, fallbacks.get(key)))) for label, key in _TOTALS]
    lines += ["", format_table(("total", "value"), totals, right=(1,))]
    return "\n".join(lines)


class LiveProgress:
    """A one-line progress display on a terminal, refreshed from framejit.stats() by a thread."""

    def __init__(self, stream, interval_s: float = 0.25):
        self.stream = stream
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="framejit-warm-progress", daemon=True)

    def line(self) -> str:
        stats = _framejit_stats()
        parts = [(label, stats.get(key, "-")) for label, key in _TOTALS[:3]]
        return "[framejit warm] " + "  ".join(f"{label}: {value}" for label, value in parts)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.stream.write("\r" + self.line() + "\033[K")
            self.stream.flush()

    def __enter__(self) -> "LiveProgress":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.stream.write("\r\033[K")
        self.stream.flush()


def _prepare_cache_for_warm() -> str:
    config.cache_enabled = True
    os.environ["FRAMEJIT_CACHE"] = "1"  # child processes of the target warm the same cache
    store = Store(config.cache_dir)
    problem = store.prepare_dirs()
    if problem:
        raise _CommandError(f"cache directory unusable: {problem}")
    return store.root


def cmd_warm(args: argparse.Namespace) -> int:
    cache_dir = _prepare_cache_for_warm()
    tier = _remote_tier(need_key=True) if getattr(args, "remote", False) else None
    if tier is not None:
        tier.publish_local_hits = True  # entries found locally are copied up too (SET NX)
    target = resolve_target(args.target)
    before = counters.as_dict()
    start = time.perf_counter()
    live = LiveProgress(sys.stderr) if sys.stderr.isatty() else None
    if live is not None:
        with live:
            status = run_user_code(lambda: target.run(_strip_separator(args.args)))
    else:
        status = run_user_code(lambda: target.run(_strip_separator(args.args)))
    wall_s = time.perf_counter() - start
    delta = {k: v - before.get(k, 0) for k, v in counters.as_dict().items()}
    sys.stdout.flush()
    print(warm_report(_framejit_stats(), delta, target.description, status, wall_s, cache_dir))
    if tier is not None:
        print(f"remote: {delta.get('remote_writes', 0)} entries written to {tier.display} "
              f"({delta.get('remote_errors', 0)} faults)")
    return status


# -- explain ----------------------------------------------------------------------------------------
def cmd_explain(args: argparse.Namespace) -> int:
    import framejit

    target = resolve_target(args.target)
    argv = _strip_separator(args.args)
    # For an entry point, explain its function; for a script, explain a function that runs it. The
    # frontend decides how a script's compiled functions are collected into the report.
    if target.fn is None:  # a script: run it, then report every function it compiled
        from framejit.api import explain_compiled
        from framejit.capture import keep_hooks

        def run_script() -> None:
            with _process_state([target.description, *argv], os.getcwd()):
                target.run(argv)

        with keep_hooks() as hooks:
            status = run_user_code(run_script)
        reports = explain_compiled(hooks)
        if not reports:
            print("no function was compiled by framejit.compile while the script ran")
        for name, report in reports:
            print(f"== {name}\n{report}\n")
        return status
    explained = framejit.explain(target.fn)
    report = None

    def run() -> None:
        nonlocal report
        with _process_state([target.description, *argv], os.getcwd()):
            report = explained()

    status = run_user_code(run)
    if report is not None:
        print(report)
    return status


# -- cache ------------------------------------------------------------------------------------------
def _store() -> Store:
    return Store(config.cache_dir)


def _remote_tier(need_key: bool):
    """The Redis tier FRAMEJIT_REMOTE_CACHE names, or a command error saying why there is none."""
    from .cache import remote

    if not config.remote_cache:
        raise _CommandError("--remote: set FRAMEJIT_REMOTE_CACHE=redis://[user:password@]host:port/db", EXIT_UNAVAILABLE)
    if need_key:
        _, why = remote.read_secret()
        if why:
            raise _CommandError(f"--remote: {why}", EXIT_UNAVAILABLE)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tier = remote.default_remote(admin=not need_key)
    if tier is None:
        raise _CommandError("--remote: the remote cache is off (FRAMEJIT_LOGS=cache says why; is `redis` installed?)",
                            EXIT_UNAVAILABLE)
    return tier


def _remote_call(fn):
    from .cache.remote import RemoteUnavailable

    try:
        return fn()
    except RemoteUnavailable as exc:
        raise _CommandError(f"remote cache: {exc}") from None


def _ls_row(info: EntryInfo, now: float) -> list[str]:
    if info.problem:
        return [info.key[:12], "?", f"(unreadable: {info.problem})", "-", human_bytes(info.size), "-",
                human_age(now - info.last_used), str(info.hits)]
    meta = info.meta
    age = human_age(now - info.created) if info.created is not None else "-"
    return [info.key[:12], info.backend or "-", str(meta.get("function", meta.get("kind", "-"))),
            str(meta.get("location", "-")), human_bytes(info.size), age, human_age(now - info.last_used),
            str(info.hits)]


def cmd_cache_ls(args: argparse.Namespace) -> int:
    store = _store()
    if args.remote:
        tier = _remote_tier(need_key=False)
        store = argparse.Namespace(root=tier.display, ls=lambda: _remote_call(tier.ls))
    infos = store.ls()
    if not infos:
        print(f"no entries in {store.root}")
        return 0
    now = time.time()
    headers = ("key", "backend", "function", "location", "size", "age", "last used", "hits")
    print(format_table(headers, [_ls_row(info, now) for info in infos], right=(4, 5, 6, 7)))
    print(f"{len(infos)} entries, {human_bytes(sum(i.size for i in infos))} in {store.root}")
    return 0


def cmd_cache_stats(args: argparse.Namespace) -> int:
    if args.remote:
        return _remote_stats(_remote_tier(need_key=False))
    stats = _store().stats()
    rate = stats["hit_rate"]
    rows = [
        ("cache directory", stats["root"]),
        ("entries", stats["entries"]),
        ("size", f"{human_bytes(stats['bytes'])} of {human_bytes(stats['size_limit_bytes'])}"),
        *((name, stats[name]) for name in ("hits", "misses", "writes", "rejected", "evicted")),
        ("hit rate", f"{rate:.1%}" if rate is not None else "-"),
    ]
    print(format_table(None, rows))
    if stats["by_backend"]:
        by = [(name, row["entries"], human_bytes(row["bytes"])) for name, row in sorted(stats["by_backend"].items())]
        print()
        print(format_table(("backend", "entries", "size"), by, right=(1, 2)))
    if not config.cache_enabled:
        print("note: the cache is disabled (FRAMEJIT_CACHE=0)")
    return 0


def _remote_stats(tier) -> int:
    stats = _remote_call(tier.stats)
    limit = stats["maxmemory"]
    rows = [
        ("remote cache", stats["root"]),
        ("entries", stats["entries"]),
        ("size", human_bytes(stats["bytes"])),
        ("server memory", f"{human_bytes(stats['used_memory'])} of "
                          f"{human_bytes(limit) if limit else 'no limit'} ({stats['maxmemory_policy']})"),
        ("evicted keys", stats["evicted_keys"]),
        ("server hits / misses", f"{stats['keyspace_hits']} / {stats['keyspace_misses']}"),
    ]
    print(format_table(None, rows))
    if stats["by_backend"]:
        by = [(name, row["entries"], human_bytes(row["bytes"])) for name, row in sorted(stats["by_backend"].items())]
        print()
        print(format_table(("backend", "entries", "size"), by, right=(1, 2)))
    return 0


def cmd_cache_clear(args: argparse.Namespace) -> int:
    if args.all and (args.older_than is not None or args.backend is not None):
        raise _CommandError("cache clear: --all cannot be combined with --older-than or --backend", 2)
    if not args.all and args.older_than is None and args.backend is None:
        raise _CommandError("cache clear: say what to remove: --all, --older-than DAYS or --backend NAME", 2)
    older_than = args.older_than * 86400.0 if args.older_than is not None else None
    if args.remote:
        tier = _remote_tier(need_key=False)
        removed = _remote_call(lambda: tier.clear(older_than_s=older_than, backend=args.backend))
        print(f"removed {removed} entries from {tier.display}")
        return 0
    store = _store()
    removed = store.clear(older_than=older_than, backend=args.backend)
    print(f"removed {removed} entries from {store.root}")
    return 0


def cmd_cache_verify(args: argparse.Namespace) -> int:
    if args.remote:
        tier = _remote_tier(need_key=True)
        count, problems = _remote_call(tier.verify)
        store = argparse.Namespace(root=tier.display)
    else:
        store = _store()
        problems = store.verify()
        count = len(store.ls())
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problems in {store.root} ({count} entries)")
        return EXIT_ERROR
    print(f"ok: {count} entries verified in {store.root}")
    return 0


# -- backends ---------------------------------------------------------------------------------------
def cmd_backends(args: argparse.Namespace) -> int:
    from .backends import registry

    rows = []
    for name in registry.list_backends():
        entry = registry.entry_for(name)
        missing = entry.missing_requirements()
        status = "ok" if not missing else f"missing: {', '.join(missing)} (pip install {' '.join(missing)})"
        rows.append((name, status, entry.description))
    print(format_table(("backend", "requirements", "description"), rows))
    return 0


# -- parser and main --------------------------------------------------------------------------------
def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"DAYS must be a number, got {text!r}") from None
    if not days >= 0:
        raise argparse.ArgumentTypeError(f"DAYS must not be negative, got {text!r}")
    return days


def _add_target_command(sub, name: str, help_text: str, handler) -> argparse.ArgumentParser:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    parser.add_argument("target", metavar="TARGET", help="a script path or a module:function entry point")
    parser.add_argument("args", metavar="-- ARGS", nargs=argparse.REMAINDER, help="arguments for the target")
    parser.set_defaults(handler=handler)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="framejit", description="framejit: a JIT compiler frontend for PyTorch.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    warm = _add_target_command(sub, "warm", "run TARGET with the persistent cache on and report what was compiled",
                               cmd_warm)
    warm.add_argument("--remote", action="store_true",
                      help="also fill the Redis tier (FRAMEJIT_REMOTE_CACHE) with every entry the run used")
    _add_target_command(sub, "explain", "run TARGET under framejit.explain and print the report", cmd_explain)
    cache = sub.add_parser("cache", help="inspect and maintain the persistent cache (FRAMEJIT_CACHE_DIR)")
    cache_sub = cache.add_subparsers(dest="cache_command", metavar="ACTION", required=True)
    remote_help = "the Redis tier FRAMEJIT_REMOTE_CACHE names instead of the cache directory"
    for action, help_text, handler in (("ls", "list entries", cmd_cache_ls), ("stats", "totals and hit rate",
                                                                              cmd_cache_stats),
                                       ("verify", "check every entry's integrity (--remote: and signature)",
                                        cmd_cache_verify)):
        action_parser = cache_sub.add_parser(action, help=help_text)
        action_parser.add_argument("--remote", action="store_true", help=remote_help)
        action_parser.set_defaults(handler=handler)
    clear = cache_sub.add_parser("clear", help="delete entries")
    clear.add_argument("--remote", action="store_true", help=remote_help)
    clear.add_argument("--all", action="store_true", help="delete every entry")
    clear.add_argument("--older-than", type=_days, metavar="DAYS", help="delete entries not used for DAYS days")
    clear.add_argument("--backend", metavar="NAME", help="delete the entries of one backend")
    clear.set_defaults(handler=cmd_cache_clear)
    sub.add_parser("backends", help="list backends and whether their requirements are installed").set_defaults(
        handler=cmd_backends
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except _CommandError as exc:
        status = exc.status
        message = str(exc)
    except TargetError as exc:
        status, message = EXIT_ERROR, str(exc)
    except CacheError as exc:
        status, message = EXIT_ERROR, str(exc)
    except BrokenPipeError:  # `framejit cache ls | head`: the reader left; not an error to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_ERROR
    except OSError as exc:
        status, message = EXIT_ERROR, f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")
    print(f"framejit: error: {message}", file=sys.stderr)
    return status
