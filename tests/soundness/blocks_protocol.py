"""Block factories over Python protocols and tensor semantics: dict views and dict iteration, user context
managers (grad mode set in `__enter__`, appends in `__exit__`), generators, `hasattr` on tensors and
namedtuples, `isinstance` with a metaclass, `obj.__class__` reassigned, and tensor ops whose edge cases
lowered backends get wrong (NaN in reductions, empty reductions, returned views, in-place through views,
broadcasting copies, in-place metadata ops on arguments, int64 values above 2**53, special values
through pointwise ops).

Same contract as `blocks_python.py`.
"""
from __future__ import annotations

from .program import Block, Mutation

M = Mutation


def dict_views(rng):
    """A dict view taken before the dict changes inside f (views are live)."""
    return Block("dict_views", setup="REG$ = {'a': 1.0}\n", body="""
        keys = REG$.keys()
        vals = REG$.values()
        REG$['n' + str(len(REG$))] = 2.0
        aux.append(len(keys))
        aux.append(sorted(vals))
        out = out + len(keys)
        """, mutations=(M("REG$.clear()"), M("REG$['z'] = 3.0")), state=("dict(REG$)",))


def dict_iter_mutation(rng):
    """Adding to a dict while iterating it: CPython raises RuntimeError, which f catches."""
    return Block("dict_iter_mutation", setup="OPTS$ = {'a': 1.0, 'b': 2.0}\n", body="""
        try:
            for k in OPTS$:
                if k == 'a':
                    OPTS$['c' + str(len(OPTS$))] = 3.0
                out = out + OPTS$[k]
        except RuntimeError:
            aux.append('changed size')
        """, mutations=(M("OPTS$ = {'b': 2.0}"), M("OPTS$['a'] = 0.5")), state=("dict(OPTS$)",))


def user_context(rng):
    """A user context manager that switches grad mode in `__enter__` and logs in `__exit__`."""
    return Block("user_context", setup="""
        class Mode$:
            log = []
            def __init__(self, grad):
                self.grad = grad
            def __enter__(self):
                self.prev = torch.is_grad_enabled()
                torch.set_grad_enabled(self.grad)
                return self
            def __exit__(self, *exc):
                torch.set_grad_enabled(self.prev)
                Mode$.log.append('exit')
                return False
        GRAD$ = False
        W$ = torch.ones(4, requires_grad=True)
        """, body="""
        with Mode$(GRAD$):
            out = out * W$
            if torch.is_grad_enabled():
                out = out + 1
        aux.append(out.requires_grad)
        """, mutations=(M("GRAD$ = True"), M("GRAD$ = False"), M("Mode$.log.clear()")),
        state=("list(Mode$.log)",))


def generator_use(rng):
    """A generator over a global list consumed by f, and one returned (lazy) in aux."""
    return Block("generator", setup="SCALES$ = [1.0, 2.0]\n\ndef scaled$(t):\n    for s in SCALES$:\n        yield t * s\n",
                 body="for y in scaled$(out[0]):\n    out = out + y\naux.append(sum(1 for _ in scaled$(out)))",
                 mutations=(M("SCALES$.append(0.5)"), M("SCALES$ = []")), state=())


def hasattr_special(rng):
    """`hasattr` on a tensor and on a namedtuple, whose answers change between calls."""
    return Block("hasattr_special", setup="""
        import collections
        Pair$ = collections.namedtuple('Pair$', ['a', 'b'])
        PAIR$ = Pair$(1.0, 2.0)
        """, params=("t$",), args=("torch.ones(4)",), body="""
        if hasattr(t$, 'meta'):
            out = out + 1
        if hasattr(PAIR$, 'c'):
            out = out + PAIR$.c
        out = out * PAIR$.a
        """, mutations=(M("Pair$.c = 5.0"), M("PAIR$ = Pair$(3.0, 4.0)"), M("del Pair$.c")), state=())


def metaclass_isinstance(rng):
    """`isinstance` decided by a metaclass `__instancecheck__` that reads changing state."""
    return Block("metaclass_isinstance", setup="""
        class Meta$(type):
            accept = False
            def __instancecheck__(cls, obj):
                return Meta$.accept
        class Any$(metaclass=Meta$):
            pass
        """, body="if isinstance(out, Any$):\n    out = out * 2\naux.append(isinstance(out, Any$))",
        mutations=(M("Meta$.accept = True"), M("Meta$.accept = False")), state=())


def class_reassign(rng):
    """`obj.__class__ = Other` between calls: methods and class attributes now come from Other."""
    return Block("class_reassign", setup="""
        class A$:
            k = 1.0
            def act(self, t):
                return t + self.k
        class B$:
            k = -1.0
            def act(self, t):
                return t * self.k
        obj$ = A$()
        """, body="out = obj$.act(out)\naux.append(type(obj$).__name__)",
        mutations=(M("obj$.__class__ = B$"), M("obj$.__class__ = A$")), state=())


