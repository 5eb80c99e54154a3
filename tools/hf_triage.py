"""Triage of framejit on real HuggingFace models: one line per catalog model, then the reasons by count.

Usage (from the repository root):
    .venv/bin/python tools/hf_triage.py                         # every model, table on stdout
    .venv/bin/python tools/hf_triage.py --out /tmp/hf_triage.txt
    .venv/bin/python tools/hf_triage.py --models gpt2,llama,bert --gaps   # also print KNOWN_GAPS lines
    .venv/bin/python tools/hf_triage.py --extra --resize        # also catalog_extra.EXTRA; a resized 3rd call
    .venv/bin/python tools/hf_triage.py --train --models bert,t5 # a training step per call (labels, backward)

Each model (tests/models/hf/catalog.py) runs the same calls as tests/models/hf/test_hf_models.py: eager,
stock `torch.compile` with a counting eager backend (the reference graph count), and framejit with a
counting backend, with the `graph_breaks` and `eager_fallback` logs captured. A row shows: stock graphs
and framejit graphs over the two same-shape calls, their tensor ops (framejit/stock), graph breaks (log
records), frames run wholly eagerly, the verdict (ok, or the first of crash / mismatch / eager frames /
graphs > stock / no graph / ops < OP_SHARE * stock, as the tests check), the time, and the FIRST break or
eager reason with its file:line (`<- transformers/...:N`: the innermost transformers frame of a break
deeper down). With --gaps it also prints the KNOWN_GAPS tables of the tests for the failing rows.
The decoders in catalog.GENERATE also get a `<name>.generate` row (greedy generate()).
--extra adds the architectures of tests/models/hf/catalog_extra.py (families the tests' catalog lacks).
--resize makes a third call at batch 1 and sequence catalog.SEQ_ALT for every model and shows `rc=F/S`: the
graphs that call added under framejit / under stock (a recompile each; more than stock's is a finding).
--train (NOTE [HF training step], tests/models/hf/training.py) makes each call a training step as HF users write it: the model
in train mode with every dropout, layer drop, SpecAugment mask and router jitter set to 0, called with
`labels` (causal LM: the ids; encoder-decoder: the decoder ids; encoders/vision/audio: a masked-LM,
image- or sequence-classification or CTC head of the same family), then `out.loss.backward()`; the loss
and every parameter's gradient are compared to eager's (1e-4). A family with no such head is called
as it is and the loss is the sum of its floating outputs' means, taken outside the compiled call.
`diff=` is the largest absolute difference from eager over all compared tensors.
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
    recompiles: int | str = "-"  # graphs the resized third call added (--resize), framejit
    stock_recompiles: int | str = "-"  # the same under stock torch.compile
    diff: float = 0.0  # the largest absolute difference from eager

    def line(self) -> str:
        first = self.reasons[0] if self.reasons else "-"
        return (f"{self.name:22s} stock={self.stock!s:>3} fj={self.graphs:>3} ops={self.ops:>4}/{self.stock_ops:<4} "
                f"breaks={self.breaks:>3} "
                f"eager={self.eager:>3} rc={self.recompiles}/{self.stock_recompiles} diff={self.diff:.1e} "
                f"{self.verdict:30.30s} {self.seconds:5.1f}s | {first}")


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


def _max_diff(actual, expected) -> float:
    """The largest absolute difference between the tensors of two results of the same structure."""
    if isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor):
        if actual.shape != expected.shape or not expected.numel():
            return 0.0
        if expected.is_floating_point() or expected.is_complex():
            return float((actual.detach().double() - expected.detach().double()).abs().nan_to_num(0.0).max())
        return float((actual.long() - expected.long()).abs().max())
    if isinstance(expected, dict) and isinstance(actual, dict):
        return max([_max_diff(actual.get(k), v) for k, v in expected.items()] or [0.0])
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        return max([_max_diff(a, e) for a, e in zip(actual, expected)] or [0.0])
    if type(expected).__module__ == "transformers.cache_utils":
        return _max_diff(vars(actual), vars(expected))
    return 0.0


def _inference(target, kwargs: dict, seed: int):
    torch.manual_seed(seed)
    return harness.run(target, kwargs)


from tests.models.hf.training import assert_steps_close, train_step, training_variant  # noqa: E402


def _stock(model, inputs: list[dict], step, method: str | None) -> list[int]:
    """Stock torch.compile's graph count after each call (a fresh dynamo state, a counting eager backend)."""
    import torch._dynamo  # the reference compiler: tools only, never framejit's own code
    torch._dynamo.reset()
    backend = CountingBackend()
    if method:
        model.forward = torch.compile(model.forward, backend=backend)
    compiled = getattr(model, method) if method else torch.compile(model, backend=backend)
    counts = []
    try:
        for i, kwargs in enumerate(inputs):
            step(compiled, kwargs, i)
            counts.append((backend.graph_count, harness.op_count(backend)))
    finally:
        if method:
            del model.forward
        torch._dynamo.reset()
    return counts


