"""Every graph of a forward that several plain breaks split keeps the backend's joint (issue 14; NOTE [Joints kept
across several breaks] in capture/kept_joints.py), and a resume entry loaded from the frame cache in a new process
keeps its joints as the cold process did (NOTE [Clean entries of a warm process]).

Differential: eager vs compiled from the same weights and data, 3 training steps (forward, loss, backward, AdamW):
losses, gradients and parameters equal within rtol 1e-4 / atol 1e-5, printed text equal; the backward runs of each
joint are counted (the backward ran in the backend, not eagerly). Code after the last break that observes the
autograd state of an earlier graph's result sees eager's.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import framejit
from framejit.backends import joint as joint_mod
from framejit.backends.checks import unchecked

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOG: list = []


class _Recording:
    def __init__(self, name: str) -> None:
        self.name, self.joints = name, []

    def __call__(self, gm, example_inputs):
        compiled = framejit.lookup_backend(self.name)(gm, example_inputs)
        self.joints.append(compiled)
        return compiled

    def backward_runs(self) -> list[int]:
        found = []
        for compiled in map(unchecked, self.joints):
            joint = compiled if isinstance(compiled, joint_mod.JointGraph) else (
                getattr(compiled, "_joint", None) or getattr(compiled, "_training", None))
            found.append(joint.stats["backward"] if joint is not None else 0)
        return found


class _TwoPrints(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(4, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        print("one")
        h = torch.relu(self.b(h))
        print("two")
        return self.c(h).square()


class _PrintThenBranch(_TwoPrints):
    def forward(self, x):
        h = torch.tanh(self.a(x))
        print("one")
        g = torch.sigmoid(self.b(h))
        if g.sum() > 0:  # always true (sigmoid): a data-dependent branch, a graph break
            return self.c(g * h).square()
        return self.c(g).abs()


class _ThreePrints(_TwoPrints):
    def forward(self, x):
        h = torch.tanh(self.a(x))
        print("one")
        h = torch.relu(self.b(h))
        print("two")
        h = self.c(h) * 2
        print("three")
        return h.square()


@pytest.mark.parametrize("cls, graphs", [(_TwoPrints, 3), (_PrintThenBranch, 3), (_ThreePrints, 4)],
                         ids=["two_prints", "print_then_branch", "three_prints"])
def test_every_graph_of_a_split_forward_keeps_its_joint(cls, graphs, capsys):
    own_code = framejit.stats()["graphs_own_code"]
    torch.manual_seed(0)
    model, copy = cls(), cls()
    copy.load_state_dict(model.state_dict())
    recording = _Recording("onnxrt")
    fast = framejit.compile(copy, backend=recording)
    opt_e, opt_c = torch.optim.AdamW(model.parameters(), lr=0.01), torch.optim.AdamW(copy.parameters(), lr=0.01)
    for step in range(3):
        x = torch.randn(3 + step, 4, generator=torch.Generator().manual_seed(step))
        expected = model(x).mean()
        expected.backward()
        printed = capsys.readouterr().out
        got = fast(x).mean()
        got.backward()
        assert capsys.readouterr().out == printed
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
        for p, q in zip(model.parameters(), copy.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
        opt_e.step(), opt_c.step()
        opt_e.zero_grad(), opt_c.zero_grad()
    for p, q in zip(model.parameters(), copy.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)
    assert framejit.stats()["graphs_own_code"] == own_code
    runs = recording.backward_runs()
    assert len(runs) >= graphs and all(r > 0 for r in runs), runs  # every graph's backward ran in the backend
    assert sum(runs) == 3 * graphs, runs  # each graph's backward once a step (a new shape may compile anew)


def _names(t) -> list[str]:
    out, todo, seen = [], [t.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        out.append(type(node).__name__)
        todo.extend(f for f, _ in node.next_functions)
    return sorted(out)


def first_result_read_after_the_last_break(x, w):
    y1 = (x * w).exp()
    print("a")
    y2 = (y1 * 2).sin()
    print("b")
    LOG.append(_names(y1))  # eager: ExpBackward0, MulBackward0, AccumulateGrad
    return y2.sum()


def chain_read_through_the_second_result(x, w):
    y1 = (x * w).exp()
    print("a")
    y2 = (y1 * 2).sin()
    print("b")
    LOG.append(_names(y2))  # eager: SinBackward0, MulBackward0, ExpBackward0, ...
    return y2.sum()


def first_result_retained_after_the_last_break(x, w):
    y1 = (x * w).exp()
    print("a")
    y2 = (y1 * 2).sin()
    print("b")
    y1.retain_grad()
    loss = (y2 * 3).sum()
    loss.backward(retain_graph=True)
    LOG.append(round(float(y1.grad.sum()), 4))
    return loss


def first_result_hooked_in_the_middle(x, w):
    y1 = (x * w).exp()
    print("a")
    y2 = (y1 * 2).sin()
    if y2.sum() > -10:  # always true
        y1.register_hook(lambda g: LOG.append(round(float(g.sum()), 4)))
    return (y2 * y1).sum()


def _run(fn, seed: int):
    LOG.clear()
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(3, 4, generator=gen) * 0.5).requires_grad_()
    w = torch.randn(3, 4, generator=gen).requires_grad_()
    loss = fn(x, w)
    loss.backward()
    return loss.detach(), x.grad, w.grad, list(LOG)


@pytest.mark.parametrize("fn", [first_result_read_after_the_last_break, chain_read_through_the_second_result,
                                first_result_retained_after_the_last_break, first_result_hooked_in_the_middle],
                         ids=lambda f: f.__name__)
def test_earlier_results_observed_after_a_later_break_as_in_eager(fn, capsys):
    compiled = framejit.compile(fn, backend="onnxrt")
    for seed in range(3):
        expected = _run(fn, seed)
        printed = capsys.readouterr().out
        got = _run(compiled, seed)
        assert capsys.readouterr().out == printed
        torch.testing.assert_close(got[:3], expected[:3])
        assert got[3] == expected[3]


PROGRAM = textwrap.dedent('''
    import json
    import torch
    import framejit
    from framejit.backends import joint as joint_mod

    RUNS = {"backward": 0}
    counted = joint_mod._Counted.__call__
    def counting(self, args):
        if self.key == "backward":
            RUNS["backward"] += 1
        return counted(self, args)
    joint_mod._Counted.__call__ = counting

    class Split(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(4, 8), torch.nn.Linear(8, 2)

        def forward(self, x):
            h = torch.tanh(self.a(x))
            print("between")
            return self.b(h).square()

    torch.manual_seed(0)
    model = Split()
    fast = framejit.compile(model, backend="onnxrt")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(6):
        x = torch.randn(3, 4, generator=torch.Generator().manual_seed(step))
        loss = fast(x).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss))
    stats = framejit.stats()
    print(json.dumps({"losses": losses, "own": stats["graphs_own_code"], "loaded": stats["frames_loaded"],
                      "backward": RUNS["backward"]}))
''')


def test_a_warm_process_keeps_the_joints_of_a_split_forward(tmp_path):
    """The resume entry loaded from the frame cache keeps its flag: the graph before the break keeps its joint on
    every step of the warm process (it ran as its own code after 4 recomputations before)."""
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    env = {**os.environ, "FRAMEJIT_CACHE": "1", "FRAMEJIT_CACHE_DIR": str(tmp_path / "cache"),
           "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, str(program)], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert warm["loaded"] > 0  # the resume entry came from the cache
    assert warm["losses"] == pytest.approx(cold["losses"], rel=1e-5, abs=1e-6)
    assert cold["own"] == 0 and warm["own"] == 0
    assert cold["backward"] == warm["backward"] == 12  # two graphs' backward, six steps


class _DropoutSplit(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(4, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)
        self.drop = torch.nn.Dropout(0.3)

    def forward(self, x):
        h = self.drop(torch.tanh(self.a(x)))
        print("one")
        h = self.drop(torch.relu(self.b(h)))
        if h.sum() > -1e9:  # always true: a graph break
            return self.c(h).square()
        return self.c(h).abs()


def test_graphs_with_dropout_keep_their_joints(capsys):
    """NOTE [Kept joints that draw random numbers]: each of the three graphs draws (or, the last, is after the
    draws) and keeps its joint; losses, gradients, parameters and the generator's next numbers are eager's."""
    own_code = framejit.stats()["graphs_own_code"]
    torch.manual_seed(0)
    model, copy = _DropoutSplit(), _DropoutSplit()
    copy.load_state_dict(model.state_dict())
    recording = _Recording("onnxrt")
    fast = framejit.compile(copy, backend=recording)
    opt_e, opt_c = torch.optim.AdamW(model.parameters(), lr=0.01), torch.optim.AdamW(copy.parameters(), lr=0.01)
    for step in range(3):
        x = torch.randn(5, 4, generator=torch.Generator().manual_seed(step))
        results = []
        for run, opt in ((model, opt_e), (fast, opt_c)):
            torch.manual_seed(100 + step)
            loss = run(x).mean()
            loss.backward()
            results.append((loss.detach(), *(p.grad.clone() for p in opt.param_groups[0]["params"]), torch.rand(3)))
            opt.step()
            opt.zero_grad()
        assert capsys.readouterr().out == "one\n" * 2
        for got, want in zip(results[1], results[0]):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), copy.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-4, atol=1e-5)
    assert framejit.stats()["graphs_own_code"] == own_code
    assert recording.backward_runs() == [3, 3, 3]


def dropout_observed_after_the_last_break(x, w):
    y1 = torch.nn.functional.dropout((x * w).exp(), 0.4)
    print("a")
    y2 = torch.nn.functional.dropout(y1 * 2, 0.5).sin()
    print("b")
    LOG.append(_names(y2))  # the chain is recomputed as own code, drawing eager's numbers again
    return y2.sum()


def dropout_observed_after_one_break(x, w):
    y = torch.nn.functional.dropout((x * w).exp(), 0.4)
    print("a")
    LOG.append(type(y.grad_fn).__name__)
    return (y * 3).sum()


@pytest.mark.parametrize("fn", [dropout_observed_after_the_last_break, dropout_observed_after_one_break],
                         ids=lambda f: f.__name__)
def test_a_recomputed_graph_draws_eagers_numbers(fn, capsys):
    compiled = framejit.compile(fn, backend="onnxrt")
    for seed in range(3):
        results = []
        for run in (fn, compiled):
            torch.manual_seed(seed)
            results.append((*_run(run, seed), torch.rand(3)))
        torch.testing.assert_close(results[1][:3], results[0][:3])
        assert results[1][3] == results[0][3]
        torch.testing.assert_close(results[1][4], results[0][4])


class _DrawingStream:
    """A stdout whose write draws from torch's default generator (NOTE [Draws between the joint and its
    recomputation])."""

    def __init__(self) -> None:
        self.text = []

    def write(self, s):
        self.text.append((s, torch.rand(1).item()))
        return len(s)

    def flush(self):
        pass


@pytest.mark.parametrize("fn", [dropout_observed_after_the_last_break, dropout_observed_after_one_break],
                         ids=lambda f: f.__name__)
def test_draws_made_by_the_break_survive_the_recomputation(fn):
    import contextlib
    compiled = framejit.compile(fn, backend="onnxrt")
    for seed in range(3):
        results = []
        for run in (fn, compiled):
            torch.manual_seed(seed)
            stream = _DrawingStream()
            with contextlib.redirect_stdout(stream):
                ran = _run(run, seed)
            results.append((*ran, stream.text, torch.rand(3)))
        torch.testing.assert_close(results[1][:3], results[0][:3])
        assert results[1][3:5] == results[0][3:5]  # names seen, and the numbers the prints drew
        assert torch.equal(results[1][5], results[0][5])  # the generator after the call is eager's