def nan_reduce(rng):
    """Reductions over inputs that hold NaN on some calls (NaN propagates through max/amax/min/argmax)."""
    op = rng.choice(["out.amax(0)", "out.max(0).values", "out.amin(1, keepdim=True)", "out.argmax(0).float()",
                     "out.max()", "out.min(0).indices.float()", "torch.clamp(out, -1, 1)"])
    return Block("nan_reduce", params=("m$",),
                 args=("torch.tensor([[1.0, float('nan'), 0.0, 2.0], [0.0, 1.0, -0.0, 1.0]])[:, :4] * (i % 2)",),
                 body=f"out = out + m$ * 0 + m$\nred = {op}\naux.append(torch.isnan(red).any().item())\nout = out + red")


def empty_reduce(rng):
    """Mean/var/sum over an empty dimension (NaN in eager for mean/var, 0 for sum)."""
    op = rng.choice(["e$.mean(0)", "e$.var(0)", "e$.sum(0)", "e$.std(1)", "e$.mean()"])
    return Block("empty_reduce", params=("e$",), args=("torch.ones(0, 4) if i % 2 == 0 else torch.ones(2, 4)",),
                 body=f"r = {op}\naux.append(r)\nout = out + r.sum()")


def view_return(rng):
    """A view of an argument returned (aux) and written through by the caller's next use."""
    view = rng.choice(["v$[1:]", "v$.t()", "v$.view(8)", "v$[:, ::2]", "v$.unsqueeze(0)"])
    return Block("view_return", params=("v$",), args=("torch.arange(8.).view(2, 4) + i",),
                 body=f"w = {view}\naux.append(w)\nout = out + v$.sum()")


def inplace_view(rng):
    """In-place updates through a view of an argument, some with a boolean-mask index in the same graph."""
    op = rng.choice(["vv = v$.mT\n    vv += 1", "v$[0].mul_(2)", "v$.view(8)[::2].add_(1)",
                     "vv = v$[:, 1:]\n    vv.copy_(torch.zeros(1))"])
    mask = rng.random() < 0.5
    pre = "out = out + v$[v$ > 2].sum()\n" if mask else ""
    return Block("inplace_view", params=("v$",), args=("torch.arange(8.).view(2, 4).t().contiguous().t() + i",),
                 body=f"{pre}if True:\n    {op}\nout = out + v$")


def broadcast_copy(rng):
    """`t.copy_(w)` where w broadcasts to t's shape, and `expand` then clone."""
    return Block("broadcast_copy", params=("w$",), args=("torch.randn(4, generator=g)",),
                 body="t1 = out.clone()\nt1.copy_(w$)\nout = out + t1 + w$.expand(2, 4).clone()")


def metadata_inplace(rng):
    """In-place metadata ops on an argument (`t_`, `unsqueeze_`, `squeeze_`, `transpose_`): the caller's
    tensor changes shape and strides."""
    op = rng.choice(["v$.t_()", "v$.unsqueeze_(0)", "v$.transpose_(0, 1)", "v$.unsqueeze_(1).squeeze_(1)"])
    return Block("metadata_inplace", params=("v$",), args=("torch.arange(8.).view(2, 4) + i",),
                 body=f"{op}\naux.append(tuple(v$.shape))\nout = out + v$.sum() + v$.reshape(-1)[:4].sum()")


def int64_reduce(rng):
    """Reductions of int64 tensors holding values above 2**53 (exact in eager): ids, hashes, counters."""
    op = rng.choice(["n$.sum()", "n$.sum(0)", "n$.prod(0)", "n$.cumsum(0)[-1]", "n$.amax()"])
    return Block("int64_reduce", params=("n$",), args=("torch.tensor([2**60 + 1 + i, 3, 2**55 + 7])",),
                 body=f"r = {op}\naux.append(r.tolist())\nout = out + (r % 1000).float()")


def special_values(rng):
    """Pointwise ops on special values (NaN, +-0.0, +-inf, tiny, bool): sign, maximum, trunc, pow, expm1,
    log1p, bool add, clamps and selects of -0.0. Compared with the sign of zero (compare.py)."""
    op = rng.choice(["torch.sign(s$)", "torch.maximum(s$, torch.zeros(6))", "torch.trunc(s$)", "s$.abs() ** 0.5",
                     "torch.expm1(s$ * 1e-9)", "torch.log1p(s$.abs() * 1e-9)", "(s$ > 0) + (s$ >= 0)",
                     "torch.minimum(s$, torch.zeros(6))", "torch.where(s$ == 0, s$, 1 / s$)", "s$ * 0",
                     "torch.maximum(torch.zeros(6), s$)", "s$ ** 0.5", "torch.frac(s$)", "s$.clamp(min=-0.0)",
                     "s$.clamp(-0.0, 0.0)", "s$.masked_fill(s$ > 0, -0.0)", "torch.where(s$ > 0, -0.0, s$)",
                     "torch.where(s$ < 1, s$ * -0.0, s$)", "torch.clamp(s$, min=s$.flip(0))"])
    return Block("special_values", params=("s$",),
                 args=("torch.tensor([float('nan'), -0.0, 0.0, float('inf'), -1.5, 2.0])[[(k + i) % 6 for k in range(6)]]",),
                 body=f"r = {op}\naux.append(r)\nout = out + torch.nan_to_num(r.float(), posinf=1e4, neginf=-1e4).sum()")


FACTORIES = [special_values, int64_reduce, metadata_inplace, dict_views, dict_iter_mutation, user_context, generator_use, hasattr_special, metaclass_isinstance,
             class_reassign, nan_reduce, empty_reduce, view_return, inplace_view, broadcast_copy]
