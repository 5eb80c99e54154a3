"""Probe sizes that respect the relations the frontend guarantees between symbolic sizes.

NOTE [Probes within the frontend's relations]
A size-generic module (NOTE [Size-generic modules], dynamic.py) is generated at probes of primes in several
orders, so that a simplification that holds for one order of the symbols only shows up as a difference
between probes. The frontend's guards can relate sizes, though: a conv whose weight is an input guards its
kernel height `kh <= h + 2` (padding 1), a reflect pad guards its pad below the input's size. A probe that
breaks such a relation could not be generated (conv2d raised 'Kernel size can't be greater than actual
input size') and the graph compiled per shape, although the frontend never hands it such sizes: its guard
function checks the relation before the module is reached. So each probe that breaks a relation of two or
more symbols is repaired by exchanging values between symbols (a few transpositions, the first that
satisfies every relation), and for every pair of symbols whose order the repaired probes no longer vary,
a probe with the other order is added where one satisfying the relations exists (an order the relations
imply needs none: the module is never used outside it). Sizes that break a relation are also never used to
tell candidate expressions apart (dynamic._probe_where_they_differ): they are excluded, as sizes the graph
cannot take are.
A relation that equates a symbol to an expression of others (`Eq((s1 + 1) // 3, s2)`: `x[:, 1::3] + y`
makes y's width follow x's) cannot be met by exchanging values: such a symbol takes its expression's value
at every probe (`Relations.defined`), odd probes included. A relation equating two products of symbols
(`Eq(s0*s1, s2*s3)`: cross_entropy of a (b, t) batch of logits against (b', t') targets) is met by giving one
side's factors the other side's values; then a pair of symbols equal at every probe gets a probe where they
differ, if the relations allow one ((a, b, b, a)), so that a literal fitted as `s2` is not `s0`'s.
Single-symbol guards are the symbols' ranges (NOTE [Ranges of the frontend's symbols], backends/symbolic.py).

NOTE [Residues of probes]
A guard over one symbol that takes a residue (`Eq(Mod(s, 3), 0)`: `if n % 3 == 0: x.view(b, n // 3, 3)`)
is no range: the probes of primes broke it (the view failed at 16 * 5) and the graph compiled per shape
(5 modules over 5 widths). Such guards are relations here; repairing a probe first lowers each symbol's
value by less than 16 to the first that meets the guards over that symbol alone (48, 78, 111 for the three
probes) without meeting or passing another symbol's value (lowered independently, 101 and 103 under
Mod(s, 8) == 0 both became 96; now 103 stays and the probe is repaired otherwise or dropped), so the
probes keep their orders and distinct values; odd probes that break them are skipped as any probe
breaking a relation is.
"""
from __future__ import annotations

import itertools

import torch

_MAX_ROUNDS = 3  # transpositions applied to repair one probe


