"""Members CPython sets on exceptions that compiled code catches: an AttributeError's `name` and `obj`, a
NameError's `name`, an ImportError's `name` and `path` (NOTE [Members of caught exceptions] in
capture/caught_exceptions.py; review revO O4: `e.name`/`e.obj` were None). Every program runs eagerly and
compiled with fresh objects on each call; results, identities and messages are compared."""
from __future__ import annotations

import traceback

import pytest
import torch

import framejit


class Inner:
    def __init__(self, val: int = 1) -> None:
        self.val = val


class Obj:
    __slots__ = ("child", "alpha", "unset")

    def __init__(self, alpha: int) -> None:
        self.child, self.alpha = Inner(alpha), alpha

    @property
    def failing(self):
        # no name/obj: getattr() gives them this property's (`o.failing` on 3.11 too; on 3.12+ LOAD_ATTR does
        # or not as the instruction is specialized yet or not, so the test reads it with getattr only)
        raise AttributeError("failing getter")

    @property
    def deep(self):
        return self.child.missing  # set by the inner lookup: the child's


STORE: list = []


def missing_attribute(x, o):
    try:
        return x + o.missing
    except AttributeError as e:
        return x * e.obj.alpha, e.name, e.obj is o, str(e)


def unset_slot_and_getattr(x, o):
    found = []
    for name in ("alpha", "unset", "child"):
        try:
            found.append(getattr(o, name) if name != "unset" else o.unset)
        except AttributeError as e:
            found.append((e.name, e.obj is o))
    return x + o.alpha, found[1]


def property_errors(x, o):
    out = []
    for read in (lambda: getattr(o, "failing"), lambda: o.deep):
        try:
            read()
        except AttributeError as e:
            out.append((e.name, e.obj is o, e.obj is o.child))
    return x - 1, out


def tensor_and_method(x, o):
    out = []
    try:
        x.no_such_attribute
    except AttributeError as e:
        out.append((e.name, e.obj is x, "".join(traceback.format_exception_only(e))))
    try:
        o.no_method(x)
    except AttributeError as e:
        out.append((e.name, e.obj is o))
    return x * 2, out


def object_replaced_after_the_error(x, o):
    child = o.child
    try:
        o.child.missing
    except AttributeError as e:
        o.child = Inner(0)
        STORE.append(e)  # inspected after the call
        return x + 1, e.obj is child, e.obj is o.child


def caught_in_a_callee(x, o):
    def read(obj):
        try:
            return obj.missing
        except AttributeError as e:
            return e
    e = read(o)
    print("", end="")  # a graph break after the callee
    return x + e.obj.alpha, e.name, e.obj is o


def name_errors(x, o):
    def inner():
        return late
    out = []
    try:
        x + undefined_global_name
    except NameError as e:
        out.append((type(e).__name__, e.name, str(e)))
    try:
        inner()
    except NameError as e:
        out.append((type(e).__name__, e.name))
    late = 1  # noqa: F841
    return x + 2, out


def import_error(x, o):
    try:
        from torch import not_a_torch_name
        del not_a_torch_name
    except ImportError as e:
        return x + 3, e.name, e.path == torch.__file__, getattr(e, "name_from", None), str(e)


PROGRAMS = [missing_attribute, unset_slot_and_getattr, property_errors, tensor_and_method,
            object_replaced_after_the_error, caught_in_a_callee, name_errors, import_error]


def _plain(value):
    if isinstance(value, torch.Tensor):
        return ("tensor", value.tolist())
    if isinstance(value, (tuple, list)):
        return type(value)(_plain(v) for v in value)
    return value


def _stored(o):
    return [(e.name, e.obj is o.child, type(e.obj).__name__) for e in STORE]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_caught_exceptions_carry_eager_members(program):
    compiled = framejit.compile(program, backend="eager")
    for call in range(3):
        x = torch.randn(2 + call % 2)
        alpha = 2 if call < 2 else 5
        eager_obj, compiled_obj = Obj(alpha), Obj(alpha)
        STORE.clear()
        expected = _plain(program(x, eager_obj))
        expected_stored = _stored(eager_obj)
        STORE.clear()
        got = _plain(compiled(x, compiled_obj))
        assert got == expected
        assert _stored(compiled_obj) == expected_stored


def test_a_caught_attribute_error_stays_in_one_graph():
    report = framejit.explain(missing_attribute)(torch.randn(3), Obj(2))
    assert report.graph_count == 1 and report.graph_break_count == 0


def test_a_failed_from_import_is_guarded():
    """`from m import later` failed while tracing: a later `m.later = v`, or the submodule `m.later` imported,
    must not keep raising (the absence was not guarded)."""
    import sys
    import types
    module = types.ModuleType("hjit_members_mod")
    module.__file__ = "/nonexistent/hjit_members_mod.py"
    sys.modules["hjit_members_mod"] = module

    def read(x):
        try:
            from hjit_members_mod import later
        except ImportError as e:
            return x, e.name, str(e)
        return x + (later if isinstance(later, int) else 1), None, type(later).__name__

    try:
        compiled = framejit.compile(read, backend="eager")
        x = torch.ones(2)
        for step in range(3):
            if step == 1:
                module.later = 5
            if step == 2:
                del module.later
                sys.modules["hjit_members_mod.later"] = types.ModuleType("hjit_members_mod.later")
            expected = read(x)
            got = compiled(x)
            assert _plain(got[1:]) == _plain(expected[1:]) and type(got[0]) is type(expected[0])
            assert torch.equal(got[0], expected[0])
    finally:
        sys.modules.pop("hjit_members_mod", None)
        sys.modules.pop("hjit_members_mod.later", None)
