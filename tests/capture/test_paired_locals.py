"""Resume functions with 17 or more locals read the right variables on 3.13 (NOTE [Paired locals in copied
code] in capture/emit.py).

3.13 packs two local indices into one LOAD_FAST_LOAD_FAST / STORE_FAST_LOAD_FAST / STORE_FAST_STORE_FAST
argument, 4 bits each. Resume code copies the user's instructions with other local indices (stack arguments
first); the `bytecode` library split such a pair only above index 16, so an index of exactly 16 spilled into
the other half's bits and the resumed code read another local (`acc + m` read `k + ___stack0`: TypeError
where eager returns). On 3.11 and 3.12 there are no paired instructions; the programs run there too.
Differential: eager vs compiled over calls with new values and loop counts; results and printed text.
"""
from __future__ import annotations

import contextlib
import io

import pytest
import torch

import framejit


def _four_loops(x, n):  # issue 15, found by helper h11vlm (/tmp/h11vlm/bug313.py)
    acc = x * 0
    for k, v in {"a": 1, "b": 2}.items():
        print("item", k)
        w = acc * v
        acc = acc + w
    for a, b in zip([1, 2, 3], [4, 5, 6]):
        print("zip", a)
        s = a * b
        if s > 8:
            break
        acc = acc + s
    j = 0
    while j < n:
        print("while", j)
        u = acc.sum() * j
        acc = acc + u
        j += 1
    for p in range(2):
        for q in range(2):
            print("nested", p, q)
            m = p * 10 + q
            acc = acc + m
    return acc


def _many_locals(x, n):
    v0, v1, v2, v3, v4, v5, v6, v7 = x + 0, x + 1, x + 2, x + 3, x + 4, x + 5, x + 6, x + 7
    v8, v9, v10, v11, v12, v13, v14, v15 = x + 8, x + 9, x + 10, x + 11, x + 12, x + 13, x + 14, x + 15
    v16, v17, v18, v19 = x + 16, x + 17, x + 18, x + 19
    acc = x * 0
    for i in range(n):
        print("step", i)
        # consecutive loads at both alignments, so whichever local lands at index 16 is read in a pair
        s1 = torch.stack((v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15, v16, v17, v18))
        s2 = torch.stack((acc, v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15, v16, v17,
                          v18, v19))
        w1 = torch.arange(1.0, 20.0).unsqueeze(1)
        w2 = torch.arange(1.0, 22.0).unsqueeze(1) * (i + 1)
        acc = acc + (s1 * w1).sum(0) + (s2 * w2).sum(0)
        v19, v0 = v0 * 0.5, v19 * 0.25  # a pair of stores
    return acc, v0, v19


def _run(fn, *args):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        result = fn(*args)
    return result, out.getvalue()


@pytest.mark.parametrize("fn", [_four_loops, _many_locals], ids=["four_loops", "many_locals"])
def test_resume_functions_with_many_locals_match_eager(fn):
    framejit.reset()
    compiled = framejit.compile(fn, backend="eager")
    for size, n in ((3, 3), (3, 4), (5, 2)):
        x = torch.randn(size)
        expected, expected_text = _run(fn, x.clone(), n)
        got, text = _run(compiled, x.clone(), n)
        torch.testing.assert_close(got, expected)
        assert text == expected_text
