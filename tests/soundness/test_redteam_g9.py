"""Red team hhuntG9 (issue 12): facts a compiled entry relied on, changed between calls. Differential: each
program runs eagerly and compiled over several calls with the same change made before each call; values and
the state observed after each call are compared."""
import torch

import framejit


def _run(fn, steps):
    """[(result, state)] per call; steps[k]() changes the state before call k and returns the state reader."""
    out = []
    for k, before in enumerate(steps):
        state = before()
        try:
            result = fn(torch.arange(k + 2, dtype=torch.float32))
        except Exception as e:  # noqa: BLE001 - compared with eager's
            result = (type(e), str(e))
        if isinstance(result, tuple):
            result = tuple(r.tolist() if isinstance(r, torch.Tensor) else r for r in result)
        out.append((result, state()))
    return out


def _differential(make, backend="eager"):
    fn, steps = make()
    expected = _run(fn, steps)
    framejit.reset()
    fn, steps = make()
    got = _run(framejit.compile(fn, backend=backend), steps)
    assert got == expected


def _method_objects_reinitialised():
    """NOTE [Functions a method object wraps]: `sm.__init__(g)` on a staticmethod (classmethod, property)
    already in a class dict: the entry is the same object, the function it calls is not."""
    log = []

    def a(x): return x + 1
    def b(x): return x * 7
    def ca(cls, x): return x + cls.k
    def cb(cls, x): return x * cls.k
    def pa(self): return 2.0
    def pb(self): return 5.0
    def sa(self, v): log.append(("sa", v))
    def sb(self, v): log.append(("sb", v))
    sm, cm, pr = staticmethod(a), classmethod(ca), property(pa, sa)

    class Base:
        k = 2.0
        s, c, p = sm, cm, pr

    class C(Base):
        def via_super(self, x):
            return super().s(x), super().c(x), x * super().p

    o = C()

    def f(x):
        o.p = 3.0
        return (o.s(x), C.c(x), x * o.p) + o.via_super(x)

    def change(k):
        def before():
            if k == 1:
                sm.__init__(b)
            if k == 2:
                cm.__init__(cb)
            if k == 3:
                pr.__init__(pb, sb)
            return lambda: list(log)
        return before
    return f, [change(k) for k in range(4)]


def test_method_objects_reinitialised_in_place():
    _differential(_method_objects_reinitialised)
