"""The size-generic module's text: integer literals of sources generated at probe sizes, fitted as
expressions over the symbols (NOTE [Size-generic modules], dynamic.py)."""
from __future__ import annotations

import re

from . import size_exprs


class NotGeneric(Exception):
    """The graph cannot be served by one size-generic module (the reason is the message)."""


class _SkeletonDiffers(NotGeneric):
    """The kernels generated at the probes differ in structure (NOTE [Recombination off at probes])."""


# integer literals, and integer-valued float literals (`* 6.0` for `* s0`, `/ 12.0` for a mean): group 2
# is ".0" for the floats; a minus sign written before the digits (`[0, -32]`, `(-5)`) belongs to the literal
# (NOTE [Literals that change sign]); digits after an exponent are not literals of their own
_INT = re.compile(r"(?<![\w.+\-])(-?\d+)(\.0)?(?![\w.])")
_CONSTANT = re.compile(r"-?\d+")

# NOTE [Literals that change sign]: a size the graph computes may be negative at some sizes and positive at
# others, with the same meaning for both: F.pad(x, (0, y.size(-1) - x.size(-1))) pads x to y's width or crops
# it (constant_pad_nd, an extern, takes either sign), and the probes of primes come in several orders, so the
# pad is 32 at one probe and -32 at another. Digits after a sign were not literals, so the wrappers differed
# beyond their literals and the graph compiled per shape; the sign is now part of the literal, which is fitted
# as any other (`s2 - s1`, a size expression of the graph).


def _split(source: str) -> tuple[str, str]:
    head, sep, call = source.partition("\ndef call(")
    if not sep:
        raise NotGeneric("the generated module has no call function")
    return head, sep + call


def _fit(values: list[int], probes: list[list[int]], names: list[str], exprs=None) -> str | None:
    """A Python expression `c * s0**e0 * ...` (c a fraction with denominator up to 16: `s1 // 2` after
    view(s0, 2, -1)) over `names` giving `values[k]` at `probes[k]`, else one of the graph's size
    expressions `exprs` (NOTE [Literals fitted to the graph's size expressions]), or None."""
    if len(set(values)) == 1:
        return str(values[0])
    monomial = _fit_monomial(values, probes, names)
    if monomial is None and exprs:
        return exprs.fit(values, probes)
    return monomial


def _fit_monomial(values: list[int], probes: list[list[int]], names: list[str]) -> str | None:
    # a module repeats its sizes in many literals (3**8 exponent tuples each with 8 symbols): cached
    fit = size_exprs.monomial_of(tuple(values), tuple(map(tuple, probes)))
    if fit is None:
        return None
    c, exponents = fit
    terms = "*".join(n if e == 1 else f"{n}**{e}" for n, e in zip(names, exponents) if e)
    if c.denominator == 1:
        return terms if c == 1 else f"{c.numerator}*{terms}"
    return f"{c.numerator}*{terms}//{c.denominator}"


def _literals(text: str) -> tuple[list, list, list]:
    """(the text between literals, the literals' int values, whether each is a float)."""
    pieces, values, floats, last = [], [], [], 0
    for m in _INT.finditer(text):
        pieces.append(text[last:m.start()])
        values.append(int(m.group(1)))
        floats.append(m.group(2) is not None)
        last = m.end()
    pieces.append(text[last:])
    return pieces, values, floats


def _same_skeleton(texts: list[str]) -> bool:
    return len({_INT.sub(lambda m: "#" + (m.group(2) or ""), t) for t in texts}) == 1


def _fitted(texts: list[str], probes: list, names: list[str], where: str,
            exprs=None) -> tuple[list[str], list[tuple]]:
    """The pieces of texts[0] between its integer literals, and for each literal (expression over the symbols
    fitted at the probes, whether it was a float); raises NotGeneric for a literal no product of symbols fits."""
    literals = [_literals(t)[1] for t in texts]
    # NOTE [Literal counts differ between probes]: texts that differ in structure (checked by the callers'
    # `_same_skeleton`, but `_has_fraction` fits before that check) are a skeleton difference, not an IndexError
    if len({len(lits) for lits in literals}) > 1:
        raise _SkeletonDiffers(f"{where} generated at different sizes has different numbers of integer literals")
    pieces, _, floats = _literals(texts[0])
    fits = []
    for position in range(len(pieces) - 1):
        values = [lits[position] for lits in literals]
        expr = _fit(values, probes, names, exprs)
        if expr is None:
            raise NotGeneric(f"a size in {where} is neither a product of symbols nor a size expression of the "
                             f"graph ({values} at the probes {probes})")
        fits.append((expr, floats[position]))
    return pieces, fits


