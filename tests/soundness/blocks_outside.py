"""Block factories over containers and libraries that f reaches outside itself, read lazily by framejit
(NOTE [Lists from outside], [Dicts from outside], [Sets from outside] in framejit): a global list that
grows between calls and inside f, read by len, index and iteration; a global set mutated in f and
between calls; a global defaultdict whose missing keys f reads (inserting them) and whose
default_factory changes; a NumPy round trip (`x.numpy()`, NumPy ops, `torch.from_numpy`); modules made
while tracing; profiler ranges.

Same contract as `blocks_python.py`.
"""
from __future__ import annotations

from .program import Block, Mutation

M = Mutation


def outside_list_grow(rng):
    """A global list that grows between calls and in f; f reads len, an index and iterates it."""
    read = rng.choice(["out = out + len(HIST$)", "out = out * HIST$[-1]", "out = out + HIST$[0]",
                       "for h in HIST$:\n    out = out + h", "if len(HIST$) > 2:\n    out = out - HIST$[1]",
                       "out = out + sum(HIST$)", "aux.append(HIST$[1:])"])
    grow = rng.choice(["HIST$.append(0.5)", "HIST$.append(float(len(HIST$)))", "global HIST$\nHIST$ += [1.5]",
                       "HIST$.extend([0.25, -1.0])", "HIST$.insert(0, 2.0)", ""])
    return Block("outside_list_grow", setup="HIST$ = [1.0]\n", body=f"{grow}\n{read}\naux.append(len(HIST$))",
                 mutations=(M("HIST$.append(3.0)"), M("HIST$.extend([-2.0, 0.0])"), M("HIST$.pop()"),
                            M("HIST$[0] = -0.0"), M("HIST$.clear()"), M("HIST$ = [4.0, 5.0]")),
                 state=("list(HIST$)",))


def outside_set(rng):
    """A global set mutated in f (add, discard, |=, remove) and read by `in` and len; changed between calls."""
    op = rng.choice(["SEEN$.add(len(SEEN$))", "SEEN$.discard(1)", "global SEEN$\nSEEN$ |= {7, 8}", "SEEN$.add('k')",
                     "SEEN$.update(range(2))", "global SEEN$\nSEEN$ -= {2}", "SEEN$.remove(2) if 2 in SEEN$ else None"])
    read = rng.choice(["if 3 in SEEN$:\n    out = out + 1", "out = out + len(SEEN$)",
                       "if 'k' not in SEEN$:\n    out = out * 2", "aux.append(sorted(SEEN$, key=str))"])
    return Block("outside_set", setup="SEEN$ = {1, 2}\n", body=f"{op}\n{read}\naux.append(len(SEEN$))",
                 mutations=(M("SEEN$.add(3)"), M("SEEN$.clear()"), M("SEEN$ = {3, 'k'}"), M("SEEN$.discard(2)")),
                 state=("sorted(SEEN$, key=str)",))


def outside_defaultdict(rng):
    """A global defaultdict: f counts into it and reads missing keys (which inserts them); default_factory
    changes between calls (None makes a missing key a KeyError)."""
    body = rng.choice(["COUNTS$['calls'] += 1\nout = out + COUNTS$['calls']",
                       "out = out + COUNTS$['missing']\naux.append(len(COUNTS$))",
                       "if 'calls' in COUNTS$:\n    out = out * 2\naux.append(sorted(COUNTS$))",
                       "out = out + COUNTS$.get('calls', 0.5)"])
    return Block("outside_defaultdict", setup="import collections\nCOUNTS$ = collections.defaultdict(int)\n",
                 body=body,
                 mutations=(M("COUNTS$['calls'] = 10"), M("COUNTS$.default_factory = float"), M("COUNTS$.clear()"),
                            M("COUNTS$.default_factory = lambda: 2.5"), M("COUNTS$.default_factory = None")),
                 state=("sorted(COUNTS$.items())", "COUNTS$.default_factory is None"))


