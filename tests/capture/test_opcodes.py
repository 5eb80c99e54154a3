"""Every opcode the running CPython's compiler can put in a function runs under framejit as in eager.

The snippets below are small functions `f(x, n)` (x a tensor, n an int) written to make the compiler emit
each instruction of its version (3.11, 3.12, 3.13); their code objects, nested ones included, are
disassembled and the union of the opcodes must cover `dis.opmap` minus the instructions no function body
can hold (interpreter-internal, pseudo, specialised or instrumented forms). Each snippet is then compiled
with framejit and compared with eager on two inputs (tests/helpers.run_differential): a traced, broken or
eagerly run frame must all give eager's result, output and exceptions.
"""
from __future__ import annotations

import dis
import sys
import types

import pytest
import torch

import framejit
from tests.helpers import run_differential

# Instructions that no function body's code object holds on any supported version.
NOT_IN_FUNCTIONS = {
    "CACHE": "inline cache entries, hidden by dis",
    "IMPORT_STAR": "`from m import *` is allowed only at module level",
    "PRINT_EXPR": "interactive-mode expression statements only",
    "INTERPRETER_EXIT": "the interpreter's own entry frames",
    "RESERVED": "never emitted",
    "ENTER_EXECUTOR": "written over running code by the tier-2 optimizer",
    "EXIT_INIT_CHECK": "the interpreter's own __init__ shim frames",
    "BINARY_SUBSCR_GETITEM": "a specialised form",
}

_PRELUDE = '''
import torch, contextlib

class Box:
    def __init__(self, v):
        self.v = v
    def get(self, k=1, *, scale=1):
        return self.v * k * scale

class Base:
    def m(self, x):
        return x + 1

class Point:
    __match_args__ = ("a", "b")
    def __init__(self, a, b):
        self.a, self.b = a, b

class Ctx:
    def __init__(self):
        self.log = []
    def __enter__(self):
        self.log.append("in")
        return self
    def __exit__(self, *exc):
        self.log.append("out")
        return False

class ACtx:
    async def __aenter__(self):
        return 1
    async def __aexit__(self, *exc):
        return False

class AIter:
    def __init__(self, n):
        self.i, self.n = 0, n
    def __aiter__(self):
        return self
    async def __anext__(self):
        if self.i >= self.n:
            raise StopAsyncIteration
        self.i += 1
        return self.i

class Ready:
    def __await__(self):
        return iter(())

def drive(coro):
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("the coroutine suspended")

G = 3
'''

