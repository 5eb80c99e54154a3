"""The options of a non-reentrant activation checkpoint that change what eager computes reach the region's
recomputation (NOTE [Checkpoint options] in capture/higher_order.py): with preserve_rng_state=False eager's
backward recomputes `fn` drawing NEW random numbers from the global generator (a new dropout mask for the
gradient, the stream after backward advanced), early_stop decides how far that recomputation goes. Each program
runs eagerly and compiled from the same seed, three calls, and compares the loss, the gradients and the next
number of the global generator after every backward."""
from __future__ import annotations

import textwrap

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

import framejit
from tests.helpers import run_cache_program

LIN = torch.nn.Linear(4, 4)


def _dropped(t):
    return F.dropout(t, 0.5, training=True) * t


def _two_draws(t):
    a = F.dropout(t, 0.5, training=True)
    return F.dropout(a * 2, 0.3, training=True).sin() * 3


def _layer(t):
    return F.dropout(LIN(t), 0.5, training=True) * t


def _run(fn, sizes=(6, 6, 4), before=None, backend="eager"):
    framejit.reset()
    results = []
    for f in (fn, framejit.compile(fn, backend=backend)):
        torch.manual_seed(0)
        out = []
        for i, n in enumerate(sizes):
            if before is not None:
                before(i)
            x = torch.arange(1.0, n + 1.0, requires_grad=True)
            loss = f(x)
            loss.backward()
            out.append((loss.item(), x.grad.tolist(), LIN.weight.grad.tolist() if LIN.weight.grad is not None
                        else None, torch.rand(1).item()))
            LIN.weight.grad = None
        results.append(out)
    return results


def test_preserve_rng_state_false_draws_again_in_backward():
    def f(x):
        return checkpoint(_dropped, x, use_reentrant=False, preserve_rng_state=False).sum()
    before = framejit.stats()
    eager, compiled = _run(f)
    assert compiled == eager
    after = framejit.stats()
    assert after["eager_frames"] == before["eager_frames"] and after["graphs"] > before["graphs"]


def test_preserve_rng_state_false_draws_again_in_backward_under_onnxrt():
    """revBC HIGH-3: onnxrt's AOT joint saved the forward's mask (call 0 x.grad [0, 0, 12, 0, 0, 0] where eager
    gives [4, 8, 0, 16, 20, 24], the stream after backward differed); such a graph now runs as torch runs it."""
    def f(x):
        return checkpoint(_dropped, x, use_reentrant=False, preserve_rng_state=False).sum()
    eager, compiled = _run(f, sizes=(6, 4), backend="onnxrt")
    assert compiled == eager


def test_preserve_rng_state_false_with_parameters_and_random_ops_around():
    def f(x):
        y = F.dropout(x, 0.5, training=True)
        z = checkpoint(_layer, y[:4] * 2, use_reentrant=False, preserve_rng_state=False)
        return (F.dropout(z, 0.2, training=True) + y[:4]).sum()
    eager_frames = framejit.stats()["eager_frames"]
    eager, compiled = _run(f, sizes=(6, 6, 5))
    assert compiled == eager
    assert framejit.stats()["eager_frames"] == eager_frames


def test_early_stop_false_recomputes_every_draw():
    def f(x):
        return checkpoint(_two_draws, x, use_reentrant=False, preserve_rng_state=False, early_stop=False).sum()
    eager, compiled = _run(f)
    assert compiled == eager


def _draws_unused(t):
    return (t * t).sum() + torch.rand(3).sum() * 0  # drawn again in backward only without early stop


def test_early_stop_override_set_inside_the_frame_reaches_the_region():
    """revBC MED-1: `with set_checkpoint_early_stop(False):` inside the compiled function was undone before the
    region ran, so its recomputation stopped early and drew nothing (torch.rand after backward 0.132 where eager
    gives 0.4901)."""
    def f(x):
        with set_checkpoint_early_stop(False):
            return checkpoint(_draws_unused, x, use_reentrant=False, preserve_rng_state=False)
    eager, compiled = _run(f)
    assert compiled == eager


def test_preserve_rng_state_read_from_a_global_that_changes():
    flag = [False]

    def f(x):
        return checkpoint(_two_draws, x, use_reentrant=False, preserve_rng_state=flag[0]).sum()

    def before(i):
        flag[0] = i == 1
    eager, compiled = _run(f, before=before)
    assert compiled == eager


def test_nested_checkpoint_without_preserved_rng_breaks():
    def f(x):
        inner = lambda t: checkpoint(_two_draws, t, use_reentrant=False, preserve_rng_state=False) * 2  # noqa: E731
        return checkpoint(inner, x, use_reentrant=False).sum()
    eager, compiled = _run(f)
    assert compiled == eager


def test_non_reentrant_without_preserved_rng_inside_a_reentrant_one_draws_again():
    """revBC HIGH-2: the inner region was part of the reentrant region, recomputed with the forward's RNG state
    (call 0: x.grad [1, 1, 49, 1, 1, 1] where eager gives [17, 33, 1, 65, 81, 97], the stream after it differed)."""
    def g(t):
        return checkpoint(_dropped, t * 2, use_reentrant=False, preserve_rng_state=False) + t

    def f(x):
        return checkpoint(g, x, use_reentrant=True).sum()
    eager, compiled = _run(f)
    assert compiled == eager


def test_unknown_determinism_check_raises_as_eager():
    def f(x):
        return checkpoint(_two_draws, x, use_reentrant=False, determinism_check="bogus").sum()
    errors = []
    for fn in (f, framejit.compile(f, backend="eager")):
        try:
            fn(torch.ones(3, requires_grad=True))
        except ValueError as e:
            errors.append(str(e))
    assert len(errors) == 2 and errors[0] == errors[1]


PROGRAM = textwrap.dedent('''
    import json, torch, framejit
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

    def blk(t):
        return F.dropout(t, 0.5, training=True) * t

    def f(x):
        return checkpoint(blk, x, use_reentrant=False, preserve_rng_state=False).sum()

    out = []
    for fn in (f, framejit.compile(f, backend="eager")):
        torch.manual_seed(0)
        got = []
        for i in range(3):
            x = torch.arange(1.0, 7.0, requires_grad=True)
            loss = fn(x)
            loss.backward()
            got.append([loss.item(), x.grad.tolist(), torch.rand(1).item()])
        out.append(got)
    s = framejit.stats()
    print(json.dumps({"same": out[0] == out[1], "traced": s["frames_traced"], "loaded": s["frames_loaded"]}))
''')


def test_options_persist_in_the_frame_cache(tmp_path):
    cold = run_cache_program(tmp_path, "prs.py", PROGRAM)
    warm = run_cache_program(tmp_path, "prs.py", PROGRAM)
    assert cold["same"] and cold["traced"] > 0, cold
    assert warm["same"] and warm["traced"] == 0 and warm["loaded"] >= 1, warm
