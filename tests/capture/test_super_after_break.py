"""Zero-argument super() in a frame that breaks (review revG G2; NOTE [Zero-argument super() on 3.11] in
capture/break_sites.py).

On CPython 3.11, `print("hi"); return super().forward(x)` in an nn.Linear subclass raised AttributeError
("'super' object has no attribute 'forward'") or TypeError where eager returns: 3.11's super() takes the
instance from the frame's first local, which in a resume function is another argument. A frame that calls
super() after its break now runs eagerly on 3.11 (counted as an eager frame, with its reason); a super object
made before the break crosses it as a value; 3.12 and later break and resume as usual.
"""
from __future__ import annotations

import contextlib
import io
import sys

import pytest
import torch

import framejit


def _opaque(x):
    print("opaque")
    return x + 1


class PrintFirst(torch.nn.Linear):
    def forward(self, x):
        print("hi")
        return super().forward(x)


class BreakInArgument(torch.nn.Linear):
    def forward(self, x):
        return super().forward(_opaque(x))


class BreakThenSuper(torch.nn.Linear):
    def forward(self, x):
        h = x * 2
        print("a")
        return torch.relu(super().forward(h))


@pytest.mark.parametrize("cls, called_after", [(PrintFirst, True), (BreakInArgument, False), (BreakThenSuper, True)])
def test_super_after_a_break_equals_eager(cls, called_after):
    torch.manual_seed(0)
    model = cls(3, 3)
    compiled = framejit.compile(model, backend="eager")
    start = framejit.stats()
    for rows in (2, 4):
        x = torch.randn(rows, 3)
        outs = []
        for run in (model, compiled):
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                outs.append((run(x), printed.getvalue()))
        assert torch.allclose(outs[0][0], outs[1][0]) and outs[0][1] == outs[1][1]
    end = framejit.stats()
    reasons = end["eager_frame_reasons"][len(start["eager_frame_reasons"]):]
    if sys.version_info < (3, 12) and called_after:  # super() itself runs after the break
        assert any("super()" in str(r) for r in reasons), reasons
    else:
        assert end["eager_frames"] == start["eager_frames"], reasons


class SuperInALoop(torch.nn.Linear):
    def forward(self, x):
        for _ in range(2):
            x = torch.tanh(super().forward(x))
            print("step")
        return x


def test_super_in_a_loop_around_a_break_equals_eager():
    torch.manual_seed(0)
    model = SuperInALoop(3, 3)
    compiled = framejit.compile(model, backend="eager")
    for rows in (2, 4):
        x = torch.randn(rows, 3)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            got = compiled(x)
        assert torch.allclose(got, model(x)) and printed.getvalue() == "step\nstep\n"