class Relations:
    """The frontend's guards over two or more backend symbols, checked at integer points."""

    def __init__(self, guards: list, symbols: list, ranges: list, definitions: list = (), products: list = ()):
        self.guards = guards
        self.symbols = symbols
        self.ranges = ranges  # (lower, upper) per symbol, None where unbounded
        self.definitions = list(definitions)  # (index of a symbol, its expression over the others)
        self.products = list(products)  # (indices, indices): Eq of two products of as many symbols

    def _copies(self, point: list[int], movable: set) -> list[list[int]]:
        """`point` with the factors of one side of an equal product given the other side's values, in every
        order (NOTE [Probes within the frontend's relations]: `Eq(s0*s1, s2*s3)`)."""
        out = []
        for lhs, rhs in self.products:
            for source, target in ((lhs, rhs), (rhs, lhs)):
                if not set(target) <= movable:
                    continue
                for order in itertools.permutations(source):
                    copied = list(point)
                    for t, src in zip(target, order):
                        copied[t] = point[src]
                    out.append(copied)
        return out

    def _residues_met(self, point: list[int], movable: list[int]) -> list[int]:
        """`point` with each movable symbol lowered (by less than 16) to the first value that meets the guards
        with residues or floors over it (`Eq(Mod(s, 3), 0)`, `Eq(b*s, 3*b*(s//3))`: NOTE [Residues of
        probes]) and neither equals nor passes another symbol's value (symbols equal in `point` may stay equal);
        left as it is where no value does."""
        import sympy

        point, original = list(point), list(point)
        for k in movable:
            own = [g for g in self.guards if self.symbols[k] in g.free_symbols and g.atoms(sympy.Function)]
            for value in range(point[k], max(point[k] - 16, 1), -1):
                if any(original[i] != original[k] and (v == value or (v < value) != (original[i] < original[k]))
                       for i, v in enumerate(point) if i != k):
                    continue  # it meets or passes another symbol's value: orders kept, values distinct
                values = {s: sympy.Integer(value if i == k else v) for i, (s, v) in enumerate(zip(self.symbols, point))}
                try:
                    if all(bool(g.xreplace(values)) for g in own):
                        point[k] = value
                        break
                except Exception:  # noqa: BLE001 - undefined there: try the next value
                    continue
        return point

    def defined(self, point: list[int]) -> list[int]:
        """`point` with each symbol the frontend equates to an expression of others set to its value there."""
        import sympy

        point = list(point)
        for _ in range(len(self.definitions)):
            for index, expr in self.definitions:
                try:
                    value = expr.xreplace({s: sympy.Integer(v) for s, v in zip(self.symbols, point)})
                except Exception:  # noqa: BLE001 - undefined there: left as it is (the check rejects it)
                    continue
                if value.is_Integer:
                    point[index] = int(value)
        return point

    def __bool__(self) -> bool:
        return bool(self.guards)

    def hold(self, point: list[int]) -> bool:
        import sympy

        for value, (lower, upper) in zip(point, self.ranges):
            if (lower is not None and value < lower) or (upper is not None and value > upper):
                return False
        values = {s: sympy.Integer(v) for s, v in zip(self.symbols, point)}
        for guard in self.guards:
            try:
                if not bool(guard.xreplace(values)):
                    return False
            except Exception:  # noqa: BLE001 - undefined there (a division by zero): not a size it serves
                return False
        return True

    def repaired(self, probe: list[int], fixed: set) -> list[int] | None:
        """`probe` or the first probe made from it by exchanging values of symbols (not in `fixed`) that
        satisfies every relation; None if a few exchanges find none."""
        movable = [k for k in range(len(probe)) if k not in fixed]
        frontier = [self.defined(self._residues_met(probe, movable))]
        seen = {tuple(frontier[0])}
        for _ in range(_MAX_ROUNDS + 1):
            for candidate in frontier:
                if self.hold(candidate):
                    return candidate
            following = []
            for candidate in frontier:
                for copied in self._copies(candidate, set(movable)):
                    copied = self.defined(copied)
                    if tuple(copied) not in seen:
                        seen.add(tuple(copied))
                        following.append(copied)
                for i, j in itertools.combinations(movable, 2):
                    swapped = list(candidate)
                    swapped[i], swapped[j] = swapped[j], swapped[i]
                    swapped = self.defined(swapped)
                    if tuple(swapped) not in seen:
                        seen.add(tuple(swapped))
                        following.append(swapped)
            frontier = following[:400]
        return None


