"""Compiling a frame whose transformed code holds the user's objects as constants runs none of their code: a
tensor subclass held by a module (an attribute, in a list, a global) is not repr()'d on each recompile (NOTE
[Instructions read without constant reprs]; review revH MED-1: the log gained one `__repr__` per such tensor
at every recompile, and every large constant tensor was formatted).
"""
import torch

import framejit
from tests.helpers import CountingBackend

LOG = []


class Logged(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        LOG.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs)


G = torch.full((2,), 3.0).as_subclass(Logged)


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lst = [torch.full((2,), 2.0).as_subclass(Logged)]
        self.attr = torch.full((2,), 5.0).as_subclass(Logged)

    def forward(self, x):
        return x * self.lst[0] + G + self.attr


def test_recompiles_run_no_user_code_of_constants():
    m = M()
    cm = framejit.compile(m)
    for n in (2, 3, 4, 4, 5):  # 2 -> 3 recompiles (a symbolic entry); the later sizes hit it
        runs = []
        for fn in (m, cm):
            LOG.clear()
            r = fn(torch.arange(2.0 * n).reshape(n, 2))
            runs.append((type(r), r.as_subclass(torch.Tensor).tolist(), list(LOG)))
        assert runs[1] == runs[0]


ITEMS: list = []


def _index_read(x):
    return x * ITEMS[0]


def test_a_subclass_traced_earlier_changes_nothing_for_later_functions():
    """NOTE [Gated values counted per trace]: after one trace of a subclass with its own __torch_function__,
    every later trace took the routing path, which read every argument's class: a function reading a global
    list's first item, whose length grows between calls, recompiled on each call (6 compiles for 6 calls; 2
    without the earlier trace) in the fresh-clone CI's test order."""
    framejit.reset()
    compiled_m = framejit.compile(M())
    compiled_m(torch.ones(2, 2))
    counter = CountingBackend()
    compiled = framejit.compile(_index_read, backend=counter)
    ITEMS[:] = [2.0]
    for _ in range(6):
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), _index_read(x))
        ITEMS.append(1.0)
    assert counter.graph_count <= 2
    framejit.reset()
