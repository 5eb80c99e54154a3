"""Block factories over plain Python state: config objects and their classes, globals, helper functions
and their defaults, closures' cells, containers and aliases, float values.

Every factory takes a `random.Random` and returns a `program.Block` whose names carry `$` (replaced by
the block's number). The family name is the key used by `excluded.EXCLUDED`.
"""
from __future__ import annotations

from .program import Block, Mutation

M = Mutation


def instance_attr(rng):
    """A config object's instance attribute read by f, changed and deleted between calls."""
    v, w = rng.choice([(2.0, 3.0), (0.5, -1.0), (2, 5)])
    return Block("instance_attr", setup=f"""
        class Cfg$:
            def __init__(self):
                self.scale = {v!r}
        cfg$ = Cfg$()
        """, body="out = out * cfg$.scale\naux.append(cfg$.scale)",
        mutations=(M(f"cfg$.scale = {w!r}"), M("del cfg$.scale"), M(f"cfg$.scale = {v!r}")),
        state=("sorted(vars(cfg$).items())",))


def getattr_default(rng):
    """`getattr(cfg, name, default)`: the attribute appears on the instance or the class, or disappears."""
    d = rng.choice([0.5, 1.0, 0])
    return Block("getattr_default", setup="""
        class Cfg$:
            pass
        cfg$ = Cfg$()
        """, body=f"out = out + getattr(cfg$, 'bias', {d!r})\naux.append(getattr(cfg$, 'bias', {d!r}))",
        mutations=(M("cfg$.bias = 1.5"), M("del cfg$.bias"), M("Cfg$.bias = 2.5"), M("del Cfg$.bias")),
        state=("sorted(vars(cfg$).items())",))


def hasattr_branch(rng):
    """`if hasattr(cfg, "flag")`: absence is a fact the trace used."""
    where = rng.choice(["cfg$", "Cfg$"])
    return Block("hasattr", setup="""
        class Cfg$:
            pass
        cfg$ = Cfg$()
        """, body="if hasattr(cfg$, 'flag'):\n    out = out - 1\n    aux.append('flag')",
        mutations=(M(f"{where}.flag = True"), M(f"del {where}.flag")),
        state=("sorted(vars(cfg$).items())",))


def class_attr_shadow(rng):
    """A class attribute read through the instance, then shadowed by an instance attribute (and unshadowed)."""
    return Block("class_attr_shadow", setup="""
        class Cfg$:
            k = 2
        cfg$ = Cfg$()
        """, body="out = out * cfg$.k\naux.append(cfg$.k)",
        mutations=(M("cfg$.k = 100"), M("del cfg$.k")),
        state=("sorted(vars(cfg$).items())",))


def class_attr_change(rng):
    """A class attribute changed on the class (also through a subclass and super())."""
    via_super = rng.random() < 0.5
    body = "out = out * cfg$.factor()" if via_super else "out = out * cfg$.k"
    return Block("class_attr_change", setup="""
        class Base$:
            k = 2.0
            def factor(self):
                return self.k + 1
        class Cfg$(Base$):
            def factor(self):
                return super().factor() * Base$.k
        cfg$ = Cfg$()
        """, body=body,
        mutations=(M("Base$.k = 3.0"), M("Cfg$.k = -1.0"), M("del Cfg$.k")),
        state=("Base$.k",))


def method_replace(rng):
    """A method replaced on the class, or shadowed by an instance attribute."""
    return Block("method_replace", setup="""
        class Act$:
            def act(self, t):
                return t.relu()
        act$ = Act$()
        """, body="out = act$.act(out)",
        mutations=(M("Act$.act = lambda self, t: t.sigmoid()"), M("act$.act = lambda t: t * 0 + 7"),
                   M("del act$.act")),
        state=("sorted(vars(act$))",))


def getattr_hook(rng):
    """A class that gains `__getattr__` later: an absent attribute read with a default changes meaning."""
    return Block("getattr_hook", setup="""
        class Cfg$:
            pass
        cfg$ = Cfg$()
        """, body="out = out + getattr(cfg$, 'shift', 0.0)",
        mutations=(M("Cfg$.__getattr__ = lambda self, name: 4.0"), M("del Cfg$.__getattr__")),
        state=())


