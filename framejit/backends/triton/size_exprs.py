"""The size expressions of a symbolic graph, as candidates for the literals of a size-generic module.

NOTE [Literals fitted to the graph's size expressions]
A size-generic module (NOTE [Size-generic modules], dynamic.py) is generated at probe sizes and every
integer literal that changes between probes is fitted as a product of powers of the symbols. Sizes the
user's code computes are often not products: `x[:, : x.size(1) // 2]` indexes with `s1 // 2` (a product
with a fraction fits it only for even s1), `F.pad(x, (0, (-x.size(-1)) % 8))` pads by `(-s1) % 8`,
`x[off:]` has `s0 - off` rows. Those graphs compiled per shape. The expressions themselves are known: the
graph's values carry them (sizes, strides, storage offsets and numels of every tensor, SymInt values),
in the frontend graph and, when it traces symbolically, in its aten graph over the backend's symbols.
So a literal no product fits is matched against these expressions, their small multiples and their
pairwise products, evaluated at every probe. A literal is taken as an expression only when
- it equals the expression at every probe (the fitted probes, and probes with odd sizes and other
  residues, which the module is then always generated at: `_odd_probes` in dynamic.py), and
- every expression that also equals it there agrees with it at a grid of sizes too. Two different
  functions of the sizes can agree at the probes (`3 * (s - 3 % s)` and `(s - 3 % s) * (3 % s)` at every
  s > 3): the fit raises `Ambiguous` with the sizes where they differ, and the module is generated there
  too (a probe like any other), until one expression is left. Grid points the graph does not take (its
  size check rejects them, or its ops raise there on fake tensors: a conv's output `Max(1, (s - 3) // 2 + 1)`
  and `(s - 3) // 2 + 1` differ only for s < 3, where eager raises) are excluded: the module never serves
  them.
NOTE [Size expressions evaluated as printed]: candidates are evaluated at probes and grid points as the
Python their printed form is (the text the module runs), compiled once per expression: sympy's own
substitution took ~0.5 ms a point, seconds per literal over the grid for graphs of 7 or 8 symbols.
The fitted module is checked the same way as before: the same skeleton at every probe, every literal fitted
at every probe; anything else compiles per shape.
"""
from __future__ import annotations

import itertools

import torch

_MULTIPLES = range(2, 17)
# NOTE [Sizes off by a constant]: the lowering writes some sizes as literals that are a size of the graph plus
# or minus a constant: var/std divide by `s - correction` (x.var(1): `/ 79.0` at a row of 80), so
# `(x - x.mean(1, keepdim=True)) / x.var(1, keepdim=True)` compiled per shape. Atoms shifted by these constants
# are candidates too (last: an exact atom, multiple or product is preferred).
_SHIFTS = (-1, 1, -2, 2)
_MAX_ATOMS = 96  # pairwise products of this many expressions: ~4600 candidates


def _exprs_of(value) -> list:
    """Size expressions (sympy) of a node value: a SymInt, or a tensor's sizes, strides, offset, numel and
    the products of its trailing sizes (contiguous strides)."""
    if isinstance(value, torch.SymInt):
        return [value.node.expr]
    if not isinstance(value, torch.Tensor):
        return []
    out = []
    items = list(value.shape)
    try:
        items += list(value.stride()) + [value.storage_offset()]
    except Exception:  # noqa: BLE001 - a sparse or otherwise strideless value: sizes only
        pass
    product = 1
    for size in reversed(value.shape):
        product = product * size
        items.append(product)
    for item in items:
        if isinstance(item, torch.SymInt):
            out.append(item.node.expr)
    return out


def collect(graphs: list, mapping: dict, simplify, symbols: list) -> list:
    """The distinct non-constant size expressions of `graphs`' node values over `symbols`; frontend symbols
    are renamed to the backend's by `mapping` (frontend symbol -> backend expression)."""
    allowed = set(symbols)
    seen, atoms = set(), []
    for graph in graphs:
        for node in graph.nodes:
            for expr in _exprs_of(node.meta.get("val")):
                try:
                    expr = simplify(expr.xreplace(mapping))
                except Exception:  # noqa: BLE001 - an expression the backend's env cannot take
                    continue
                if expr.is_number or not expr.free_symbols <= allowed or expr in seen:
                    continue
                seen.add(expr)
                atoms.append(expr)
    return atoms[:_MAX_ATOMS]


class Ambiguous(Exception):
    """Several size expressions fit a literal at the probes; `points` are sizes where they differ."""

    def __init__(self, points: list):
        super().__init__(f"several size expressions fit; they differ at {points[:4]}")
        self.points = points


