"""A frame that builds a namedtuple starts warm (NOTE [Generated namedtuple __new__] in guards/codegen.py):
95a9a70 guarded the generated `__new__` staticmethod by identity, which has no importable name, so every
such entry was kept in memory only. The guard that replaced it still follows a `__new__` replaced later."""
from __future__ import annotations

import collections

import pytest
import torch

import framejit
from tests.helpers import run_cache_program

TEMPLATE = """
import collections, json, torch, framejit
P = collections.namedtuple("P", "a b"{defaults})
def f(x):
{body}
cf = framejit.compile(f, backend="eager")
x = torch.arange(3.0)
ok = torch.equal(cf(x), f(x))
s = framejit.stats()
print(json.dumps({{"ok": ok, "traced": s["frames_traced"], "loaded": s["frames_loaded"]}}))
"""
PROGRAM = TEMPLATE.format(defaults=", defaults=(3,)", body="    p = P(x * 2)\n    return p.a + p.b")
ASDICT = TEMPLATE.format(defaults="", body='    d = P(x * 2, 3)._asdict()\n    return d["a"] * d["b"]')


@pytest.mark.parametrize("program", [PROGRAM, ASDICT], ids=["construct_and_read_fields", "asdict_method"])
def test_a_frame_using_a_namedtuple_is_loaded_by_a_warm_process(tmp_path, program):
    # NOTE [Namedtuple methods by their class]: `_asdict` has module 'collections', qualname 'P._asdict'
    cold = run_cache_program(tmp_path, "nt.py", program)
    warm = run_cache_program(tmp_path, "nt.py", program)
    assert cold == {"ok": True, "traced": 1, "loaded": 0}
    assert warm == {"ok": True, "traced": 0, "loaded": 1}


Q = collections.namedtuple("Q", "a b")


def test_a_new_replaced_after_the_first_call_is_followed():
    def f(x):
        q = Q(x, 1)
        return q.a * 2 + q.b

    cf = framejit.compile(f, backend="eager")
    x = torch.ones(2)
    torch.testing.assert_close(cf(x), f(x))
    original = Q.__new__
    try:
        Q.__new__ = staticmethod(lambda cls, a, b: tuple.__new__(cls, (a * 10, b)))
        torch.testing.assert_close(cf(x), f(x))  # 21, not 3
        assert f(x)[0].item() == 21
    finally:
        Q.__new__ = original
    torch.testing.assert_close(cf(x), f(x))