def relations_of(sym) -> Relations:
    """The frontend's guards over two or more of `sym`'s backend symbols (a SymbolicInputs after `finish`)."""
    import sympy

    env = getattr(sym, "_frontend_env", None)
    symbols = list(sym.symbols)
    known = set(symbols)
    # NOTE [Extrema of sizes as inputs] (size_floats.py): an extremum input's symbol takes its value
    definitions = [(symbols.index(s), e) for s, e in getattr(sym, "definitions", ()) if s in known]
    guards, products = [sympy.Eq(symbols[k], e) for k, e in definitions], []
    if env is None:
        return Relations(guards, symbols, sym.ranges(), definitions)
    for guard in env.guards:
        try:
            expr = env.simplify(guard.expr).xreplace(sym._mapping)
        except Exception:  # noqa: BLE001 - an expression the backend cannot take: not a relation here
            continue
        # a guard over one symbol is its range (NOTE [Ranges of the frontend's symbols]) unless it takes a
        # residue: NOTE [Residues of probes]
        if (len(expr.free_symbols) >= 2 or expr.free_symbols and _takes_residue(expr)) and \
                expr.free_symbols <= known and expr not in guards:
            guards.append(expr)
            if isinstance(expr, sympy.Eq):  # `Eq((s1 + 1) // 3, s2)`: y's width follows from x's
                for side, other in ((expr.lhs, expr.rhs), (expr.rhs, expr.lhs)):
                    if isinstance(side, sympy.Symbol) and side not in other.free_symbols and \
                            side not in [symbols[k] for k, _ in definitions]:
                        definitions.append((symbols.index(side), other))
                        break
                factors = [_symbol_factors(side) for side in (expr.lhs, expr.rhs)]
                if None not in factors and len(factors[0]) == len(factors[1]) > 1 and \
                        not set(factors[0]) & set(factors[1]):
                    products.append(tuple(tuple(symbols.index(f) for f in side) for side in factors))
    return Relations(guards, symbols, sym.ranges(), definitions, products)


def extrema_untold(sym, probes: list) -> list:
    """`Eq(extremum, argument)` for each extremum input (NOTE [Extrema of sizes as inputs], backends/size_floats.py)
    equal to one of its arguments (or one of its symbols alone: nested extrema) at every probe (`max(s, 3)`,
    every probe above 3): a literal fitted as that argument would be wrong where another one wins, so the
    module serves the calls where the equation holds (the caller adds it to the size check)."""
    import sympy

    symbols, untold = list(sym.symbols), []
    for symbol, expr in sym.definitions:
        if symbol not in symbols:
            continue
        k = symbols.index(symbol)
        for arg in (*expr.args, *expr.free_symbols):
            values = [arg.xreplace({s: sympy.Integer(v) for s, v in zip(symbols, p)}) for p in probes]
            if all(v.is_Integer and int(v) == p[k] for v, p in zip(values, probes)):
                untold.append(sympy.Eq(symbol, arg))
    return untold


# NOTE [Symbols pinned by guards the probes miss]: some frontend guards hold at few sizes only, and no
# exchange of prime probes meets them: the zoo's vit adds a learned position table of 17 rows to its patch
# sequence, so the frontend guards `(h//2)*(w//2) + 1 == 17` over the image's height and width; `x[:,
# x.size(1) % 3:]` guards `Mod(s, 3) == 0` (or != 0). Every probe then failed ('Attempting to broadcast a
# dimension of length 17') and the graph compiled once per shape, batch sizes included. When generating at
# a probe fails and the probe breaks such a guard (one the repairs could not meet), the guard's symbols are
# fixed at their example values, as narrow ranges are (NOTE [Symbols with too few sizes to probe],
# dynamic.py), and the module is made again, once: it serves every size of the other symbols, the size
# check rejects other values of the fixed ones (those compile per shape, logged). A probe that breaks a
# guard where generating succeeds fixes nothing (the module is built as before).
def unmet_symbols(sym, probes: list[list[int]], degenerate: bool = True, dims: frozenset = frozenset(),
                  example: list[int] | None = None) -> set[int]:
    """Indices (into `sym.symbols`) of the symbols of frontend guards that some of `probes` break; with
    `degenerate=False`, guards that a tensor dimension in `dims` is 0 or 1 (`Eq(s1 - s60 % s1, 1)`: NOTE
    [Degenerate sizes are not probed], dynamic.py, probes them elsewhere on purpose) and guards that exclude
    one value (`Ne(t, 16)`: `mask[:, :t]` of a 16-wide mask, where the slice is the whole mask; the probes in
    range take 16) are not counted: at such a point the graph computes what its general expressions give.
    NOTE [Degenerate counts are guards]: an int that is no dimension (`x.chunk(x.size(0) // 2)`: the number of
    chunks, whose being 1 makes the chunk s rows rather than 2) counts: its guard `Eq(s // 2, 1)` pins s.
    With `example` (the symbols' example values), only the symbols that pinning needs (NOTE [Fewest symbols
    pinned])."""
    env = getattr(sym, "_frontend_env", None)
    if env is None:
        return set()
    import sympy

    symbols = list(sym.symbols)
    known, unmet, broken = set(symbols), set(), []
    points = [{s: sympy.Integer(v) for s, v in zip(symbols, p)} for p in probes]
    for guard in env.guards:
        try:
            expr = env.simplify(guard.expr).xreplace(sym._mapping)
        except Exception:  # noqa: BLE001 - an expression the backend cannot take: not checked here
            continue
        if not expr.free_symbols or not expr.free_symbols <= known or \
                (example is None and expr.free_symbols <= {symbols[k] for k in unmet}):
            continue
        if not degenerate and _of_a_degenerate_size(expr, dims):
            continue
        for values in points:
            try:
                met = bool(expr.xreplace(values))
            except Exception:  # noqa: BLE001 - undefined there (a division by zero): broken
                met = False
            if not met:
                unmet |= {symbols.index(s) for s in expr.free_symbols}
                broken.append(expr)
                break
    return unmet if example is None or not broken else _fewest_pinned(broken, symbols, points, example)


