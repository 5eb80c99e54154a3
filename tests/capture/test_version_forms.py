"""Code whose bytecode differs between CPython 3.11, 3.12 and 3.13 (issue 15): each program is compiled and
compared with eager on fresh inputs, and what the test asserts (graph counts, no frame run wholly eagerly)
holds on every supported version alike, so a form one version spells differently cannot run eagerly or
break in another place there only."""
from __future__ import annotations

import contextlib
import io
import sys

import torch

import framejit
from tests.helpers import CountingBackend, assert_same


def run_compared(fn, make_args, calls=3):
    """Runs `fn` eagerly and compiled on `calls` fresh inputs; compares values and printed output and
    returns the counting backend and the eager-frame records made meanwhile."""
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    before = len(framejit.stats()["eager_frame_reasons"])
    for call in range(calls):
        runs = []
        for run in (fn, compiled):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                result = run(*make_args(call))
            runs.append((result, out.getvalue()))
        (actual, printed), (expected, expected_printed) = runs[1], runs[0]
        assert printed == expected_printed
        assert_same(actual, expected)
    return backend, framejit.stats()["eager_frame_reasons"][before:]


def fresh(call):
    torch.manual_seed(call)
    return (torch.randn(3 + call),)


# ---- generators the compiler gives handlers of its own (NOTE [Handlers the compiler adds]) -------------
def steps(x, n):
    for k in range(n):
        yield x * k
        print("step", k)


def delegating(x):
    yield from steps(x, 2)
    yield x - 1


def with_comprehension(x):
    ys = [x * k for k in range(3)]
    yield sum(ys)
    yield x


def plain(x, n):
    for k in range(n):
        yield x * k


def delegating_plain(x):
    yield from plain(x, 2)
    yield x - 1


def break_inside_a_delegate(x):
    y = x.cos() + 1
    out = list(delegating(y))
    return out[0] * 2 + out[-1]


def comprehension_generator_across_a_break(x):
    g = with_comprehension(x.sin())
    a = next(g)
    print("mid")
    b = next(g)
    return a + b


def delegating_generator_across_a_break(x):
    g = delegating_plain(x.sin())
    a = next(g)
    print("mid")
    b = next(g)
    return a * b


def test_a_break_inside_a_delegated_generator_leaves_the_caller_compiled():
    # 3.12+ covers `yield from` with a CLEANUP_THROW handler; read as a finalizer it made the caller run
    # wholly eagerly there (3.11: the caller is compiled around the generator, which runs as Python)
    backend, eager = run_compared(break_inside_a_delegate, fresh)
    assert [e["function"] for e in eager if e["function"] != "delegating"] == []
    assert backend.graph_count >= 2  # before and after the generator, which runs as Python


def test_generators_with_compiler_handlers_cross_a_break():
    # an inlined comprehension (3.12+) and a `yield from` get handlers no source wrote: neither is a
    # finalizer, so the generator is carried to the resume function as on 3.11
    for fn in (comprehension_generator_across_a_break, delegating_generator_across_a_break):
        backend, eager = run_compared(fn, fresh)
        assert [e["function"] for e in eager if not e["function"].startswith(("with_comp", "delegating"))] == []
        assert backend.graph_count >= 3


LOG: list = []


def finalized(x):
    try:
        for k in range(3):
            yield x * k
    finally:
        LOG.append("closed")


def delegating_finalized(x):
    yield from finalized(x)
    yield x


def dropped_after_a_break(x):
    LOG.clear()
    g = delegating_finalized(x)
    a = next(g)
    print("mid")
    LOG.append("before del")
    del g
    LOG.append("after del")
    return a, list(LOG)


def test_a_delegate_with_finalizers_is_closed_when_eager_closes_it():
    # the twin: a delegate's finally still runs where eager runs it (the delegating generator passes its
    # delegate's finalizers on)
    run_compared(dropped_after_a_break, fresh)


# ---- super objects (NOTE [Attributes of super objects]) --------------------------------------------------
class Scaled(torch.nn.Module):
    def forward(self, x):
        return x * 2


class NamesInAComprehension(Scaled):
    def forward(self, x):
        # inlined into forward on 3.12+ (a frame of its own on 3.11): super's __class__ read in forward's frame
        return [super(NamesInAComprehension, self).__class__.__name__ for _ in range(2)], x.cos()


class HeldAcrossABreak(Scaled):
    def forward(self, x):
        s = super()
        y = x + 1
        print("held")
        return s.forward(y) + 1, s.__thisclass__ is HeldAcrossABreak, s.__self__ is self, type(s) is super


def test_super_class_read_in_a_comprehension_is_captured():
    module = NamesInAComprehension()
    backend, eager = run_compared(module, fresh)
    assert eager == [] and backend.graph_count >= 1


def test_a_super_object_crosses_a_break():
    module = HeldAcrossABreak()
    backend, eager = run_compared(module, fresh)
    assert eager == [] and backend.graph_count >= 2


class CalledAfterABreak(Scaled):
    def forward(self, x):
        y = x + 1
        print("called after")
        # 3.11: PRECALL/CALL of super, then LOAD_METHOD; 3.12+: LOAD_SUPER_ATTR; both read the resume function's
        # first local (NOTE [The instance comes first] in resume.py)
        return super().forward(y) * super().forward(x), super().__self__ is self


def test_super_called_after_a_break_is_captured():
    module = CalledAfterABreak()
    backend, eager = run_compared(module, fresh)
    assert eager == [] and backend.graph_count >= 2


# ---- PEP 695 forms (3.12+: CALL_INTRINSIC_1 TYPEALIAS / TYPEVAR in the frame's own code) ---------------------
PEP695_SOURCE = '''
def alias_in_frame(x):
    y = x.sin()
    type Vec = list[float]
    return y * 2, Vec.__name__, Vec.__value__ == list[float]

def generic_in_frame(x):
    def pick[U](a: U, b: U) -> U:
        return a
    return pick(x.cos(), x) + 1, pick.__type_params__[0].__name__
'''
TYPING_SOURCE = '''
import typing
def alias_in_frame(x):
    y = x.sin()
    Vec = typing.List[float]
    return y * 2, "Vec", Vec == typing.List[float]

def generic_in_frame(x):
    U = typing.TypeVar("U")
    def pick(a: U, b: U) -> U:
        return a
    return pick(x.cos(), x) + 1, U.__name__
'''


def test_type_statements_and_generic_functions_in_the_frame():
    # on 3.11 (no PEP 695 syntax) the same programs spelled with typing
    namespace: dict = {}
    exec(compile(PEP695_SOURCE if sys.version_info >= (3, 12) else TYPING_SOURCE, __file__, "exec"), namespace)
    for name in ("alias_in_frame", "generic_in_frame"):
        backend, eager = run_compared(namespace[name], fresh)
        assert eager == [] and backend.graph_count >= 1