def global_value(rng):
    """A module global read by f: changed, deleted (NameError), added back."""
    v = rng.choice([1.0, 2, 0.25])
    return Block("global_value", setup=f"G_SCALE$ = {v!r}\n",
                 body="out = out * G_SCALE$\naux.append(G_SCALE$)",
                 mutations=(M("G_SCALE$ = 3.0"), M("del G_SCALE$"), M(f"G_SCALE$ = {v!r}")),
                 state=())


def global_function(rng):
    """A helper function global replaced between calls."""
    return Block("global_function", setup="""
        def helper$(t):
            return t + 1
        """, body="out = helper$(out)",
        mutations=(M("def helper$(t):\n    return t * 2\n"), M("helper$ = torch.tanh")),
        state=())


def helper_defaults(rng):
    """A helper function whose `__defaults__`/`__kwdefaults__` change after the first call."""
    return Block("helper_defaults", setup="""
        def scale$(t, alpha=1.0, *, beta=2.0):
            return t * alpha + beta
        """, body="out = scale$(out)",
        mutations=(M("scale$.__defaults__ = (3.0,)"), M("scale$.__kwdefaults__ = {'beta': -1.0}"),
                   M("scale$.__defaults__ = (1.0,)")),
        state=())


def own_defaults(rng):
    """The compiled function's own keyword-only default changed (`f.__kwdefaults__`)."""
    return Block("own_defaults", kwonly=("alpha$=1.0",), body="out = out * alpha$\naux.append(alpha$)",
                 mutations=(M("f.__kwdefaults__ = {**f.__kwdefaults__, 'alpha$': 4.0}"),
                            M("f.__kwdefaults__ = {**f.__kwdefaults__, 'alpha$': -0.5}")),
                 state=())


def closure_cell(rng):
    """A closure whose cell changes through a setter (nonlocal) or `__closure__[0].cell_contents`."""
    return Block("closure_cell", setup="""
        def make$():
            k = 1.0
            def apply(t):
                return t * k
            def set_k(v):
                nonlocal k
                k = v
            return apply, set_k
        apply$, set_k$ = make$()
        """, body="out = apply$(out)",
        mutations=(M("set_k$(3.0)"), M("apply$.__closure__[0].cell_contents = -2.0")),
        state=())


def list_global(rng):
    """A global list of tensors/floats read by f (len, items), mutated between calls."""
    return Block("list_global", setup="WEIGHTS$ = [1.0, 2.0]\n", body="""
        for w in WEIGHTS$:
            out = out + w
        aux.append(len(WEIGHTS$))
        """, mutations=(M("WEIGHTS$.append(5.0)"), M("WEIGHTS$.pop(0)"), M("WEIGHTS$[:] = []"),
                        M("WEIGHTS$ = [0.5]")),
        state=("list(WEIGHTS$)",))


def list_arg_mutation(rng):
    """f appends to and pops from a list argument and a global log; the caller sees the mutations."""
    op = rng.choice(["lst$.append(out.sum())", "lst$.insert(0, out.mean())", "lst$.extend([out[0], out[1]])",
                     "lst$.pop()", "lst$.reverse()", "LOG$.append(out.shape[0])"])
    return Block("list_arg_mutation", setup="LOG$ = []\n", params=("lst$",),
                 args=("[torch.ones(4) * i, torch.zeros(4)]",),
                 body=f"{op}\nout = out + lst$[-1]\naux.append(len(lst$))",
                 mutations=(M("LOG$.clear()"),), state=("list(LOG$)",))


def alias_args(rng):
    """The same list reachable by two paths: passed twice, or held by an argument and an object's attribute."""
    shape = rng.choice(["twice", "attr"])
    if shape == "twice":
        return Block("alias_args", params=("a$", "b$"), args=("[torch.ones(4)]", "a$"),
                     body="a$.append(out.sum(0))\nb$.append(out.mean(0))\nout = out + len(a$) + b$[-1]")
    return Block("alias_args", setup="""
        class Holder$:
            def __init__(self):
                self.items = []
        holder$ = Holder$()
        """, params=("a$",), args=("holder$.items",),
        body="a$.append(out.sum(0))\nholder$.items.append(out[0])\nout = out + len(holder$.items)",
        mutations=(M("holder$.items = []"), M("holder$.items.clear()")),
        state=("len(holder$.items)",))


