"""Adversarial differential programs, seventeenth round (issue 12, red team): each runs eagerly and compiled
on separate but equal state over several calls, changing what the code reads between calls (or, for the
frame cache, between processes), and compares results, printed output and the state left behind."""
from __future__ import annotations

import json
import os
import textwrap

import pytest
import torch

import framejit
from tests.helpers import run_program


# ---- NOTE [Hash-seeded facts] (capture/hash_order.py) ------------------------------------------------------

HASH_PROGRAM = textwrap.dedent('''
    import enum, json
    import torch
    import framejit

    class Color(enum.Enum):
        RED = 1
        GREEN = 2
        BLUE = 3

    W = {k: float(i + 1) for i, k in enumerate(["alpha", "beta", "gamma", "delta", "eps"])}

    def loop(x):
        for k in {"alpha", "beta", "gamma", "delta", "eps"}:
            x = x * 2 + W[k]
        return x

    def printed(x):
        return x + 1, str(set(W)), f"{frozenset(W)}", ",".join(set(W))

    def popped(x):
        s = set(W)
        return x * len(s.pop()), [c.name for c in {Color.RED, Color.GREEN, Color.BLUE}]

    def hashed(x):
        return x + hash(("alpha", 1)) % 1000, "beta".__hash__() % 1000

    def plain(v):
        return v.tolist() if isinstance(v, torch.Tensor) else [plain(i) for i in v] if isinstance(v, tuple) else v

    result = {}
    for fn in (loop, printed, popped, hashed):
        want = [plain(fn(torch.ones(2) * k)) for k in range(3)]
        got = [plain(framejit.compile(fn, backend="eager")(torch.ones(2) * k)) for k in range(3)]
        result[fn.__name__] = got == want
    stats = framejit.stats()
    print(json.dumps({"equal": result, "loaded": stats["frames_loaded"]}))
''')


def test_string_hash_facts_of_a_warm_entry_follow_the_new_processes_seed(tmp_path):
    # before: the order of iterating or printing a set of strings (or enum members) and hash() of a string
    # were baked into the entry, and a process with another PYTHONHASHSEED (random by default) loaded it and
    # returned the first process's order / hash (loop: 119.0 where eager gives 83.0)
    script = tmp_path / "program.py"
    script.write_text(HASH_PROGRAM)
    outs = []
    for seed in ("1", "2", "1"):
        env = dict(os.environ, FRAMEJIT_CACHE_DIR=str(tmp_path / "cache"), FRAMEJIT_CACHE="1", PYTHONHASHSEED=seed)
        rc, out, err = run_program(tmp_path, script, env=env)
        assert rc == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert [o["equal"] for o in outs] == [dict.fromkeys(["loop", "printed", "popped", "hashed"], True)] * 3
    assert outs[2]["loaded"] >= 4  # the same seed as the first process still starts warm


# ---- NOTE [Iterators of their own type] (capture/values/containers.py) --------------------------------------

def _iterators_across_a_break(x, it):
    r = iter(range(4))
    t = iter((x, x * 2, 5))
    next(r), next(t)
    print("break")  # the frame breaks here holding both iterators
    return x + next(r) + next(t), type(r).__name__, type(t).__name__, list(t), next(it), type(it).__name__


@pytest.mark.parametrize("argument", ["range", "tuple"])
def test_range_and_tuple_iterators_keep_their_type_across_a_break(argument, capsys):
    # before: at the break both were rebuilt as list iterators for the resume function, so `type(r)` after
    # it answered 'list_iterator' where eager gives 'range_iterator' / 'tuple_iterator' (every call)
    def plain(v):
        if isinstance(v, (list, tuple)):
            return [plain(i) for i in v]
        return v.tolist() if isinstance(v, torch.Tensor) else v

    def fresh():
        it = iter(range(3, 9)) if argument == "range" else iter((1.5, -0.0, 7))
        next(it)
        return it

    framejit.reset()
    compiled = framejit.compile(_iterators_across_a_break, backend="eager")
    for k in range(3):
        want_it, got_it = fresh(), fresh()
        want = plain(_iterators_across_a_break(torch.ones(2) * k, want_it))
        got = plain(compiled(torch.ones(2) * k, got_it))
        assert got == want
        assert list(got_it) == list(want_it)  # the argument advanced as in eager
    assert capsys.readouterr().out == "break\n" * 6


# ---- NOTE [Lazy module walks] (capture/modules.py) ------------------------------------------------------------

class _Walker(torch.nn.Module):
    def __init__(self, mode):
        super().__init__()
        self.a = torch.nn.Linear(2, 2)
        self.b = torch.nn.ReLU()
        self.mode = mode

    def forward(self, x):
        if self.mode == "store_breaks":  # replacing submodule `a` breaks the graph at the store
            gen = self.named_children()
            self.a = None
            return x, [n for n, _ in gen]
        if self.mode == "partly_drawn":
            gen = self.named_children()
            first = next(gen)[0]
            self.b = None
            return x, [first] + [n for n, _ in gen]
        if self.mode == "in_a_loop":
            seen = []
            for n, _ in self.named_children():
                if n == "a":
                    self.b = None
                seen.append(n)
            return x, seen
        return x * 2, self.named_children()  # returned: drawn by the caller after it changed the module


@pytest.mark.parametrize("mode", ["store_breaks", "partly_drawn", "in_a_loop", "returned"])
def test_a_module_walk_that_outlives_the_graph_is_drawn_lazily(mode):
    # before: a walk live at a break (or returned) was rebuilt as a list of the entries walked when it was
    # made, so a submodule set to None at the break (or by the caller) was still listed: ['a', 'b'] where
    # eager gives ['b'] (store_breaks), ['a', 'b'] for ['a'] (partly_drawn, in_a_loop), every call
    def run(m, compiled):
        fn = framejit.compile(m, backend="eager") if compiled else m
        out = []
        for _ in range(3):
            m.a, m.b = m.a or torch.nn.Linear(2, 2), m.b or torch.nn.ReLU()
            x, names = fn(torch.ones(2))
            if mode == "returned":
                m.a = None
                names = (type(names).__name__, [n for n, _ in names])
            out.append((x.tolist(), names))
        return out

    framejit.reset()
    assert run(_Walker(mode), True) == run(_Walker(mode), False)