def _generic_call(calls: list[str], probes: list[list[int]], names: list[str], bind_lines: list[str],
                  exprs=None) -> str:
    if not _same_skeleton(calls):
        raise NotGeneric("the wrappers generated at different sizes differ beyond their integer literals "
                         "(fusion or extern choices depend on sizes)")
    pieces, fits = _fitted(calls, probes, names, "the wrapper", exprs)
    out = [pieces[0]]
    for (expr, is_float), piece in zip(fits, pieces[1:]):
        if _CONSTANT.fullmatch(expr):
            out.append(expr + (".0" if is_float else ""))
        else:
            out.append(f"float({expr})" if is_float else f"({expr})")
        out.append(piece)
    text = "".join(out)
    header, _, body = text.partition("):\n")
    return f"{header.replace('def call(', 'def call(_sizes, ', 1)}):\n" + "".join(bind_lines) + body


_KERNEL_DEF = re.compile(r"\ndef (\w+)\(")


def _generic_kernels(heads: list[str], probes: list, names: list[str], exprs=None) -> tuple[str, dict]:
    """The kernels' text with every size-dependent integer literal replaced by a kernel argument; returns
    (text, {kernel: {expression: argument name}})."""
    if not _same_skeleton(heads):
        raise _SkeletonDiffers("a kernel body depends on a symbolic size beyond integer literals (a float that is "
                         "not a whole number, or a different kernel structure)")
    pieces, fits = _fitted(heads, probes, names, "a kernel", exprs)
    out = [pieces[0]]
    kernel_args: dict = {}
    for (expr, is_float), piece in zip(fits, pieces[1:]):
        if _CONSTANT.fullmatch(expr):
            out.append(expr + (".0" if is_float else ""))
        else:
            kernel = _KERNEL_DEF.findall("".join(out))[-1]
            args = kernel_args.setdefault(kernel, {})
            arg = args.setdefault(expr, f"ks{len(args)}")
            out.append(f"{arg}.to(tl.float32)" if is_float else arg)
        out.append(piece)
    text = "".join(out)
    for kernel, args in kernel_args.items():
        text = re.sub(rf"(\ndef {kernel}\([^)]*?)(, XBLOCK: tl\.constexpr)",
                      lambda m: m.group(1) + "".join(f", {a}" for a in args.values()) + m.group(2), text, count=1)
    return text, kernel_args


def _with_kernel_args(call: str, kernel_args: dict) -> str:
    for kernel, args in kernel_args.items():
        values = "".join(f", ({expr})" for expr in args)
        call = re.sub(rf"(\n\s*{kernel}\[.*?)(, XBLOCK=)", lambda m: m.group(1) + values + m.group(2), call, count=1)
    return call


def _with_params(kernel, args: dict):
    """The KernelSource with its size arguments in its signature (runtime.KERNELS, offline compiles)."""
    import dataclasses

    if not args:
        return kernel
    signature = {}
    for key, value in kernel.signature.items():
        if key == "XBLOCK":
            signature.update({a: "i64" for a in args.values()})
        signature[key] = value
    return dataclasses.replace(kernel, signature=signature)


def _has_fraction(heads: list[str], calls: list[str], probes: list, names: list[str]) -> bool:
    try:
        fits = _fitted(heads, probes, names, "a kernel")[1] + _fitted(calls, probes, names, "the wrapper")[1]
    except NotGeneric:
        return True  # a literal no product fits: the graph's size expressions may, checked at odd probes too
    return any("//" in expr for expr, _ in fits)


def _generic_source(runs: list, probes: list, names: list[str], exprs, probe_at) -> tuple[str, dict]:
    """The size-generic module's source and its kernels' size arguments, fitted over `runs` at `probes`;
    a literal several size expressions fit gets a probe where they differ (`probe_at`), then is fitted again."""
    for _ in range(6):  # NOTE [Literals fitted to the graph's size expressions]
        heads, calls = zip(*(_split(r[0]) for r in runs))
        try:
            head, kernel_args = _generic_kernels(list(heads), probes, names, exprs)
            bind_lines = [f"    {', '.join(names)}, = _sizes\n"]
            call = _with_kernel_args(_generic_call(list(calls), probes, names, bind_lines, exprs), kernel_args)
            return head + call, kernel_args
        except size_exprs.Ambiguous as ambiguous:
            probed = probe_at(ambiguous.points)  # None: every such point excluded (the graph cannot take it)
            if probed is not None:
                runs, probes = [*runs, probed[1]], [*probes, probed[0]]
    raise NotGeneric("a literal fits several size expressions of the graph at every probe")
