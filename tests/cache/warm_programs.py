"""Programs run twice (cold, then warm) against one copy of framejit, each in a forked child of a program
server (tests.helpers.run_program), with the persistent cache on in a folder of the test's own: the warm-start
tests (test_warm_gaps.py, test_warm_gaps2.py) share this. The copy is framejit's source as it is now (its
digest is in every cache key), shared by a test module's programs (the `install` fixture in conftest.py)."""
from __future__ import annotations

import json
import os
import shutil

from tests.helpers import BACKEND_MODULES, run_program

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def copy_framejit(folder) -> str:
    shutil.copytree(os.path.join(REPO, "framejit"), folder / "framejit", ignore=shutil.ignore_patterns("__pycache__"))
    return str(folder)


def run_warm(tmp_path, install: str, program: str, *argv, backend: str) -> dict:
    """Run `program` (argv: backend, *argv) and return the JSON object its last line prints."""
    script = tmp_path / "program.py"  # one path: the frame cache keys functions by module and qualname
    script.write_text(program)
    env = dict(os.environ, FRAMEJIT_CACHE_DIR=str(tmp_path / "cache"), FRAMEJIT_CACHE="1", FRAMEJIT_LOGS="cache",
               TRITON_INTERPRET="1")  # the triton backend's kernels run on CPU tensors
    rc, out, err = run_program(tmp_path, script, backend, *argv, env=env, preload=BACKEND_MODULES.get(backend, ()),
                               pythonpath=os.pathsep.join([install, REPO]))
    assert rc == 0, err
    return json.loads(out.strip().splitlines()[-1])
