"""Triage of framejit on real HuggingFace models: one line per catalog model, then the reasons by count.

Usage (from the repository root):
    .venv/bin/python tools/hf_triage.py                         # every model, table on stdout
    .venv/bin/python tools/hf_triage.py --out /tmp/hf_triage.txt
    .venv/bin/python tools/hf_triage.py --models gpt2,llama,bert --gaps   # also print KNOWN_GAPS lines

Each model (tests/models/hf/catalog.py) runs the same calls as tests/models/hf/test_hf_models.py: eager,
stock `torch.compile` with a counting eager backend (the reference graph count), and framejit with a
counting backend, with the `graph_breaks` and `eager_fallback` logs captured. A row shows: stock graphs
and framejit graphs over the two same-shape calls, their tensor ops (framejit/stock), graph breaks (log
records), frames run wholly eagerly, the verdict (ok, or the first of crash / mismatch / eager frames /
graphs > stock / no graph / ops < OP_SHARE * stock, as the tests check), the time, and the FIRST break or
eager reason with its file:line (`<- transformers/...:N`: the innermost transformers frame of a break
deeper down). With --gaps it also prints the KNOWN_GAPS tables of the tests for the failing rows.
The decoders in catalog.GENERATE also get a `<name>.generate` row (greedy generate()).
At the end: each distinct reason (break or eager fallback, normalised) with the number of models it hits.
"""
from __future__ import annotations

import argparse
import collections
import logging
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from importlib.metadata import version as _version

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import framejit  # noqa: E402
from tests.helpers import CountingBackend  # noqa: E402
from tests.models.hf import catalog, harness  # noqa: E402

TIMEOUT_S = 180


@dataclass
class Row:
    name: str
    stock: int | str = "-"
    stock_ops: int = 0
    graphs: int = 0
    ops: int = 0
    breaks: int = 0
    eager: int = 0
    verdict: str = "ok"
    reasons: list[str] = field(default_factory=list)  # every distinct reason, in order of appearance
    seconds: float = 0.0

    def line(self) -> str:
        first = self.reasons[0] if self.reasons else "-"
        return (f"{self.name:22s} stock={self.stock!s:>3} fj={self.graphs:>3} ops={self.ops:>4}/{self.stock_ops:<4} "
                f"breaks={self.breaks:>3} "
                f"eager={self.eager:>3} {self.verdict:30.30s} {self.seconds:5.1f}s | {first}")


class _Capture(logging.Handler):
    """Collects framejit's graph_breaks and eager_fallback records as short reason strings."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.breaks: list[str] = []
        self.eager: list[str] = []
        self.callers: list[str] = []  # per break about to be logged: its innermost transformers frame

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.endswith("graph_breaks") and len(record.args or ()) >= 4:
            _fn, where, kind, explanation = record.args[:4]
            caller = self.callers.pop(0) if self.callers else ""
            where = _short(str(where).splitlines()[0]) + (f" <- {caller}" if caller else "")
            self.breaks.append(f"break {where} [{kind}] {_clean(explanation)}")
        elif record.name.endswith("graph_breaks") and str(record.msg).startswith("frame "):
            self.eager.append("eager frame: " + _clean(record.getMessage()[len("frame "):]))  # NOTE [Eager frames]
        elif record.name.endswith("eager_fallback"):
            self.eager.append("eager: " + _clean(record.getMessage()))

    def watch_breaks(self):
        """Also note each break's innermost transformers frame (the log names only the innermost frame,
        often in os or inspect); returns the undo. Reads framejit's break logger, if it is still there."""
        from framejit.capture import convert
        original = getattr(convert, "_log_break", None)
        if original is None:
            return lambda: None

        def log_break(fn, graph_break):
            frames = [f"{_short(f.filename)}:{f.lineno}" for f in getattr(graph_break, "user_stack", ())]
            library = [f for f in frames if f.startswith("transformers/")]
            self.callers.append(library[-1] if library and library[-1] != frames[-1] else "")
            return original(fn, graph_break)

        convert._log_break = log_break
        return lambda: setattr(convert, "_log_break", original)