def _framejit_calls(row: Row, model, inputs: list[dict], expected: list, method: str | None, step,
                    train: bool) -> None:
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
                got = step(target, kwargs, i)
            except Exception as e:  # noqa: BLE001 - the crash is what we report
                row.verdict = f"crash call {i}: {type(e).__name__}"
                row.reasons.insert(0, f"crash: {type(e).__name__}: {_clean(e)}")
                return
            row.diff = max(row.diff, _max_diff(got, want))
            try:
                (assert_steps_close if train else harness.assert_outputs_close)(got, want)
            except AssertionError as e:
                row.verdict = f"mismatch call {i}"
                row.reasons.insert(0, f"mismatch: {_clean(e)}")
                return
        if len(inputs) > 2:
            row.recompiles = backend.graph_count - two_calls[0]
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


def _arch(name: str):
    from tests.models.hf.catalog_extra import EXTRA
    return EXTRA[name] if name in EXTRA else catalog.get(name)


def triage(name: str, method: str | None = None, *, train: bool = False, resize: bool = False) -> Row:
    arch = _arch(name)
    row = Row(name + (f".{method}" if method else "") + (".train" if train else ""))
    start = time.perf_counter()
    signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(TIMEOUT_S)
    try:
        build, make_inputs, step = arch.build, arch.make_inputs, _inference
        if train:
            build, make_inputs, head = training_variant(arch)
            step = train_step
            if head is None:
                row.reasons.append(f"no head with labels: {arch.model} called as is, loss taken outside")
        model = build()
        if method:
            inputs = [catalog.generate_kwargs(seed) for seed in (0, 1)]
        else:
            inputs = [make_inputs(0), make_inputs(1)]
            if resize or arch.resize:
                inputs.append(make_inputs(2, batch=1, seq=catalog.SEQ_ALT))
        call = getattr(model, method) if method else model
        expected = [step(call, kw, i) for i, kw in enumerate(inputs)]
        try:
            counts = _stock(build() if train else model, inputs, step, method)
            row.stock, row.stock_ops = counts[min(1, len(counts) - 1)]
            if len(counts) > 2:
                row.stock_recompiles = counts[2][0] - counts[1][0]
        except Exception as e:  # noqa: BLE001
            row.stock = "err"
            row.reasons.append(f"stock torch.compile failed: {type(e).__name__}: {_clean(e)}")
        _framejit_calls(row, build() if train else model, inputs, expected, method, step, train)
        if row.verdict == "ok":
            if row.eager:
                row.verdict = "eager frames"
            elif isinstance(row.stock, int) and row.graphs > row.stock:
                row.verdict = f"graphs {row.graphs} > stock {row.stock}"
            elif isinstance(row.recompiles, int) and isinstance(row.stock_recompiles, int) \
                    and row.recompiles > row.stock_recompiles:
                row.verdict = f"recompiles {row.recompiles} > stock {row.stock_recompiles}"
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
    parser.add_argument("--extra", action="store_true", help="also the architectures of catalog_extra.EXTRA")
    parser.add_argument("--only-extra", action="store_true", help="only the architectures of catalog_extra.EXTRA")
    parser.add_argument("--resize", action="store_true", help="a third call at another batch and sequence length")
    parser.add_argument("--train", action="store_true", help="each call a training step (NOTE [HF training step])")
    parser.add_argument("--timeout", type=int, default=180,
                        help="seconds per row (default %(default)s); on a loaded machine the alarm can fire inside a "
                             "trace, which framejit then reports as an eager frame: raise it there")
    parser.add_argument("--generate", help="comma-separated names whose greedy generate() also gets a row "
                                           "(default: catalog.GENERATE)")
    args = parser.parse_args(argv)
    globals()["TIMEOUT_S"] = args.timeout
    harness.silence_transformers()
    from tests.models.hf.catalog_extra import EXTRA
    names = [] if args.only_extra else catalog.names()
    if args.extra or args.only_extra:
        names += list(EXTRA)
    names = args.models.split(",") if args.models else names
    jobs = [(n, None) for n in names]
    if not args.no_generate:
        generate = [(n, "generate") for n in (args.generate.split(",") if args.generate else catalog.GENERATE)
                    if n in names]
        jobs = generate + jobs if args.generate else jobs + generate  # the rows asked for by name first
    header = (f"# framejit HF triage {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
              f"python {sys.version.split()[0]}, torch {torch.__version__}, transformers {_version('transformers')}, "
              f"framejit from {os.path.dirname(os.path.dirname(framejit.__file__))}")
    print(header, flush=True)
    rows = []
    for name, method in jobs:
        row = triage(name, method, train=args.train and not method, resize=args.resize)
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
