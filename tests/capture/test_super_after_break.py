"""Zero-argument super() in a frame that breaks (review revG G2; NOTE [The instance comes first] in
capture/resume.py, NOTE [Zero-argument super() at breaks] in capture/break_sites.py).

CPython's super() without arguments takes the instance from the frame's first local slot (3.11 always, 3.12+
where LOAD_SUPER_ATTR is not specialised). A resume function's first argument was a stack value, so
`print("hi"); return super().forward(x)` in an nn.Linear subclass raised AttributeError on 3.11 where eager
returns; such frames then ran wholly eagerly on 3.11 (c0a428f), and on 3.12/3.13 a resume function run as
Python raised AttributeError where eager raised TypeError (`self = other`). Resume functions now take the
original's first local first: these frames break and resume (graphs on both sides of the break, no eager frame)
on every version, and the values, printed output and exceptions are eager's.
"""
from __future__ import annotations

import contextlib
import io

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same


def _opaque(x):
    print("opaque")
    return x + 1


def run_compared(make_fn, make_args, calls=2):
    """Runs a fresh eager and a compiled `make_fn()` on `calls` fresh inputs; compares values, printed output
    and exceptions (type and message); returns the counting backend and the eager frames made meanwhile."""
    backend = CountingBackend()
    eager_fn, compiled = make_fn(), framejit.compile(make_fn(), backend=backend)
    before = len(framejit.stats()["eager_frame_reasons"])
    for call in range(calls):
        runs = []
        for run in (eager_fn, compiled):
            torch.manual_seed(call)
            args = make_args(call)
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    runs.append(("value", run(*args), out.getvalue()))
            except Exception as exc:  # compared below: the same type and message as eager's
                runs.append(("raised", f"{type(exc).__name__}: {exc}", out.getvalue()))
        (kind, expected, printed), (actual_kind, actual, actual_printed) = runs
        assert (actual_kind, actual_printed) == (kind, printed), (runs, call)
        assert_same(actual, expected) if kind == "value" else None
        assert actual == expected if kind == "raised" else True
    return backend, framejit.stats()["eager_frame_reasons"][before:]


def rows(call):
    return (torch.randn(2 + call, 3),)


def vector(call):
    return (torch.randn(3 + call),)


# ---- nn.Module.forward overridden with super() (the HF pattern) ----------------------------------------------
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


class SuperInALoop(torch.nn.Linear):
    def forward(self, x):
        for step in range(2):
            x = torch.tanh(super().forward(x))
            print("step", step)
        return x


class SuperInAWhileLoop(torch.nn.Linear):
    def forward(self, x):
        n = 0
        while n < 2:
            x = super().forward(x).sin()
            print("n", n)
            n += 1
        return x


class TwoBreaks(torch.nn.Linear):
    def forward(self, x):
        print("one")
        y = super().forward(x).cos()
        print("two")
        return super().forward(y) + 1


@pytest.mark.parametrize("cls, graphs", [(PrintFirst, 1), (BreakInArgument, 2), (BreakThenSuper, 2),
                                         (SuperInALoop, 2), (SuperInAWhileLoop, 2), (TwoBreaks, 2)])
def test_module_forward_with_super_after_a_break_is_captured(cls, graphs):
    torch.manual_seed(0)
    weights = cls(3, 3).state_dict()

    def make():
        module = cls(3, 3)
        module.load_state_dict(weights)
        return module
    backend, eager = run_compared(make, rows)
    assert eager == [] and backend.graph_count >= graphs, (eager, backend.graph_count)


# ---- plain classes: nested class, classmethod, other instances in the first slot -----------------------------
class Base:
    scale = 2.0

    def f(self, x):
        return x * self.scale

    @classmethod
    def make(cls, x):
        return x + len(cls.__name__)


class Outer:
    class Inner(Base):  # __class__ is Outer.Inner's cell
        def f(self, x):
            y = x + 1
            print("inner")
            return super().f(y) - 1


class Classy(Base):
    @classmethod
    def make(cls, x):
        y = x.cos()
        print("cm")
        return super().make(y) * 3


class Reassigned(Base):
    def f(self, x, other):
        self = other  # eager's super() uses the new value (the slot, not the argument)
        print("re")
        return super().f(x.sin())


class ReassignedAfter(Base):
    def f(self, x, other):
        print("re")
        self = other
        return super().f(x.sin())


class Scaled(Reassigned, ReassignedAfter):
    scale = 5.0


class Unrelated(Base):
    scale = 7.0


