"""A restored entry's guards name this process's files and lines (issue 16, NOTE [Guard origins from the live
code] in capture/guard_origins.py).

The same program is run cold from one folder and warm from another, with lines added above its functions
(a script moved and edited above the functions it compiles: the entries' code hashes, which cover neither
file names nor lines, still match). The warm process loads the entries (no trace), prints the comments of
its loaded guard function and, after a global the inlined helper reads changes, the recompiles log names the
failing guard's origin. Both must name the warm file at the line where that code now is.
"""
from __future__ import annotations

import json
import os
import re

from tests.cache.warm_programs import REPO, copy_framejit
from tests.helpers import run_program

PROGRAM = '''
import json, sys
import torch
import framejit

SCALE = 2

def helper(t):
    return t.sin() * SCALE  # the SCALE line

def f(x):
    y = helper(x) + x.shape[0]  # the call line
    return y.cos()

c = framejit.compile(f, backend="eager")
x = torch.randn(4)
first = c(x)
ok = torch.allclose(first, f(x))
comments = [line.partition("  # ")[2] for line in c.entries[0].guard.source.splitlines() if "  # " in line]
traced = framejit.stats()["frames_traced"]
if sys.argv[2] == "warm":
    SCALE = 3  # the loaded entry's guard on SCALE fails: the recompiles log names where it was read
    ok = ok and torch.allclose(c(x), f(x))
print(json.dumps({"equal": bool(ok), "traced": traced, "loaded": framejit.stats()["frames_loaded"],
                  "comments": comments}))
'''


def _run(tmp_path, install, folder: str, program: str, mode: str) -> tuple[dict, str]:
    script = tmp_path / folder / "program.py"
    script.parent.mkdir(exist_ok=True)
    script.write_text(program)
    env = dict(os.environ, FRAMEJIT_CACHE_DIR=str(tmp_path / "cache"), FRAMEJIT_CACHE="1",
               FRAMEJIT_LOGS="cache,recompiles")
    rc, out, err = run_program(tmp_path, script, "eager", mode, env=env, pythonpath=os.pathsep.join([install, REPO]))
    assert rc == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


def _line_of(program: str, marker: str) -> int:
    return next(i for i, line in enumerate(program.splitlines(), 1) if marker in line)


def test_restored_guards_name_the_warm_file_and_lines(tmp_path):
    install = copy_framejit(tmp_path / "install")
    moved = "# a header the warm copy of the script has\n" * 5 + PROGRAM
    cold, _ = _run(tmp_path, install, "first", PROGRAM, "cold")
    warm, err = _run(tmp_path, install, "moved", moved, "warm")
    assert cold["equal"] and cold["traced"] == 1, cold
    assert warm["equal"] and warm["traced"] == 0 and warm["loaded"] >= 1, warm
    warm_file = str(tmp_path / "moved" / "program.py")
    scale, call = _line_of(moved, "the SCALE line"), _line_of(moved, "the call line")
    origins = [c.partition(" | ")[2] for c in warm["comments"] if " | " in c]
    named = {re.match(r"(.*):(\d+): ", o).groups() for o in origins if re.match(r"(.*):(\d+): ", o)}
    assert named, warm["comments"]
    assert {file for file, _ in named} == {warm_file}, named  # no comment names the cold folder
    assert {(warm_file, str(scale)), (warm_file, str(call))} <= named, (named, scale, call)
    assert all(o.endswith(line.strip()) for o in origins for n, line in enumerate(moved.splitlines(), 1)
               if o.startswith(f"{warm_file}:{n}: ")), origins  # each with the text of its line
    recompile = [line for line in err.splitlines() if "recompiling f" in line]
    assert recompile and f"(from {warm_file}:{scale}: return t.sin() * SCALE" in recompile[0], recompile