class SizeExpressions:
    """Candidate expressions for literals (NOTE [Literals fitted to the graph's size expressions])."""

    def __init__(self, atoms: list, symbols: list):
        self.atoms = atoms
        self.symbols = symbols
        self._values: dict = {}
        self._fits: dict = {}
        self._functions: dict = {}
        self._grid_points: list | None = None
        self.excluded: set = set()  # grid points the graph does not take (dynamic._probe_where_they_differ)

    def __bool__(self) -> bool:
        return bool(self.atoms)

    def rounds(self) -> bool:
        """Whether an expression rounds or wraps sizes (`//`, `%`, ceiling): then probes with odd sizes
        and other residues are needed (NOTE [Odd probes], dynamic.py)."""
        import sympy

        return any(not isinstance(atom, (sympy.Symbol, sympy.Add, sympy.Mul, sympy.Pow, sympy.Integer)) or
                   any(not isinstance(a, (sympy.Symbol, sympy.Add, sympy.Mul, sympy.Pow, sympy.Integer))
                       for a in sympy.preorder_traversal(atom))
                   for atom in self.atoms)

    def degenerate_at(self, point: list[int], others: list[list[int]]) -> bool:
        """Whether some size expression is 1 at `point` but larger at every one of `others`, or 0 at `point`
        but not at any of `others` (NOTE [Degenerate sizes are not probed], dynamic.py)."""
        point, others = tuple(point), [tuple(p) for p in others]
        for atom in self.atoms:
            value = self._at(atom, point)
            if value == 1 and all((self._at(atom, o) or 0) > 1 for o in others):
                return True
            if value == 0 and all(self._at(atom, o) not in (0, None) for o in others):
                return True
        return False

    def _at(self, expr, point: tuple):
        key = (expr, point)
        if key not in self._values:
            try:
                value = self._function(expr)(*point)
                self._values[key] = value if type(value) is int else None
            except Exception:  # noqa: BLE001 - division by zero and the like: no value there
                self._values[key] = None
        return self._values[key]

    def _function(self, expr):
        """`expr` as a Python function of the symbols, printed as the module prints it (NOTE [Size expressions
        evaluated as printed]); sympy's own evaluation where the printed form does not compile."""
        function = self._functions.get(expr)
        if function is None:
            import math

            import sympy
            from torch.utils._sympy.printers import PythonPrinter

            names = ", ".join(str(s) for s in self.symbols)
            try:
                function = eval(f"lambda {names}: {PythonPrinter().doprint(expr)}", {"math": math})  # noqa: S307
            except Exception:  # noqa: BLE001 - a function the printer spells otherwise: evaluated by sympy

                def function(*point, expr=expr):
                    value = expr.xreplace({s: sympy.Integer(v) for s, v in zip(self.symbols, point)})
                    return int(value) if value.is_Integer else None
            self._functions[expr] = function
        return function

    def _candidates(self, points: list):
        """(expression, its values at `points`) for atoms, their small multiples, pairwise products and shifts;
        values are multiplied as ints (sympy evaluates each atom once per point)."""
        vectors = [(atom, [self._at(atom, p) for p in points]) for atom in self.atoms]
        vectors = [(a, v) for a, v in vectors if None not in v]
        yield from vectors
        for c in _MULTIPLES:
            for atom, vector in vectors:
                yield c * atom, [c * x for x in vector]
        for (a, va), (b, vb) in itertools.combinations_with_replacement(vectors, 2):
            yield a * b, [x * y for x, y in zip(va, vb)]
        for c in _SHIFTS:  # NOTE [Sizes off by a constant]
            for atom, vector in vectors:
                yield atom + c, [x + c for x in vector]

    def fit(self, values: list[int], probes: list[list[int]]):
        """The expression equal to `values` at `probes` (printed as Python), or None (none or ambiguous)."""
        from torch.utils._sympy.printers import PythonPrinter

        key = (tuple(values), tuple(map(tuple, probes)), len(self.excluded))  # literals repeat in a module
        if key not in self._fits:
            matches = [expr for expr, vector in self._candidates([tuple(p) for p in probes]) if vector == values]
            matches = list(dict.fromkeys(matches))
            differ = self._disagreements(matches) if matches else []
            self._fits[key] = Ambiguous(differ) if differ else \
                (PythonPrinter().doprint(matches[0]) if matches else None)
        if isinstance(self._fits[key], Ambiguous):
            raise self._fits[key]
        return self._fits[key]

    def _disagreements(self, matches: list) -> list[list[int]]:
        """The points of a grid of sizes where `matches` are not all equal (but for `excluded` ones), smallest
        sums first."""
        first = matches[0]
        return [list(p) for p in self._grid() if p not in self.excluded
                and any(self._at(m, p) != self._at(first, p) for m in matches[1:])]

    def _grid(self) -> list[tuple]:
        if self._grid_points is None:
            self._grid_points = self._make_grid()
        return self._grid_points

    def _make_grid(self) -> list[tuple]:
        import random

        values, n = (2, 3, 4, 5, 7, 8, 12, 13, 16, 17, 31, 64), len(self.symbols)
        if len(values) ** n <= 1728:
            points = list(itertools.product(values, repeat=n))
        else:  # a fixed sample: the same grid in every process
            pick = random.Random(n)
            points = list({tuple(pick.choice(values) for _ in range(n)) for _ in range(1728)})
        return sorted(points, key=lambda p: (sum(p), p))
