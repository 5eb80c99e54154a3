"""A frame that builds a namedtuple starts warm (NOTE [Generated namedtuple __new__] in guards/codegen.py):
95a9a70 guarded the generated `__new__` staticmethod by identity, which has no importable name, so every
such entry was kept in memory only. The guard that replaced it still follows a `__new__` replaced later."""
from __future__ import annotations

import collections

import torch

import framejit
from tests.helpers import run_cache_program

PROGRAM = """
import collections, json, torch, framejit
P = collections.namedtuple("P", "a b", defaults=(3,))
def f(x):
    p = P(x * 2)
    return p.a + p.b
cf = framejit.compile(f, backend="eager")
x = torch.arange(3.0)
ok = torch.equal(cf(x), f(x))
s = framejit.stats()
print(json.dumps({"ok": ok, "traced": s["frames_traced"], "loaded": s["frames_loaded"]}))
"""


def test_a_frame_building_a_namedtuple_is_loaded_by_a_warm_process(tmp_path):
    cold = run_cache_program(tmp_path, "nt.py", PROGRAM)
    warm = run_cache_program(tmp_path, "nt.py", PROGRAM)
    assert cold == {"ok": True, "traced": 1, "loaded": 0}
    assert warm == {"ok": True, "traced": 0, "loaded": 1}


ASDICT = """
import collections, json, torch, framejit
P = collections.namedtuple("P", "a b")
def f(x):
    d = P(x * 2, 3)._asdict()
    return d["a"] * d["b"]
cf = framejit.compile(f, backend="eager")
x = torch.arange(3.0)
ok = torch.equal(cf(x), f(x))
s = framejit.stats()
print(json.dumps({"ok": ok, "traced": s["frames_traced"], "loaded": s["frames_loaded"]}))
"""


def test_a_frame_calling_a_namedtuple_method_is_loaded_by_a_warm_process(tmp_path):
    # NOTE [Namedtuple methods by their class]: `_asdict` has module 'collections', qualname 'P._asdict'
    cold = run_cache_program(tmp_path, "asdict.py", ASDICT)
    warm = run_cache_program(tmp_path, "asdict.py", ASDICT)
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