# NOTE [Fewest symbols pinned]: the heads view `x.view(b, t, h, c // h)` with `(c // h) ** -0.5` guards
# `Eq(c // h, 4)` (a specialisation no exchange of primes meets) and also `Eq(b*t*c, b*t*h*(c // h))`; with
# every broken guard's symbols pinned, b and t were fixed as well, and the dynamic=True graph compiled one
# module per batch and sequence length (5 modules over 5 (b, t) with c and h fixed; stock torch.compile 1 graph).
# Now the broken guard with the fewest symbols is taken first, and the fewest of its symbols that meet it at
# every probe when they take their example values are pinned; the others are checked again at those probes,
# and so on: pinning c and h (for `Eq(c // h, 4)`) meets the product for every b and t. The module is then made at probes that meet every guard or not at all (the caller checks the new probes
# again and pins more, or compiles per shape), as before.
def _fewest_pinned(broken: list, symbols: list, points: list[dict], example: list[int]) -> set[int]:
    import sympy

    def fixing(chosen) -> list[dict]:
        fixed = {s: sympy.Integer(v) for s, v in zip(symbols, example) if s in chosen}
        return [{**p, **fixed} for p in points]

    pinned: set = set()
    while broken:
        guard = min(broken, key=lambda e: len(e.free_symbols - pinned))
        free = sorted(guard.free_symbols - pinned, key=str)
        # the fewest of its symbols that meet it at every probe (all of them where no fewer do)
        subsets = (set(c) for n in range(1, len(free)) for c in itertools.combinations(free, n))
        pinned |= next((c for c in subsets if _met_at_all(guard, fixing(pinned | c))), set(free))
        broken = [e for e in broken if not _met_at_all(e, fixing(pinned))]
    return {symbols.index(s) for s in pinned}


def _met_at_all(expr, points: list[dict]) -> bool:
    for values in points:
        try:
            if not bool(expr.xreplace(values)):
                return False
        except Exception:  # noqa: BLE001 - undefined there: broken
            return False
    return True


def _of_a_degenerate_size(expr, dims: frozenset) -> bool:
    """`Eq(e, 1)`, `Eq(e, 0)` for a dimension `e` in `dims` (a size specialised to 0 or 1) or any `Ne` (one
    value excluded)."""
    import sympy

    if isinstance(expr, sympy.Ne):
        return True
    if not isinstance(expr, sympy.Eq):
        return False
    for side, other in ((expr.lhs, expr.rhs), (expr.rhs, expr.lhs)):
        if other in (0, 1) and any(sympy.expand(side - d) == 0 for d in dims):
            return True
    return False


