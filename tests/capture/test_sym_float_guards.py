"""Shape-env guards that print `torch.sym_float(...)` (a size scaled by a float: F.interpolate with a
scale_factor under symbolic sizes) evaluate in the generated guard function (shapes._print names `torch`
as a guard constant). Before, the name `torch` was unbound there: the guard raised, counted as a miss, and
every new size recompiled (7 sizes, 7 traces; stock torch.compile: 2)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

import framejit


def _traced() -> int:
    return framejit.stats()["frames_traced"]


def test_interpolate_with_a_scale_factor_serves_every_size_from_one_entry():
    def f(x):
        return F.interpolate(x, scale_factor=0.5, mode="nearest") * 2

    cf = framejit.compile(f, backend="eager", dynamic=True)
    before = _traced()
    for s in (8, 10, 12, 14, 16, 18, 20, 9, 11):
        x = torch.randn(1, 2, s, s + 2)
        torch.testing.assert_close(cf(x), f(x))
    assert _traced() - before == 1
    # the relation the entry relies on (the halved size is not 1) still holds it to its sizes
    x = torch.randn(1, 2, 2, 3)
    torch.testing.assert_close(cf(x), f(x))
    assert _traced() - before == 2


def test_automatic_dynamic_interpolate_recompiles_once():
    def f(x):
        return F.interpolate(x, scale_factor=2.0, mode="bilinear", align_corners=False).sum((2, 3))

    cf = framejit.compile(f, backend="eager")
    before = _traced()
    for s in (4, 5, 6, 7, 9, 13):
        x = torch.randn(1, 3, s, s)
        torch.testing.assert_close(cf(x), f(x))
    assert _traced() - before == 2  # static, then symbolic