def numpy_roundtrip(rng):
    """out.detach().numpy(), NumPy ops with a global scale, back through torch.from_numpy."""
    op = rng.choice(["a = np.tanh(a) * SCALE$", "a = a * SCALE$ + a.max()", "a = np.clip(a, -SCALE$, SCALE$)",
                     "a = np.where(a > 0, a, a * SCALE$)", "a = a.astype(np.float64) * SCALE$\na = a - a.mean()",
                     "a = np.maximum(a, 0.0) + a.min(axis=-1, keepdims=True)"])
    return Block("numpy_roundtrip", setup="import numpy as np\nSCALE$ = 2.0\n",
                 body=f"a = out.detach().numpy()\n{op}\naux.append(a.shape)\nout = torch.from_numpy(a) + 1",
                 mutations=(M("SCALE$ = 0.5"), M("SCALE$ = -1.0"), M("SCALE$ = 3")), state=())


def made_module(rng):
    """A parameterless module made while tracing, chosen by a global flag."""
    return Block("made_module", setup="ACT$ = True\n", body="""
        act = nn.ReLU() if ACT$ else nn.Tanh()
        out = act(out)
        out = nn.Flatten(0)(out).view_as(out) if ACT$ == 2 else out
        aux.append(type(act).__name__)
        """, mutations=(M("ACT$ = False"), M("ACT$ = 2"), M("ACT$ = True")), state=())


def profiler_range(rng):
    """A profiler range around part of f (a null block for framejit), with a name from a global."""
    return Block("profiler_range", setup="NAME$ = 'blk'\n", body="""
        with torch.profiler.record_function('range$'):
            out = out * 2 + len(NAME$)
        """, mutations=(M("NAME$ = 'longer'"),), state=())


def outside_iterator(rng):
    """A global list iterator f draws from (next, a for loop that stops early, zip/enumerate/islice/map over
    it, the same iterator twice in zip) while its list grows; between calls it is advanced, exhausted or
    replaced. The iterator's position is compared after each call (its `__reduce__`, which reads it
    without advancing it). Red team findings of issue 12: compiled code advanced a copy, drained iterators
    given to zip/enumerate/islice, ran map's function for every item at once, rebuilt `it` and the for
    loop's iterator as two objects at a break (NOTE [Iterators from outside], NOTE [Lent iterators])."""
    draw = rng.choice(["out = out * next(IT$, 0.5)",
                       "for v in IT$:\n    out = out + v\n    if v > 2:\n        break",
                       "for n, v in enumerate(IT$):\n    out = out + v * n\n    if n >= 1:\n        break",
                       "aux.append(list(zip(IT$, IT$)))",
                       "aux.append(list(zip([1, 2], IT$)))",
                       "aux.append(list(itertools.islice(IT$, 2)))",
                       "out = out + next(map(abs, IT$), 0.0)",
                       "aux.append(next(IT$, 'end'))\nITEMS$.append(9.0)",
                       "for v in IT$:\n    print('item', v)\n    out = out - v\n    if v >= 2:\n        break"])
    rest = rng.choice(["", "aux.append(next(IT$, None))", "aux.append(len(ITEMS$))"])
    return Block("outside_iterator", setup="import itertools\nITEMS$ = [1.0, 2.0, 3.0, 4.0, 5.0]\nIT$ = iter(ITEMS$)\n",
                 body=f"{draw}\n{rest}",
                 mutations=(M("IT$ = iter(ITEMS$)"), M("next(IT$, None)"), M("ITEMS$.append(6.0)"),
                            M("IT$ = iter([7.0, -1.0, 2.5])"), M("for _ in IT$:\n    pass"),
                            M("ITEMS$[:] = [0.5, 1.5, 2.5]")),
                 state=("IT$.__reduce__()[1:]", "list(ITEMS$)"))


FACTORIES = [outside_list_grow, outside_set, outside_defaultdict, numpy_roundtrip, made_module, profiler_range,
             outside_iterator]