def _short(path: str) -> str:
    for marker in ("site-packages/", "/work/main/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _clean(text: str) -> str:
    """One line, no object addresses, site-packages paths shortened, at most 300 characters."""
    text = re.sub(r"0x[0-9a-f]+", "0x..", str(text))
    text = re.sub(r"\S*site-packages/", "", text).replace("/work/main/", "")
    text = " ".join(text.split())
    return text[:300]


def _timeout(signum, frame):
    raise TimeoutError(f"took longer than {TIMEOUT_S}s")


def _framejit_calls(row: Row, model, inputs: list[dict], expected: list, method: str | None) -> None:
    capture = _Capture()
    logger = logging.getLogger("framejit")
    logger.addHandler(capture)
    undo = capture.watch_breaks()
    framejit.set_logs("graph_breaks,eager_fallback")
    framejit.reset()
    backend = CountingBackend()
    eager_before = harness.eager_frame_count()
    two_calls = None
    try:
        compiled = framejit.compile(model, backend=backend)
        target = getattr(compiled, method) if method else compiled
        for i, (kwargs, want) in enumerate(zip(inputs, expected)):
            if i == 2:  # the counts over the two same-shape calls, as in the tests
                two_calls = backend.graph_count, harness.op_count(backend)
            try:
                got = harness.run(target, kwargs)
            except Exception as e:  # noqa: BLE001 - the crash is what we report
                row.verdict = f"crash call {i}: {type(e).__name__}"
                row.reasons.insert(0, f"crash: {type(e).__name__}: {_clean(e)}")
                return
            try:
                harness.assert_outputs_close(got, want)
            except AssertionError as e:
                row.verdict = f"mismatch call {i}"
                row.reasons.insert(0, f"mismatch: {_clean(e)}")
                return
    finally:
        logger.removeHandler(capture)
        undo()
        framejit.set_logs("")
        row.graphs, row.ops = two_calls or (backend.graph_count, harness.op_count(backend))
        row.eager = harness.eager_frame_count() - eager_before
        row.breaks = len(capture.breaks)
        for reason in capture.breaks + capture.eager:
            if reason not in row.reasons:
                row.reasons.append(reason)


def triage(name: str, method: str | None = None) -> Row:
    arch = catalog.get(name)
    row = Row(name + (f".{method}" if method else ""))
    start = time.perf_counter()
    signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(TIMEOUT_S)
    try:
        model = arch.build()
        if method:
            inputs = [catalog.generate_kwargs(seed) for seed in (0, 1)]
        else:
            inputs = harness.calls(arch)
        expected = [harness.run(getattr(model, method) if method else model, kw) for kw in inputs]
        try:
            stock = harness.stock_reference(model, inputs, method)
            row.stock, row.stock_ops = stock.graph_count, harness.op_count(stock)
        except Exception as e:  # noqa: BLE001
            row.stock = "err"
            row.reasons.append(f"stock torch.compile failed: {type(e).__name__}: {_clean(e)}")
        resized = None if method else harness.resized_call(arch)
        if resized is not None:  # checked like the tests: values and eager frames, not the graph count
            inputs, expected = inputs + [resized], expected + [harness.run(model, harness.resized_call(arch))]
        _framejit_calls(row, model, inputs, expected, method)
        if row.verdict == "ok":
            if row.eager:
                row.verdict = "eager frames"
            elif isinstance(row.stock, int) and row.graphs > row.stock:
                row.verdict = f"graphs {row.graphs} > stock {row.stock}"
            elif row.graphs == 0:
                row.verdict = "no graph"
            elif row.ops < harness.OP_SHARE * row.stock_ops:
                row.verdict = f"ops {row.ops} < {harness.OP_SHARE} * stock {row.stock_ops}"
    except Exception as e:  # noqa: BLE001 - a timeout or a failure outside framejit's call
        row.verdict = f"error: {type(e).__name__}"
        row.reasons.insert(0, f"error: {type(e).__name__}: {_clean(e)}")
    finally:
        signal.alarm(0)
        row.seconds = time.perf_counter() - start
    return row


def _general(reason: str) -> tuple[str, str]:
    """(reason without its location and per-model names, the location): what the summary groups by."""
    location = ""
    match = re.match(r"break (.+?) (\[\w+\] .*)$", reason)
    if match:
        location, reason = match.group(1), "break " + match.group(2)
    reason = re.sub(r"\b(Function|BoundMethod|NNModuleValue)\([^()]*(\([^()]*\))?[^()]*\)", r"\1(..)", reason)
    reason = re.sub(r"\b\w*(Output|Cache)\w*\b", r"<\1 class>", reason)
    return reason, location


def summary(rows: list[Row]) -> list[str]:
    models: collections.Counter = collections.Counter()
    sites: dict[str, set] = collections.defaultdict(set)
    for row in rows:
        if row.verdict != "ok":
            general = {_general(r) for r in row.reasons}
            models.update({g for g, _ in general})
            for g, location in general:
                if location:
                    sites[g].add(location)
    lines = [f"== distinct reasons over failing rows ({sum(r.verdict != 'ok' for r in rows)} of {len(rows)}): "
             "rows affected, reason, where =="]
    for reason, n in sorted(models.items(), key=lambda kv: (-kv[1], kv[0])):
        where = sorted(sites[reason])
        at = f"  at {where[0]}" + (f" (+{len(where) - 1} more sites)" if len(where) > 1 else "") if where else ""
        lines.append(f"{n:3d}  {reason}{at}")
    return lines


def known_gaps(rows: list[Row]) -> list[str]:
    """The KNOWN_GAPS and GENERATE_KNOWN_GAPS tables of tests/models/hf/test_hf_models.py, as source."""
    lines = []
    for table, suffix in (("KNOWN_GAPS", ""), ("GENERATE_KNOWN_GAPS", ".generate")):
        lines.append(f"{table}: dict[str, str] = {{")
        for row in rows:
            name, _, method = row.name.partition(".")
            if row.verdict != "ok" and (method == suffix[1:]):
                first = row.reasons[0] if row.reasons else row.verdict
                reason = first if first.startswith(("crash", "error")) else f"{row.verdict}; {first}"
                lines.append(f"    {name!r}: {reason[:200]!r},")
        lines.append("}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated catalog names (default: all)")
    parser.add_argument("--no-generate", action="store_true", help="skip the generate() rows")
    parser.add_argument("--out", help="also write the report to this file")
    parser.add_argument("--gaps", action="store_true", help="print KNOWN_GAPS entries for the failing rows")
    args = parser.parse_args(argv)
    harness.silence_transformers()
    names = args.models.split(",") if args.models else catalog.names()
    jobs = [(n, None) for n in names]
    if not args.no_generate:
        jobs += [(n, "generate") for n in catalog.GENERATE if n in names]
    header = (f"# framejit HF triage {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
              f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {_version('transformers')}, "
              f"framejit from {os.path.dirname(os.path.dirname(framejit.__file__))}")
    print(header, flush=True)
    rows = []
    for name, method in jobs:
        row = triage(name, method)
        rows.append(row)
        print(row.line(), flush=True)
    tail = summary(rows)
    print("\n".join(["", *tail]))
    gaps = known_gaps(rows) if args.gaps else []
    if gaps:
        print("\n".join(["", *gaps]))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join([header, *(r.line() for r in rows), "", *tail, ""]))
            for row in rows:
                if len(row.reasons) > 1:
                    f.write(f"\n{row.name} all reasons:\n" + "".join(f"  {r}\n" for r in row.reasons))
    return 0


if __name__ == "__main__":
    sys.exit(main())