# (first CPython version, source of `f(x, n)`)
SNIPPETS: list[tuple[tuple[int, int], str]] = [
    ((3, 11), '''
def f(x, n):  # arithmetic, comparisons, unary, subscripts, slices, in-place
    a = x * 2 + x ** 2 - x / 3 // 1 % 5
    b = -a, +a, ~n, not n, n << 1, n >> 1, n & 3, n | 4, n ^ 5, n @ 1 if False else n
    a = a[1:] + a[:-1]
    a[0:1] = a[1:2]
    c = a[::2]
    c += 1
    y = [1, 2, 3]
    del y[0]
    y[0] = n
    return a, b, c, y, n < 3, n <= 3, n == 3, n != 3, n > 3, n >= 3, x is None, n in y, n not in y
'''),
    ((3, 11), '''
def f(x, n):  # builds, unpacking, star-args, dict/set/list comprehension ops, f-strings
    t = (x, n)
    l = [x, *t]
    s = {n, *range(n)}
    d = {"a": x, **{"b": n}}
    consts = {"p": x, "q": n}
    tt = (*l, n)
    d2 = {k: v for k, v in d.items()}
    s2 = {i for i in range(n)}
    l2 = [i * 2 for i in range(n)]
    a, *rest = l
    p, q = t
    text = f"{n}-{n!r}-{n:>4}-{n!s:{n}}-{'s'!a}"
    return t, l, s, d, consts, tt, d2, s2, l2, a, rest, p, q, text, slice(1, n, 2)
'''),
    ((3, 11), '''
def f(x, n):  # calls: keywords, *args/**kwargs, methods, closures, defaults, lambdas
    box = Box(x)
    r1 = box.get(2, scale=n)
    r2 = box.get(*(3,), **{"scale": 2})
    k = 4
    g = lambda y, z=2, *, w=3: y * z * w + k
    def inner(y):
        nonlocal k
        k += 1
        return y + k
    r3 = inner(x) + g(x, w=n)
    del inner
    print("calls", n, sep="|", end=".\\n")
    return r1, r2, r3, max(1, n, key=lambda v: -v), sorted([3, 1, n])
'''),
    ((3, 11), '''
def f(x, n):  # control flow: if/elif, while, for/break/continue/else, ternary, and/or, None tests
    total = x.clone()
    i = 0
    while i < n:
        i += 1
        if i == 2:
            continue
        total = total + i
    else:
        total = total * 2
    for j in range(5):
        if j > n:
            break
    else:
        total = total - 1
    v = None if n > 2 else n
    if v is None:
        total = total + 100
    if v is not None and v or n:
        total = total + (v or 0)
    a = n > 2 and x or -x
    b = n and x
    v = n
    while v is not None:
        v = None if v > 5 else v + 3
    w = None
    while w is None:
        w = n
    k = 0
    while not k >= n:
        k += 1
    return total, a, b, v, w, k, i, j
'''),
    ((3, 11), '''
def f(x, n):  # exceptions: try/except/else/finally, raise from, assert, except*, with, cells deleted
    out = []
    try:
        if n > 2:
            raise ValueError("big")
        out.append(1)
    except ValueError as e:
        out.append(str(e))
    else:
        out.append("else")
    finally:
        out.append("finally")
    try:
        raise KeyError(n) from None
    except (KeyError, TypeError):
        out.append("key")
    try:
        assert n < 0, "positive"
    except AssertionError as e:
        out.append(str(e))
    try:
        raise ExceptionGroup("g", [ValueError(1), TypeError(2)])
    except* ValueError:
        out.append("v")
    except* TypeError:
        out.append("t")
    ctx = Ctx()
    with ctx as c:
        out.append(len(c.log))
    with torch.no_grad():
        y = x * 2
    cell = n
    def read():
        return cell
    out.append(read())
    del cell
    return out, ctx.log, y
'''),
    ((3, 11), '''
def f(x, n):  # globals, imports, attributes, classes made inside the function
    global G, H
    G = G + n
    H = n
    del H
    import math
    from math import sqrt as root
    box = Box(x)
    box.w = n
    del box.w
    class Local(Base):
        scale: int = 2
        z = n
        def m(self, y):
            return super().m(y) * self.scale
        del z
    r = Local().m(x) + math.floor(root(n * n))
    G = G - n
    return r, G
'''),
    ((3, 11), '''
def f(x, n):  # generators: yield, yield from, return value of a generator
    def gen(k):
        yield k
        got = yield from range(k)
        return got
    def outer(k):
        result = yield from gen(k)
        yield result
    return x * sum(v for v in outer(n) if v is not None), list(gen(n))
'''),
    ((3, 11), '''
def f(x, n):  # pattern matching
    out = []
    for subject in ([1, 2, n], {"k": n, "j": 1}, Point(1, n), n, "s"):
        match subject:
            case [1, *rest] if len(rest) == 2:
                out.append(("seq", rest))
            case {"k": value, **others}:
                out.append(("map", value, others))
            case Point(a, b=bb):
                out.append(("cls", a, bb))
            case int() | float():
                out.append("num")
            case _:
                out.append("other")
    return x + len(out), out
'''),
    ((3, 11), '''
def f(x, n):  # coroutines: await, async with, async for, async generators
    async def agen(k):
        for i in range(k):
            yield i
    async def body(k):
        total = 0
        async with ACtx() as one:
            total += one
        async for i in AIter(k):
            total += i
        async for j in agen(k):
            total += j
        await Ready()
        return total
    return x * drive(body(n))
'''),
    ((3, 11), '''
def f(x, n):  # a constant index and a jump past 255 (EXTENDED_ARG)
    values = [''' + ", ".join(f"{i}.5" for i in range(300)) + '''][n]
    if n > 100:
''' + "".join(f"        x = x + {i}\n" for i in range(120)) + '''
    return x * values
'''),
    ((3, 12), '''
def f(x, n):  # PEP 695 type parameters and aliases (CALL_INTRINSIC_1/2, LOAD_FROM_DICT_OR_*)
    type Alias[T] = list[T]
    def ident[T](v: T) -> T:
        return v
    class Holder[T]:
        def get(self, v: T) -> T:
            return v
    class Scope:
        Item = int
        type Items = list[Item]
    return ident(x) + Holder[int]().get(n), Alias.__name__, str(Scope.Items.__value__)
'''),
    ((3, 11), '''
def f(x, n):  # class bodies reading the enclosing function's variables
    k = n
    class Reader:
        v = k
        def get(self):
            return k
    return x + Reader.v + Reader().get()
'''),
]


def _opcodes(code: types.CodeType) -> set[str]:
    names = {inst.opname for inst in dis.get_instructions(code)}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _opcodes(const)
    return names


def _snippets() -> list[tuple[str, types.FunctionType]]:
    made = []
    for index, (since, source) in enumerate(SNIPPETS):
        if sys.version_info[:2] < since:
            continue
        namespace: dict = {}
        exec(compile(_PRELUDE + source, f"<opcode snippet {index}>", "exec"), namespace)
        made.append((f"snippet{index}", namespace["f"]))
    return made


def _emittable() -> set[str]:
    """The opcodes of the running CPython that a function's code can hold."""
    specialized = set(getattr(dis, "_specialized_opmap", {})) | \
        {op if isinstance(op, str) else dis.opname[op] for op in getattr(dis, "_specialized_instructions", ())}
    return {name for name, code in dis.opmap.items()
            if code < 256 and not name.startswith("INSTRUMENTED_") and name not in specialized
            and name not in NOT_IN_FUNCTIONS}


def test_snippets_emit_every_opcode():
    seen: set[str] = set()
    for _, fn in _snippets():
        seen |= _opcodes(fn.__code__)
    assert sorted(_emittable() - seen) == []


@pytest.mark.parametrize("name,fn", _snippets(), ids=[name for name, _ in _snippets()])
def test_snippet_runs_as_in_eager(name, fn):
    fn.__globals__["G"] = 3
    before = framejit.stats()["frames_traced"]
    run_differential(fn, lambda seed: (torch.randn(3), seed + 2), fullgraph=False)
    assert fn.__globals__["G"] == 3 and "H" not in fn.__globals__  # the snippet that changes them puts them back
    assert framejit.stats()["frames_traced"] > before
