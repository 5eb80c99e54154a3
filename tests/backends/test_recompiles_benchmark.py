"""Smoke test of benchmarks/recompiles.py at its tiniest setting: the zoo MLP over 2 batch sizes with a
changing float and int, then batch 1. Every result is checked against eager inside the benchmark; here its
table rows are checked: framejit compiled no more graphs than torch.compile, and exactly as many as the
workload needs (the first call, one recompile when batch, float and int change together, one for batch 1).

It runs in its own process: the benchmark measures stock torch.compile side by side, whose first use in a
process changes global state for good (torch.distributions validation off, optimizer methods marked
disabled), and it turns the frame cache off through FRAMEJIT_CACHE. The process is a forked child of the
program server (tests.helpers.run_program, NOTE [Programs in forked children]): torch is not imported anew,
and the server itself never runs torch.compile."""
import json

from tests.helpers import run_program

_PROGRAM = """
import json
from benchmarks import recompiles
(row,) = recompiles.main(["--models", "mlp", "--calls", "2", "--no-latency"])
print(json.dumps({"errors": row["errors"], "fj": row["fj"], "tc": row["tc"]}))
"""


def test_recompiles_benchmark_tiny(tmp_path):
    script = tmp_path / "recompiles_tiny.py"
    script.write_text(_PROGRAM)
    rc, out, err = run_program(tmp_path, script)
    assert rc == 0, err
    *printed, last = out.strip().splitlines()
    row = json.loads(last)
    assert row["errors"] == []
    assert row["fj"]["graphs"] <= row["tc"]["graphs"]
    assert row["fj"]["graphs"] == row["fj"]["frames"] == 3
    assert "framejit compiled no more graphs than torch.compile on 1 of 1 models" in "\n".join(printed)
