"""Red team of issue 15 (Python-level constructs around graph breaks): generators and `yield from`, try/except/
finally, with-blocks (contextlib managers, torch.no_grad, suppress, ExitStack), nonlocal closures across breaks,
walrus in comprehensions, match statements, f-strings, star-unpacking, `del`; each compiled and compared with
eager over 4 calls with changing sizes: return values, exception type and text, printed output; and no frame runs
wholly eagerly (except the known cases listed in KNOWN_EAGER, whose values still equal eager's).
"""
from __future__ import annotations

import contextlib
import io

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same


@framejit.disable
def _opaque(t):
    return t * 2


@framejit.disable
def _boom(t):
    raise KeyError("boom")

def gen_yield_from(x):
    def inner(t):
        yield t + 1
        print("inner mid")
        yield t * 2
    def outer(t):
        yield from inner(t)
        yield t - 1
    return sum(outer(x))

def gen_in_frame_break(x):
    g = (print(i) or x * i for i in range(3))
    a = next(g)
    print("between")
    return a + sum(g)

def try_except_finally(x):
    out = []
    try:
        y = x.sin()
        print("in try")
        if y.sum() > 100:
            raise ValueError("big")
        out.append(y)
    except ValueError as e:
        out.append(x * 0)
    finally:
        print("finally")
        out.append(x.cos())
    return out

def try_raise_in_break(x):
    try:
        y = x + 1
        print("t")
        {}["k"]
    except KeyError as e:
        print("caught", repr(e))
        y = y * 2
    finally:
        y = y - 1
    return y

@contextlib.contextmanager
def ctx(tag):
    print("enter", tag)
    try:
        yield tag
    finally:
        print("exit", tag)

def with_cm_break(x):
    with ctx("a") as t:
        y = x * 2
        print("inside", t)
        y = y + 1
    return y.sin()

def with_no_grad_break(x):
    with torch.no_grad():
        y = x * 2
        print("ng", torch.is_grad_enabled())
        z = y + 1
    return z, torch.is_grad_enabled()

def nonlocal_across_breaks(x):
    count = 0
    def bump(v):
        nonlocal count
        count += 1
        return v * count
    a = bump(x)
    print("b1", count)
    def inner2():
        nonlocal count
        count += 10
        return count
    c = inner2()
    print("b2", count)
    return a + bump(x) + c, count

def walrus_comp(x):
    total = 0
    ys = [(total := total + i) * x for i in range(3)]
    print("t", total)
    return sum(ys), total

def walrus_comp_break(x):
    ys = [y for i in range(3) if (y := _opaque(x * i)).sum() >= 0]
    return len(ys), (sum(ys) if ys else x)

def match_stmt(x, kind):
    match kind:
        case {"op": "add", "v": v}:
            print("add", v)
            return x + v
        case [a, b, *rest]:
            print("seq", a, b, rest)
            return x * a + b
        case str() as s if s.startswith("n"):
            return -x
        case _:
            return x

def fstrings(x):
    s = f"{x.sum().item():.3f}|{x.shape}|{x.dtype!r}|{len(x):>4}"
    print(s)
    return x + len(s)

def fstring_tensor(x):
    s = f"t={x}"
    return x * len(s)

def star_unpack(x):
    a, *mid, b = x.unbind(0)
    first, *rest = [x, x * 2, x * 3]
    print(len(mid), len(rest))
    d = {**{"a": a}, "b": b}
    return (a + b + sum(mid) + sum(rest), *rest, d)

def star_call(x):
    def f(*args, **kw):
        return sum(args) * kw.get("s", 1)
    args = [x, x + 1]
    kw = {"s": 3}
    print("call")
    return f(*args, *[x], **kw, **{"t": 1})

def gen_send(x):
    def acc():
        total = 0
        while True:
            v = yield total
            if v is None:
                break
            total = total + v
    g = acc()
    next(g)
    for r in x.unbind(0):
        g.send(r)
    print("sent")
    return g.send(x.sum())

def closure_in_loop_break(x):
    fs = []
    for i in range(3):
        def f(t, i=i):
            return t * i
        fs.append(f)
        print("i", i)
    return [f(x) for f in fs]

def exception_escapes(x):
    y = x + 1
    print("before")
    raise RuntimeError(f"bad {y.shape}")

def del_local_break(x):
    y = x * 2
    print("p")
    del y
    try:
        return y
    except UnboundLocalError as e:
        print("ule", e)
        return x

def lambda_default_mut(x, acc=[]):
    acc.append(1)
    print(len(acc) > 0)
    return x * 1

def genexpr_closure_break(x):
    w = x + 1
    return sum(_opaque(w) * i for i in range(3))

def nested_with_try(x):
    with torch.no_grad():
        try:
            y = x * 2
            print("nt")
            raise KeyError("k")
        except KeyError:
            y = y + 1
    return y

def generator_with_finally(x):
    def g(t):
        try:
            yield t
            yield t * 2
        finally:
            print("gen finally")
    out = []
    for v in g(x):
        out.append(v)
        print("got")
    return out

