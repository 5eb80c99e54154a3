"""benchmarks/backends.py's own pieces: the transformer block row (NOTE [The transformer block row]) is one
fused ORT program equal to eager, rows timed under contention stay out of the geomeans (NOTE [Contended
rows]), and the default run makes a 1-thread and a default-thread table (NOTE [Honest timings])."""
from __future__ import annotations

import collections
import os
import sys
import types

import torch

import framejit
from framejit.backends.checks import unchecked
from framejit.backends.onnxrt import runtime
from tests.helpers import OnnxrtRecorder

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))
import backends as bench  # noqa: E402


def _onnx_ops(recorder: OnnxrtRecorder) -> collections.Counter:
    import onnx

    ops = collections.Counter()
    for compiled in recorder.compiled:
        for program in unchecked(compiled).programs.values():
            for part in program.graph_module.modules():
                if isinstance(part, runtime.OrtPart):
                    ops.update(n.op_type for n in onnx.load_from_string(part.model).graph.node)
    return ops


def test_block_row_is_one_fused_ort_program():
    case = bench.block_case(width=32)
    recorder = OnnxrtRecorder()
    compiled = framejit.compile(case.model, backend=recorder)
    with torch.no_grad():
        for seed in (0, 1, 2):
            (x,) = case.make_inputs(seed)
            torch.testing.assert_close(compiled(x), case.model(x), rtol=1e-4, atol=1e-5)
    rows = recorder.rows()
    assert len(rows) == 1 and rows[0]["parts"] == 1 and not rows[0]["eager_graph"], rows
    assert not [r for r in rows[0]["eager_nodes"].values() if "free op" not in r], rows
    ops = _onnx_ops(recorder)
    # LayerNorm, GELU and the attention (with its QKV projection) are one ONNX node each
    assert ops["LayerNormalization"] == 2 and ops["Gelu"] == 1 and ops["Attention"] == 1, ops
    assert not {"Softmax", "Erf", "ReduceMean", "MatMul", "Sqrt"} & set(ops), ops
    traced = torch.fx.symbolic_trace(case.model)  # the case says fx_traceable (the `--via fx` column)
    torch.testing.assert_close(traced(x), case.model(x), rtol=0, atol=0)


def test_contended_rows():
    assert bench.contended(2.5, threads=2, cpus=2)
    assert not bench.contended(1.5, threads=2, cpus=2)
    assert not bench.contended(9.0, threads=1, cpus=2)  # one thread waits for no other thread


def _row(eager, fj, ind, contended):
    return {"eager": eager, "fj": fj, "ind": ind, "via": "fx", "fj_compile": 1.0, "ind_compile": 1.0,
            "load": 1.0, "contended": contended,
            "runs": {"eager": [eager] * 2, "fj": [fj] * 2, "ind": [ind] * 2}}


def test_contended_rows_stay_out_of_the_geomeans(capsys):
    args = types.SimpleNamespace(backend="onnxrt", device="cpu", size="bench", repeats=2, block=5, block_ms=20.0, clock="wall",
                                 load_before=(1.0, 1.0, 1.0))
    bench.print_table({"quiet": _row(4.0, 2.0, 1.0, False), "busy": _row(90.0, 1.0, 30.0, True)}, args)
    out = capsys.readouterr().out
    assert "eager/framejit: 2.00x; framejit/inductor latency: 2.00 (1 of 2 rows)" in out, out
    assert "1 row(s) timed with" in out and "1.0!" in out, out


def test_default_run_times_one_thread_and_the_default():
    assert bench.parse_args([]).threads == "1,0"
    assert bench.parse_args(["--device", "cuda"]).threads == "0"
    quick = bench.parse_args(["--quick"])
    assert (quick.models, quick.seconds, quick.repeats) == (bench.QUICK_MODELS, 0.3, 3)
    assert bench.parse_args(["--quick", "--models", "gpt"]).models == "gpt"


def test_blocks_last_at_least_block_ms(monkeypatch):
    """NOTE [Blocks of calls]: a column is called until its block has lasted `block_ms` (a fake clock here:
    every read advances 1 ms), not only `block` times, before the next column's block."""
    now = [0.0]

    def fake_clock():
        now[0] += 1e-3
        return now[0]

    monkeypatch.setattr(bench, "time", types.SimpleNamespace(perf_counter=fake_clock))
    order = []
    fns = {key: (lambda key=key: order.append(key)) for key in ("eager", "fj", "ind")}
    bench.interleaved_medians(fns, (), seconds=0.2, device="cpu", clock=fake_clock, block=2, block_ms=10.0)
    order = order[9:]  # the 3 warm-up calls per column
    runs, start = [], 0
    for k in range(1, len(order) + 1):
        if k == len(order) or order[k] != order[start]:
            runs.append((order[start], k - start))
            start = k
    assert [key for key, _ in runs[:6]] == ["eager", "fj", "ind"] * 2, runs
    assert min(length for _, length in runs) >= 4, runs  # 10 ms of 2-3 fake ms per call, not 2 calls