def tensor_dims(gm, mapping: dict) -> frozenset:
    """The symbolic dimensions of the tensors `gm` computes, over the backend's symbols (`mapping`)."""
    dims = set()
    for node in gm.graph.nodes:
        vals = node.meta.get("val")
        for val in vals if isinstance(vals, (tuple, list)) else [vals]:
            if isinstance(val, torch.Tensor):
                dims |= {d.node.expr.xreplace(mapping) for d in val.shape if isinstance(d, torch.SymInt)}
    return frozenset(dims)


def _takes_residue(expr) -> bool:
    """`expr` takes a residue or a floor of a symbol: sympy's Mod, or torch's own Mod/PythonMod/FloorDiv,
    which are sympy Functions but not sympy.Mod (NOTE [Residues of probes]: `x[:, x.size(1) % 3:]` guards
    `Ne(s, s - Mod(s, 3))` with torch's Mod; read as a range, the probe 48 broke it and the graph compiled
    per width on triton)."""
    import sympy
    from torch.utils._sympy import functions

    kinds = tuple(getattr(functions, name) for name in ("Mod", "PythonMod", "FloorDiv", "CleanDiv")
                  if hasattr(functions, name))
    return expr.has(sympy.Mod) or any(expr.has(kind) for kind in kinds)


def _symbol_factors(expr) -> list | None:
    """The distinct symbols whose product `expr` is (`s0*s1`), else None."""
    import sympy

    if isinstance(expr, sympy.Mul) and all(isinstance(a, sympy.Symbol) for a in expr.args) and \
            len(set(expr.args)) == len(expr.args):
        return list(expr.args)
    return None


def within_relations(probes: list[list[int]], relations: Relations, fixed: set) -> list[list[int]]:
    """`probes` repaired to satisfy `relations` (NOTE [Probes within the frontend's relations]), plus probes
    of the orders the repairs lost where the relations allow them; a probe that cannot be repaired is kept
    as it is (generating there fails as before)."""
    if not relations:
        return probes
    out = []
    for probe in probes:
        repaired = relations.repaired(probe, fixed)
        out.append(probe if repaired is None else repaired)
    added = []
    for probe in _lost_orders(out[1:], relations, fixed):
        if probe not in out and probe not in added:
            added.append(probe)
    return out + added


def _lost_orders(probes: list[list[int]], relations: Relations, fixed: set) -> list[list[int]]:
    """Probes (from `probes` with two values exchanged, repaired) with an order of two symbols none of
    `probes` has, where such a probe satisfies the relations."""
    added: list[list[int]] = []
    n = len(probes[0]) if probes else 0
    free = [k for k in range(n) if k not in fixed]
    for i, j in itertools.combinations(free, 2):
        orders = {(p[i] > p[j]) for p in probes + added if p[i] != p[j]}
        if not orders:  # equal at every probe (a copied product): a probe where they differ, if any
            added += _told_apart(probes, relations, i, j, free)
            continue
        if len(orders) != 1:
            continue
        for probe in probes:
            swapped = list(probe)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            repaired = relations.repaired(swapped, fixed | {i, j})
            if repaired is not None:
                added.append(repaired)
                break
    return added


def _told_apart(probes: list[list[int]], relations: Relations, i: int, j: int, free: list) -> list[list[int]]:
    """One probe from `probes` with j's value exchanged with a third symbol's, where i and j differ and the
    relations hold (`Eq(s0*s1, s2*s3)` at (a, b, b, a)); none if there is none."""
    for probe in probes:
        for k in free:
            if k in (i, j):
                continue
            swapped = list(probe)
            swapped[j], swapped[k] = swapped[k], swapped[j]
            swapped = relations.defined(swapped)
            if swapped[i] != swapped[j] and relations.hold(swapped):
                return [swapped]
    return []