def enumerate_zip_break(x):
    out = 0
    for i, (a, b) in enumerate(zip(x.unbind(0), [1, 2, 3, 4, 5, 6])):
        print(i, b)
        out = out + a * b
    return out


def del_in_with(x):
    y = x + 1
    g = lambda: y
    with torch.no_grad():
        a = g() * 2
        del y
        print("in with")
    try:
        g()
    except NameError as e:
        print("NE", e)
    return a

def del_in_finally(x):
    y = x + 1
    g = lambda: y
    try:
        print("t")
        return g() * 3
    finally:
        del y

def inlined_del_returns_closure(x):
    def make(t):
        v = t * 2
        h = lambda: v
        r = h()
        del v
        return r, h
    r, h = make(x)
    try:
        h()
    except NameError as e:
        print("NE2", e)
    return r

def exc_chain(x):
    try:
        try:
            _boom(x)
        except KeyError as e:
            raise ValueError("wrapped") from e
    except ValueError as e2:
        print(type(e2.__cause__).__name__, repr(e2.__cause__), e2.__suppress_context__)
        return x + 1

def return_in_finally(x):
    try:
        y = _opaque(x)
        raise RuntimeError("x")
    finally:
        return x * 3  # noqa

def exc_in_comp(x):
    try:
        return [_boom(x) for i in range(2)]
    except KeyError as e:
        print("kc", e)
        return [x]


def yield_from_list(x):
    def g():
        r = yield from [x, x + 1]
        return r
    return list(g())

def star_in_comp(x):
    rows = x.unbind(0)
    pairs = [(a, *rest) for a, *rest in [rows[:3], rows[1:4]]]
    print(len(pairs))
    return [sum(p) for p in pairs]

def match_class(x):
    import dataclasses
    @dataclasses.dataclass
    class P:
        a: int
        b: object
    p = P(2, x)
    match p:
        case P(a=2, b=t):
            print("P2")
            return t * 2
        case _:
            return x

def fstring_nested(x):
    w = 8
    s = f"{'v':>{w}}{x.shape[0]:{w}d}{f'{x.ndim}'}"
    print(s)
    return x + len(s)

def closure_counter_two_breaks(x):
    n = 0
    def inc():
        nonlocal n
        n += 1
    for t in x.unbind(0)[:3]:
        inc()
        print("n", n)
    return x * n

def comp_shadowing_cell(x):
    i = 5
    f = lambda: i
    ys = [_opaque(x) * i for i in range(2)]
    return ys, f()

def per_call_fn_reassigned_defaults(x, k):
    def f(a, scale=1.0):
        return a * scale
    if k > 1:
        f.__defaults__ = (k,)
    return [f(_opaque(x)) for _ in range(2)]

def locals_eval_outer(x):
    a = x * 2
    return [eval("a * j") for j in range(2)], a + 1

def locals_modify(x):
    a = x * 2
    r = [locals().setdefault("zz", 1) for j in range(2)]
    return r, a

def ctxmgr_suppress(x):
    with contextlib.suppress(KeyError):
        y = x + 1
        _boom(y)
        y = y * 100
    return x - 1

def exit_stack(x):
    with contextlib.ExitStack() as st:
        st.callback(print, "cb")
        y = x * 2
        print("es")
    return y

def no_grad_decorated(x):
    @torch.no_grad()
    def inner(t):
        print("ng", torch.is_grad_enabled())
        return t * 2
    return inner(x), torch.is_grad_enabled()


# frames that run wholly eagerly, values right (reported in /work/helper_notes/h1516.md)
KNOWN_EAGER = {
    "generator_with_finally",  # a generator with try/finally driven by a for loop in the frame
    "del_in_with",  # the lambda called after `del` of its variable in a resume function: its own frame
}
ARGS = {
    "match_stmt": lambda x, c: (x, [{"op": "add", "v": 2}, [2, 3, 4], "neg", 7][c % 4]),
    "per_call_fn_reassigned_defaults": lambda x, c: (x, c),
}
PROGRAMS = [f for name, f in list(globals().items()) if callable(f) and getattr(f, "__module__", None) == __name__
            and not name.startswith("_") and name not in ("ctx", "assert_same", "CountingBackend")
            and isinstance(f, type(lambda: 0))]


def _run(fn, args):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            result = fn(*args)
        return "ok", result, out.getvalue()
    except Exception as e:  # compared with eager's
        return "raised", (type(e), str(e)), out.getvalue()


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_python_constructs_around_breaks_match_eager(fn):
    compiled = framejit.compile(fn, backend=CountingBackend())
    before = len(framejit.stats()["eager_frame_reasons"])
    for call in range(4):
        torch.manual_seed(call)
        x = torch.randn(5 + call % 2)
        args = ARGS.get(fn.__name__, lambda t, c: (t,))(x, call)
        expected, actual = _run(fn, args), _run(compiled, args)
        assert actual[0] == expected[0] and actual[2] == expected[2], (expected, actual)
        if expected[0] == "ok":
            assert_same(actual[1], expected[1])
        else:
            assert actual[1] == expected[1]
    eager = framejit.stats()["eager_frame_reasons"][before:]
    if fn.__name__ not in KNOWN_EAGER:
        assert eager == []