class CellSelf(Base):
    def f(self, x, other):
        g = lambda: self  # noqa: E731  (self is a cell variable, the first local slot holds the cell)
        print("cell")
        self = other
        return super().f(x.cos()) + (g() is other)


class CellChild(CellSelf):
    scale = 3.0


class InTry(Base):
    def f(self, x):
        try:
            y = x.exp()
            print("try")
            return super().f(y)
        except KeyError:
            return None


class InWith(Base):
    def f(self, x):
        with torch.no_grad():
            y = x.abs()
            print("with")
            z = super().f(y)
        return z + 1


class ThisFirst(Base):
    def f(this, x, k=2):
        print("this")
        return super().f(x) * k


@pytest.mark.parametrize("make", [Outer.Inner, Classy, CellSelf, InTry, InWith, ThisFirst],
                         ids=lambda c: c.__qualname__)
def test_super_after_a_break_in_plain_classes_is_captured(make):
    method = "make" if make is Classy else "f"
    other = CellChild()
    args = (lambda call: (torch.randn(3 + call), other)) if make is CellSelf else vector
    backend, eager = run_compared(lambda: getattr(make(), method), args)
    assert eager == [] and backend.graph_count >= 2, (eager, backend.graph_count)


@pytest.mark.parametrize("cls", [Reassigned, ReassignedAfter])
def test_first_local_reassigned_around_the_break_is_what_super_reads(cls):
    # an instance of a subclass: eager's super() binds it (scale 5); an unrelated one: eager raises TypeError
    # (3.12/3.13 raised AttributeError on the first call before, 3.11 ran the frame eagerly)
    run_compared(lambda: cls().f, lambda call: (torch.randn(3 + call), Scaled()))
    run_compared(lambda: cls().f, lambda call: (torch.randn(3 + call), Unrelated()))


class StarArgs(Base):
    def f(*args):
        print("star")
        return super().f(args[1])


class Deleted(Base):
    def f(self, x):
        y = x + 1
        del self
        print("del")
        return super().f(y)


@pytest.mark.parametrize("cls", [StarArgs, Deleted])
def test_super_without_an_instance_raises_as_eager(cls):
    # eager: RuntimeError "super(): no arguments" / "super(): arg[0] deleted" (3.11) or UnboundLocalError (3.12+)
    backend, _ = run_compared(lambda: cls().f, vector)
    if cls is Deleted:  # the part before the break is still captured
        assert backend.graph_count >= 1


class CaughtAfterBreak(Base):
    def f(this, x):
        print("x")
        this = 5  # super()'s instance is now an int: eager raises TypeError inside the try
        try:
            return super().f(x)
        except TypeError as e:
            return str(e)


class CaughtNoBreak(Base):
    def f(this, x):
        this = 5
        try:
            return super().f(x)
        except TypeError as e:
            return str(e)


class ExplicitBadSuper(Base):
    def f(self, x):
        try:
            return super(ExplicitBadSuper, 5).f(x)
        except TypeError as e:
            return str(e) + "!"


@pytest.mark.parametrize("cls", [CaughtAfterBreak, CaughtNoBreak, ExplicitBadSuper])
def test_super_of_a_non_instance_raises_inside_the_handler(cls):
    # NOTE [super() checks its arguments] (review revH H3): the TypeError escaped the handler on 3.11
    run_compared(lambda: cls().f, vector)


class _Root:
    def f(self, x):
        return x + 100


class _AbstractBase(__import__("abc").ABC):
    def f(self, x):
        return x + 1


class _Registered(_Root):
    def f(self, x):
        return x * 2


_AbstractBase.register(_Registered)


class _SaysYes(type):
    def __subclasscheck__(cls, sub):
        return True


class _AnySubclass(metaclass=_SaysYes):
    def f(self, x):
        return x - 1


def _super_of(cls, obj, x):
    try:
        return super(cls, obj).f(x)
    except TypeError as e:
        return "caught " + str(e)


@pytest.mark.parametrize("cls, obj", [(_AbstractBase, _Registered()), (_AnySubclass, _Registered()),
                                      (_AbstractBase, _Root), (_AbstractBase, _Registered)],
                         ids=["abc_registered", "subclasscheck_yes", "unrelated_class", "registered_class"])
def test_super_checks_the_mro_not_issubclass(cls, obj):
    # review revK K5: the check used issubclass(), which an ABC's register() or a metaclass's __subclasscheck__
    # answer yes, and let a class object that is no subclass through: eager's TypeError escaped the handler (3.11)
    def fn(x):
        return _super_of(cls, obj, x)

    run_compared(lambda: fn, vector)
