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

import functools
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
    """(expression, whether it is a float) for the size expressions (sympy) of a node value: a SymInt or SymFloat,
    or a tensor's sizes, strides, offset, numel and the products of its trailing sizes (contiguous strides)."""
    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        return [(value.node.expr, isinstance(value, torch.SymFloat))]
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
            out.append((item.node.expr, False))
    return out


def collect(graphs: list, mapping: dict, simplify, symbols: list) -> tuple[list, list]:
    """The distinct non-constant size expressions of `graphs`' node values over `symbols`, as (int ones, float
    ones: SymFloat values); frontend symbols are renamed to the backend's by `mapping` (frontend symbol ->
    backend expression). All of them: SizeExpressions takes the first _MAX_ATOMS as candidates."""
    allowed = set(symbols)
    seen, atoms, floats = set(), [], []
    for graph in graphs:
        for node in graph.nodes:
            for expr, is_float in _exprs_of(node.meta.get("val")):
                try:
                    expr = _simplified(expr.xreplace(mapping), simplify)
                except Exception:  # noqa: BLE001 - an expression the backend's env cannot take
                    continue
                if expr.is_number or not expr.free_symbols <= allowed or expr in seen:
                    continue
                seen.add(expr)
                (floats if is_float else atoms).append(expr)
    return atoms, floats


def _simplified(expr, simplify):
    """`expr` simplified by the shape env, but for truncations: ShapeEnv.simplify writes `TruncToInt(IntTrueDiv(a,
    b))` (`int(n / 2)`) as `a // b`, which differs for negative odd `a` (review revF F7)."""
    from torch.utils._sympy.functions import TruncToInt

    return expr if expr.has(TruncToInt) else simplify(expr)


class Ambiguous(Exception):
    """Several size expressions fit a literal at the probes; `points` are sizes where they differ."""

    def __init__(self, points: list):
        super().__init__(f"several size expressions fit; they differ at {points[:4]}")
        self.points = points


class SizeExpressions:
    """Candidate expressions for literals (NOTE [Literals fitted to the graph's size expressions])."""

    def __init__(self, atoms: list, symbols: list, floats: list = ()):
        self.atoms = atoms[:_MAX_ATOMS]  # the candidates
        self.checked = list(atoms) + list(floats)  # NOTE [Size expressions the probes cannot tell]
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
                text = f"lambda {names}: {PythonPrinter().doprint(expr)}"  # `torch.sym_float(..)` for ToFloat
                function = eval(text, {"math": math, "torch": torch})  # noqa: S307
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


# NOTE [Size expressions the probes cannot tell]
# The module is generated at probes where every symbol is a positive multiple of 16 (or 1, 3, 6 past one), and
# a literal that takes one value at every probe is a constant of the module, one that is a product of symbols
# there that product. Values the graph computes from ints and sizes need not be either where the probes are
# not: `x * 2 + n // 100000` was 0 at every probe (eager 4 at n = 250000), `x.size(0) // 2048` too,
# `abs(n)`, `n % 4096` and `n & 0xFFFF` equal `n` at every probe (eager differs for n < 0, n >= 4096),
# `int(n / 2)` equals `n // 2` at every probe (and both are graph values: which one a literal is cannot be
# told; ShapeEnv.simplify even writes the first as the second, so truncations are kept as they are), and one
# module served every call with those values (review revF F3, F5, F7). So before fitting, every size
# expression of the graph (its SymInt and SymFloat values, sizes, strides, offsets and numels; all of them,
# not only the fit's first _MAX_ATOMS candidates) must be told apart at the probes. An expression is left to
# the module only when
# - it is not one value at every probe,
# - it is a polynomial of the symbols, or no product of symbols takes its values at the probes but one equal
#   to it (`1*s//2` is `s // 2`), and
# - no other expression takes its values at the probes, unless both are candidates of the fit that differ at
#   a size of the grid (the fit then probes there: NOTE [Literals fitted to the graph's size expressions]).
# Two expressions (or an expression and a constant) count as one where shown equal wherever the graph is
# served: by substitution of what the size check holds (pinned symbols, symbols the frontend equates to an
# expression, an extremum's branch, a residue guarded to be 0 and the exact division it makes) or as a multiple
# of a guarded equality (`Eq(s // 2, s - (s + 1) // 2)`); or where they differ only at sizes of the grid (and
# of it with a symbol at 0 or 1) that the graph is not served at (`x.view(s0, 2, -1)`: `2 * (t // 2)` and `t`
# differ at odd t, where the view raises; `Max(1, n)` and `n` at n = 0, where a guard fails; _DIFFERING_TRIED
# of those sizes are tried, on fake tensors) and neither has a constant beyond the grid (`n % 4096` and `n`
# agree on all of it). Otherwise the graph is compiled per shape and int value (a module for each, computed as
# eager computes it). Polynomials (`n * x.size(1)`, `s0 * s1`, `n * n - 3 * n`) and rounded sizes the probes
# tell (`x[:, :x.size(1) // 2]`, `(s + 127) // 128`) stay one module.
def monomial_of(values: tuple, probes: tuple) -> tuple | None:
    """(c, exponents): `c * prod(s_i ** e_i)` (c a Fraction with denominator up to 16, read as a floor division,
    exponents 0..2, not all 0) equal to `values[k]` at `probes[k]`, else None."""
    return _monomial_of(tuple(values), tuple(map(tuple, probes)))


