"""A generator drawn ahead of its consumer (zip, islice: NOTE [Lazy generators drawn ahead] in
capture/values/containers.py) that reads a list the frame made and stored on a global object, a global name or
an argument's attribute, while the loop body appends to that list: eager's generator sees each append (review
revY HIGH-2: eager t + 8, the trace t + 0). Each program runs eagerly and compiled on fresh inputs of two
shapes; the result and the state left behind must be eager's."""
from __future__ import annotations

import itertools

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same


class Cfg:
    pass


CFG = Cfg()
BUF: list | None = None


def endless_attr():
    while True:
        yield len(CFG.cur)


def endless_global():
    while True:
        yield len(BUF)


def endless_arg(o):
    while True:
        yield len(o.cur)


def send_driven_attr():
    while True:
        _ = yield len(CFG.cur)


def finite_attr():
    for _ in range(4):
        yield len(CFG.cur)


def zip_attr(t):
    CFG.cur = []
    out = t
    for a, r in zip(endless_attr(), [1, 2, 3]):
        CFG.cur.append(r)
        out = out + a * r
    return out


def islice_attr(t):
    CFG.cur = []
    out = t
    for a in itertools.islice(endless_attr(), 3):
        CFG.cur.append(1)
        out = out + a
    return out


def zip_global(t):
    global BUF
    BUF = []
    out = t
    for a, r in zip(endless_global(), [1, 2, 3]):
        BUF.append(r)
        out = out + a * r
    return out


def zip_argument_attr(t, o=CFG):
    o.cur = []
    out = t
    for a, r in zip(endless_arg(o), [1, 2, 3]):
        o.cur.append(r)
        out = out + a * r
    return out


def islice_send_driven(t):
    CFG.cur = []
    out = t
    for a in itertools.islice(send_driven_attr(), 3):
        CFG.cur.append(1)
        out = out + a
    return out


def zip_finite(t):
    CFG.cur = []
    out = t
    for a, r in zip(finite_attr(), [1, 2, 3]):
        CFG.cur.append(r)
        out = out + a * r
    return out


def for_finite(t):
    CFG.cur = []
    out = t
    for a in finite_attr():
        CFG.cur.append(a)
        out = out + a
    return out


def appender():
    for i in range(3):
        CFG.cur.append(i)
        yield i


def for_reads_what_it_appends(t):
    CFG.cur = []
    out = t
    for i in appender():
        out = out + len(CFG.cur) * i
    return out


def scaled(r):
    return len(CFG.cur) * r


def map_attr(t):
    CFG.cur = []
    out = t
    for a in map(scaled, [1, 2, 3]):
        CFG.cur.append(1)
        out = out + a
    return out


def filter_attr(t):
    CFG.cur = []
    out = t
    for a in filter(lambda r: len(CFG.cur) != 1, [1, 2, 3]):
        CFG.cur.append(1)
        out = out + a
    return out


@pytest.mark.parametrize("fn", [map_attr, filter_attr, zip_attr, islice_attr, zip_global, zip_argument_attr, islice_send_driven,
                                zip_finite, for_finite, for_reads_what_it_appends])
def test_generator_sees_appends_to_a_fresh_list_held_outside(fn):
    global BUF
    compiled = framejit.compile(fn, backend=CountingBackend())
    for call in range(2):
        x = torch.randn(2 + call)
        runs = []
        for run in (fn, compiled):
            CFG.cur, BUF = None, None
            runs.append((run(x), list(CFG.cur or ()), list(BUF or ())))
        assert runs[1][1:] == runs[0][1:]
        assert_same(runs[1][0], runs[0][0])
