"""Warm starts for frames that break inside a try block (issue 16; NOTE [Persisted try-block successors] in
capture/persisted_code.py): the break resumes in a tail function whose edges trampoline into hooked resume
functions. Such entries were kept in memory only ("the break has try-block successors"), so every warm
process traced them again; torch's optimizers break there on every compiled `step()` (the step runs inside
`_use_grad_for_differentiable`'s try/finally). The programs compare with eager in both processes: values,
the order of logged effects (the except and finally blocks' included) and printed lines.

Each program runs in a forked child of a program server (tests.helpers.run_program) on a copy of framejit
(its source digest is in every key).
"""
from __future__ import annotations

import textwrap

import pytest

from tests.cache.warm_programs import copy_framejit, run_warm

TRY_PROGRAM = textwrap.dedent('''
    import contextlib, io, json, sys
    import torch
    import framejit

    LOG = []

    def step(x, flag):
        prev = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(False)
            y = x * 2
            print("inside", flag, y.shape[0])  # a graph break inside the try block
            if flag:
                raise ValueError("odd step")
            y = y + 1
        except ValueError as e:
            LOG.append(("caught", str(e)))
            y = y - 1
        finally:
            torch.set_grad_enabled(prev)
            LOG.append(("finally", torch.is_grad_enabled()))
        return y.sum() * 3

    def run(fn):
        LOG.clear()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            values = [fn(torch.arange(4.0) + k, k % 2 == 1).item() for k in range(4)]
        return values, list(LOG), out.getvalue()

    want = run(step)
    got = run(framejit.compile(step, backend=sys.argv[1]))
    stats = framejit.stats()
    print(json.dumps({"equal": got == want, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"],
                      "eager_frames": stats["eager_frames"]}))
''')

OPTIMIZER_PROGRAM = textwrap.dedent('''
    import copy, json, sys
    import torch
    import framejit

    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    ref = copy.deepcopy(m)
    # no momentum: no per-parameter state (steps reading `opt.state[p]`: tests/cache/test_warm_gaps4.py)
    opt = torch.optim.SGD(m.parameters(), lr=0.1, weight_decay=0.01)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, weight_decay=0.01)
    step = framejit.compile(opt.step, backend=sys.argv[1])
    for s in range(3):
        for model in (m, ref):
            x = torch.randn(2, 4, generator=torch.Generator().manual_seed(s))
            model(x).square().sum().backward()
        step()
        ref_opt.step()
        opt.zero_grad()
        ref_opt.zero_grad()
    stats = framejit.stats()
    print(json.dumps({"equal": all(torch.allclose(a, b) for a, b in zip(m.parameters(), ref.parameters())),
                      "traced": stats["frames_traced"], "loaded": stats["frames_loaded"],
                      "eager_frames": stats["eager_frames"]}))
''')


@pytest.fixture(scope="module")
def install(tmp_path_factory):
    """A copy of framejit shared by the module's tests (one program server for all of them)."""
    return copy_framejit(tmp_path_factory.mktemp("install"))


@pytest.mark.parametrize("program", [TRY_PROGRAM, OPTIMIZER_PROGRAM], ids=["try_except_finally", "optimizer_step"])
def test_a_break_inside_a_try_block_starts_warm(tmp_path, install, program):
    cold = run_warm(tmp_path, install, program, backend="eager")
    warm = run_warm(tmp_path, install, program, backend="eager")
    assert cold["equal"] and warm["equal"], (cold, warm)
    assert cold["traced"] > 0 and cold["eager_frames"] == 0, cold
    assert (warm["traced"], warm["eager_frames"]) == (0, 0) and warm["loaded"] > 0, warm