def dict_config(rng):
    """A dict config read with `.get(key, default)` and `in`, changed between calls."""
    return Block("dict_config", setup="CONF$ = {'scale': 2.0}\n", body="""
        out = out * CONF$.get('scale', 1.0)
        if 'shift' in CONF$:
            out = out + CONF$['shift']
        aux.append(sorted(CONF$))
        """, mutations=(M("CONF$['shift'] = 0.5"), M("del CONF$['scale']"), M("CONF$.clear()"),
                        M("CONF$['scale'] = -3.0")),
        state=("dict(CONF$)",))


def float_values(rng):
    """A float global that becomes -0.0, NaN or inf: bitwise facts (sign of zero, NaN) the trace used."""
    return Block("float_values", setup="EPS$ = 0.0\n", body="""
        out = out * math.copysign(1.0, EPS$)
        if EPS$ != EPS$:
            out = out + 1
        aux.append(EPS$)
        """, mutations=(M("EPS$ = -0.0"), M("EPS$ = float('nan')"), M("EPS$ = 0.0"), M("EPS$ = float('inf')")),
        state=())


def float_arg(rng):
    """A float argument that varies per call among 0.0, -0.0, NaN and ordinary values."""
    return Block("float_arg", params=("eps$",), args=("[0.0, -0.0, float('nan'), 0.0, 1e-6, float('nan')][i % 6]",),
                 body="out = out + eps$\nout = out * math.copysign(1.0, eps$)\naux.append(eps$)")


def iter_mutation(rng):
    """Removing from a list while iterating over it (CPython skips the element after each removal)."""
    return Block("iter_mutation", setup="ITEMS$ = [1.0, 2.0, 3.0, 4.0]\n", body="""
        for v in ITEMS$:
            if v > 1.5:
                ITEMS$.remove(v)
            out = out + v
        aux.append(len(ITEMS$))
        """, mutations=(M("ITEMS$[:] = [1.0, 2.0, 3.0, 4.0]"), M("ITEMS$.append(9.0)")),
        state=("list(ITEMS$)",))


def break_side_effect(rng):
    """A container method call whose argument graph-breaks (`.item()`), on a local and a global list."""
    target = rng.choice(["local", "global"])
    if target == "local":
        return Block("break_side_effect", body="r$ = []\nr$.append(out.sum().item())\naux.append(len(r$))")
    return Block("break_side_effect", setup="SEEN$ = []\n",
                 body="SEEN$.append(round(out.sum().item(), 3))\nout = out + len(SEEN$)",
                 mutations=(M("SEEN$.clear()"),), state=("len(SEEN$)",))


def print_break(rng):
    """A print (a graph break) of Python state the function reads."""
    return Block("print_break", setup="TAG$ = 'a'\n", body="print('tag', TAG$, tuple(out.shape))\nout = out + 1",
                 mutations=(M("TAG$ = 'b'"),))


def object_setattr(rng):
    """f sets attributes on a config object (a counter) and reads them back; a custom `__setattr__`."""
    custom = rng.random() < 0.5
    extra = ("    def __setattr__(self, name, value):\n"
             "        object.__setattr__(self, name, value * 2 if name == 'calls' else value)\n") if custom else ""
    return Block("object_setattr", setup=f"""
class Counter$:
    calls = 0
{extra}counter$ = Counter$()
""", body="counter$.calls = counter$.calls + 1\nout = out + counter$.calls",
        mutations=(M("counter$.calls = 10"), M("del counter$.calls")),
        state=("sorted(vars(counter$).items())",))


FACTORIES = [instance_attr, getattr_default, hasattr_branch, class_attr_shadow, class_attr_change,
             method_replace, getattr_hook, global_value, global_function, helper_defaults, own_defaults,
             closure_cell, list_global, list_arg_mutation, alias_args, dict_config, float_values, float_arg,
             iter_mutation, break_side_effect, print_break, object_setattr]