@functools.lru_cache(maxsize=1024)
def _monomial_of(values: tuple, probes: tuple) -> tuple | None:
    from fractions import Fraction

    for exponents in itertools.product(range(3), repeat=len(probes[0])):
        if not any(exponents):
            continue
        products = [1] * len(probes)
        for k, probe in enumerate(probes):
            for e, value in zip(exponents, probe):
                products[k] *= value ** e
        if products[0] == 0:
            continue
        c = Fraction(values[0], products[0])
        if c.denominator <= 16 and all(c * d == v for d, v in zip(products, values)):
            return c, exponents
    return None


def _polynomial(expr) -> bool:
    import sympy
    from torch.utils._sympy.functions import ToFloat

    for part in sympy.preorder_traversal(expr):
        if isinstance(part, sympy.Pow):
            if not (part.exp.is_Integer and part.exp >= 0):
                return False
        elif not isinstance(part, (sympy.Symbol, sympy.Integer, sympy.Add, sympy.Mul, ToFloat)):
            return False
    return True


def _facts(fixed: dict, relations, branches: list) -> tuple[dict, dict, list]:
    """({symbol or extremum: its value or the expression it equals}, {residue guarded to be 0: 0, and the exact
    division it makes}, [lhs - rhs of each equality guarded]): what holds wherever the module is served: pinned
    symbols, the frontend's relations
    (NOTE [Probes within the frontend's relations], probe_relations.py) and the extrema's branches the size
    check requires (NOTE [Extrema of sizes as inputs], size_floats.py)."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv, Mod, PythonMod

    values = {s: sympy.Integer(v) for s, v in fixed.items()}
    for index, expr in getattr(relations, "definitions", ()):
        values.setdefault(relations.symbols[index], expr)
    for branch in branches:
        values.setdefault(branch.lhs, branch.rhs)
    residues, equalities = {}, []
    for guard in getattr(relations, "guards", ()):
        if not isinstance(guard, sympy.Eq):
            continue
        difference = sympy.expand(guard.lhs - guard.rhs)  # `Eq(Mod(a, 7) + 1, 1)`, `Eq(s, s - Mod(s, 3))`
        equalities.append(difference)
        _, residue = difference.as_coeff_Mul()
        if isinstance(residue, (Mod, PythonMod, sympy.Mod)) and residue.args[1].is_Integer and residue.args[1] > 0:
            base, divisor = residue.args
            for kind in (Mod, PythonMod):
                residues[kind(base, divisor)] = sympy.Integer(0)
            residues[FloorDiv(base, divisor)] = base / divisor
    return values, residues, equalities


def _plain(expr, facts: tuple):
    """`expr` under `facts` (from _facts), floor divisions as sympy floors, conversions to float dropped."""
    import sympy
    from torch.utils._sympy.functions import FloorDiv, ToFloat

    values, residues, _ = facts
    expr = sympy.sympify(expr)
    for _ in range(len(values) + 1):
        expr = expr.xreplace(values)
    expr = expr.xreplace(residues)
    expr = expr.replace(lambda e: isinstance(e, ToFloat), lambda e: e.args[0])
    return expr.replace(lambda e: isinstance(e, FloorDiv), lambda e: sympy.floor(e.args[0] / e.args[1]))


def _proven_equal(a, b, facts: tuple) -> bool:
    """Whether `a` and `b` are one expression where the graph is served (under `facts`, from _facts)."""
    import sympy

    try:
        difference = sympy.expand(_plain(a, facts) - _plain(b, facts))
        if difference == 0:
            return True
        # a multiple of a guarded equality's difference: `Eq(s // 2, s - (s + 1) // 2)` for `t * (s // 2)`
        for guarded in facts[2]:
            guarded = sympy.expand(_plain(guarded, facts))
            if guarded != 0 and sympy.fraction(sympy.cancel(difference / guarded))[1].is_number:
                return True
        return False
    except Exception:  # noqa: BLE001 - expressions sympy cannot subtract: not shown equal
        return False


def _monomial_expr(fit: tuple, symbols: list):
    import sympy
    from torch.utils._sympy.functions import FloorDiv

    c, exponents = fit
    product = sympy.Integer(c.numerator) * sympy.Mul(*[s ** e for s, e in zip(symbols, exponents)])
    return product if c.denominator == 1 else FloorDiv(product, sympy.Integer(c.denominator))


_SMALL = 64  # the grid's largest size: constants up to it take effect inside the grid
_DIFFERING_TRIED = 32  # grid points where two expressions differ tried (the graph is run on fake tensors)


class _Told:
    """NOTE [Size expressions the probes cannot tell] over one SizeExpressions' checked expressions; `takes(point)`:
    whether the graph is served at those sizes (its size check, the frontend's relations, its ops on fake tensors)."""

    def __init__(self, exprs: "SizeExpressions", probes: list, facts: tuple, takes):
        self.exprs, self.facts, self.takes = exprs, facts, takes
        self.points = [tuple(p) for p in probes]

    def value(self, expr, point: tuple):
        try:
            value = self.exprs._function(expr)(*point)
        except Exception:  # noqa: BLE001 - division by zero and the like: no value there
            return None
        return value if type(value) in (int, float) else None

    def reason(self) -> str | None:
        by_values: dict = {}
        for expr in self.exprs.checked:
            values = tuple(self.value(expr, p) for p in self.points)
            if None in values:
                return f"{expr} has no value at some probe"
            if len(set(values)) == 1 and not self.one_function(expr, values[0]):
                return f"{expr} is {values[0]} at every probe"
            why = self._not_a_product(expr, values)
            if why:
                return why
            by_values.setdefault(values, []).append(expr)
        for group in by_values.values():
            for a, b in itertools.combinations(group, 2):
                if not self._fit_tells(a, b) and not self.one_function(a, b):
                    return f"{a} and {b} are equal at every probe"
        return None

    def one_function(self, a, b) -> bool:
        """Whether `a` and `b` agree wherever the graph is served: shown by the facts, or they differ only at
        sizes of the grid the graph is not served at (`x.view(s, 2, -1)`: `2 * (t // 2)` and `t` differ for odd
        t only), and have no constant beyond the grid (`n % 4096` and `n` agree on the whole grid)."""
        import sympy

        if _proven_equal(a, b, self.facts):
            return True
        constants = [abs(c) for e in (a, b) for c in sympy.sympify(e).atoms(sympy.Integer)]
        if any(c > _SMALL for c in constants):
            return False
        differing = [p for p in self.grid() if self.value(a, p) != self.value(b, p)]
        if len(differing) > _DIFFERING_TRIED:  # the smallest half, and the others evenly
            half = _DIFFERING_TRIED // 2
            rest = differing[half:]
            differing = differing[:half] + rest[::max(1, len(rest) // half)][:half]
        return bool(differing) and not any(self.takes(list(p)) for p in differing)

    def grid(self) -> list[tuple]:
        """The fit's grid, and points of it with one symbol 0 or 1 (`Max(1, n)` and `n` differ at n = 0 only)."""
        grid = self.exprs._grid()
        low = [p[:k] + (v,) + p[k + 1:] for p in grid[:8] for k in range(len(p)) for v in (0, 1)]
        return grid + list(dict.fromkeys(low))

    def _not_a_product(self, expr, values: tuple) -> str | None:
        if _polynomial(expr) or not all(float(v).is_integer() for v in values):
            return None
        fit = monomial_of(tuple(int(v) for v in values), tuple(self.points))
        if fit is not None:
            product = _monomial_expr(fit, self.exprs.symbols)
            if not self.one_function(product, expr):
                return f"{expr} equals {product} at every probe"
        return None

    def _fit_tells(self, a, b) -> bool:
        """Whether the fit tells `a` from `b` by itself: both candidates, differing at a size of the grid the
        graph is served at (the fit generates the module there: NOTE [Literals fitted to the graph's size
        expressions])."""
        candidates = self.exprs.atoms
        if a not in candidates or b not in candidates:
            return False
        return any(self.value(a, p) != self.value(b, p) for p in self.exprs._grid() if p not in self.exprs.excluded)


def untold(exprs: "SizeExpressions", probes: list, fixed: dict, relations, branches: list, takes) -> str | None:
    """Why the probes cannot tell some size expression of the graph from another function of the sizes (NOTE
    [Size expressions the probes cannot tell]), or None; `fixed`: {symbol: value} for pinned symbols,
    `relations`: the frontend's (probe_relations.Relations), `branches`: extrema's branches the size check
    requires, `takes(point)`: whether the graph is served at a point."""
    return _Told(exprs, probes, _facts(fixed, relations, branches), takes).reason()
