"""Sources: where a value read while tracing lives, so that it can be guarded and reloaded.

A Source has two jobs only (DESIGN.md, section 4):
- `expr(names)`: the Python expression that names it inside a generated guard function, whose
  parameters are the frame's arguments and whose globals hold the objects in `names` (a `NameTable`
  that hands out deterministic names such as `___g0` for objects the expression needs);
- `reload(cg)`: the bytecode that pushes the value inside the transformed function.

Sources are frozen dataclasses and hashable: two reads of the same place give equal sources, which is
how graph inputs are deduplicated. Objects referenced by a source (a globals dict, a closure cell) are
held by identity in `Ref`, compared by identity.
"""
from __future__ import annotations

import dataclasses
import keyword
from typing import Any


@dataclasses.dataclass(frozen=True, eq=False)
class Ref:
    """An object a source refers to, compared and hashed by identity."""

    obj: Any
    label: str

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ref) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


class NameTable:
    """Deterministic names for objects used by generated code (guards or transformed functions)."""

    def __init__(self, prefix: str = "___c") -> None:
        self.prefix = prefix
        self.by_id: dict[int, str] = {}
        self.namespace: dict[str, Any] = {}

    def name_for(self, obj: Any, hint: str = "") -> str:
        key = id(obj)
        if key not in self.by_id:
            name = f"{self.prefix}{len(self.by_id)}"
            if hint and hint.isidentifier():
                name = f"{name}_{hint}"
            self.by_id[key] = name
            self.namespace[name] = obj
        return self.by_id[key]


class Source:
    def expr(self, names: NameTable) -> str:
        raise NotImplementedError

    def reload(self, cg) -> None:
        raise NotImplementedError

    def root_local(self) -> str | None:
        """The frame local this source starts from, if any."""
        return None

    def describe(self) -> str:
        """A short, user-readable name, e.g. L['x'].weight."""
        return self.expr(_DescribeNames())


class _DescribeNames(NameTable):
    def name_for(self, obj: Any, hint: str = "") -> str:
        return hint or type(obj).__name__


# NOTE [Locals that are not identifiers]: a frame may have locals whose names are not Python identifiers:
# the implicit `.0` argument (the iterator) of every comprehension and generator expression frame (3.11
# `<listcomp>`, `<dictcomp>`, `<setcomp>`, `<genexpr>`; 3.12+ still makes `<genexpr>` a frame, PEP 709), and
# pytest's assertion rewriting adds `@py_assert1`. Generated *bytecode* names them as they are (LOAD_FAST
# takes any string), but a guard function is Python source whose parameters are the frame's: there such a
# local is renamed to an identifier by `safe_local`, in the parameter list (FunctionShape.params_source)
# and in every guard expression that reads it (LocalSource.expr), so both always agree; resume code renames
# it in its instructions and parameters (resume.make_resume_code), so a resume of a resume renames nothing
# more. The new names start with `___local_`, which no frame local or namespace name (NameTable) uses.
# Without this a comprehension frame reaching the hook (called at a graph break, or a resume function of
# one) raised `SyntaxError: def ___guard__listcomp__4(.0):` into the user's program.
def safe_local(name: str) -> str:
    """`name` as an identifier for generated source (NOTE [Locals that are not identifiers])."""
    if name.isidentifier() and not keyword.iskeyword(name):
        return name
    return "___local_" + "".join(c if c.isalnum() or c == "_" else "_" for c in name)


@dataclasses.dataclass(frozen=True)
class LocalSource(Source):
    name: str

    def expr(self, names: NameTable) -> str:
        return safe_local(self.name)  # NOTE [Locals that are not identifiers]

    def reload(self, cg) -> None:
        cg.load_fast(self.name)

    def root_local(self) -> str | None:
        return self.name

    def describe(self) -> str:
        return f"L[{self.name!r}]"


@dataclasses.dataclass(frozen=True)
class GlobalSource(Source):
    """`globals_ref.obj[name]`: a module global of the (possibly inlined) function that read it."""

    globals_ref: Ref
    name: str

    def expr(self, names: NameTable) -> str:
        return f"{names.name_for(self.globals_ref.obj, 'G')}[{self.name!r}]"

    def reload(self, cg) -> None:
        cg.load_const(self.globals_ref.obj)
        cg.load_const(self.name)
        cg.subscr()

    def describe(self) -> str:
        return f"G[{self.name!r}]"


@dataclasses.dataclass(frozen=True)
class ClosureSource(Source):
    """The contents of a closure cell of a function (root or inlined)."""

    cell_ref: Ref
    name: str

    def expr(self, names: NameTable) -> str:
        return f"{names.name_for(self.cell_ref.obj, 'cell_' + self.name)}.cell_contents"

    def reload(self, cg) -> None:
        cg.load_const(self.cell_ref.obj)
        cg.load_attr("cell_contents")

    def describe(self) -> str:
        return f"closure[{self.name!r}]"


# NOTE [Raw attribute reads]: on an object whose class defines `__getattribute__` in Python, `o.name` runs
# that function (NOTE [Custom __getattribute__]): the trace inlines it, and the reads it makes through
# `object.__getattribute__(o, key)` (or `super().__getattribute__`) are the default lookup, which is what
# the trace relies on. Guards and reloads of those values must read the same way: written as `o.key`, each
# guard line and each reload ran the user's hook again (14 runs of a counting hook over 2 calls where eager
# ran 2). So such reads (the instance `__dict__` included) are raw sources, `object.__getattribute__(o, key)`,
# named `___raw_attr` in guard functions, where guards/codegen.py treats them as one link of a chain
# (shared subexpressions, guard order). `lookup.attr_source` decides which kind a read gets.
@dataclasses.dataclass(frozen=True)
class AttrSource(Source):
    """`base.attr`; `raw`: `object.__getattribute__(base, attr)`, past the class's own Python
    `__getattribute__` (NOTE [Raw attribute reads])."""

    base: Source
    attr: str
    raw: bool = False

    def expr(self, names: NameTable) -> str:
        if self.raw:
            return f"___raw_attr({self.base.expr(names)}, {self.attr!r})"
        return f"{self.base.expr(names)}.{self.attr}"

    def reload(self, cg) -> None:
        if self.raw:
            cg.push_null()
            cg.load_const(object.__getattribute__)
            self.base.reload(cg)
            cg.load_const(self.attr)
            cg.call(2)
            return
        self.base.reload(cg)
        cg.load_attr(self.attr)

    def root_local(self) -> str | None:
        return self.base.root_local()

    def describe(self) -> str:
        return f"{self.base.describe()}.{self.attr}"


# NOTE [Keys by their source]: a dict keyed by objects (an optimizer's `state[p]`, keyed by Parameters) has
# its entries read as `base[key]`. Naming the key object itself (a guard constant, LOAD_CONST in the
# transformed code) ties the entry to this process: no locator finds a Parameter in another one, so the entry
# was kept in memory only and every warm process traced it again. A tensor key is a graph input of the trace
# (values/builder._dict_key), read through a source of its own: the first place the trace saw that object
# (`group['params'][i]`), or else `list(d)[i]`. Such an entry is `ItemSource(base, None, key_source)`:
# `base[<key_source>]` in guards and reloads, persisted like any source. Its identity is pinned by the
# guards of the key's own source: an ALIAS guard for each other place the trace saw it, and the distinctness
# of the tensors used as keys (NOTE [Sets of tensors]); the dict's keys guard checks its length, the keys'
# types and every other key (builder._same_keys).
@dataclasses.dataclass(frozen=True)
class ItemSource(Source):
    """`base[key]` for a constant key (int, str, ...); `base[<key_source>]` for a key object read through a
    source of its own, with `key` None (NOTE [Keys by their source])."""

    base: Source
    key: Any
    key_source: Source | None = None

    def expr(self, names: NameTable) -> str:
        if self.key_source is not None:
            return f"{self.base.expr(names)}[{self.key_source.expr(names)}]"
        literal = type(self.key) in (str, int, bool, bytes, type(None)) or (
            type(self.key) is tuple and all(type(k) in (str, int, bool, bytes, type(None)) for k in self.key))
        return f"{self.base.expr(names)}[{repr(self.key) if literal else names.name_for(self.key, 'key')}]"

    def reload(self, cg) -> None:
        self.base.reload(cg)
        if self.key_source is not None:
            self.key_source.reload(cg)
        else:
            cg.load_const(self.key)
        cg.subscr()

    def root_local(self) -> str | None:
        return self.base.root_local()

    def describe(self) -> str:
        if self.key_source is not None:
            return f"{self.base.describe()}[{self.key_source.describe()}]"
        return f"{self.base.describe()}[{self.key!r}]"


def _is_tensor(obj: Any) -> bool:
    return any(c.__module__ == "torch" and c.__name__ == "Tensor" for c in type(obj).__mro__)


@dataclasses.dataclass(frozen=True)
class DictSlotSource(Source):
    """An entry of one of nn.Module's own dicts: `base.<slot>[key]` (slot: _modules, _parameters, _buffers).

    NOTE [Module slots]: nn.Module keeps children, parameters and buffers out of `__dict__`, behind a
    slow Python `__getattr__`. Sources read the slot dicts directly: faster to reload and to guard,
    and a replaced parameter or child is seen on the next call.
    """

    base: Source
    slot: str
    key: str

    def expr(self, names: NameTable) -> str:
        return f"{self.base.expr(names)}.{self.slot}[{self.key!r}]"

    def reload(self, cg) -> None:
        self.base.reload(cg)
        cg.load_attr(self.slot)
        cg.load_const(self.key)
        cg.subscr()

    def root_local(self) -> str | None:
        return self.base.root_local()

    def describe(self) -> str:
        return f"{self.base.describe()}.{self.key}"


@dataclasses.dataclass(frozen=True)
class CallSource(Source):
    """`fn(base)` for a pure library function of one argument, e.g. `dict.copy(registry)`: the raw
    contents of a dict subclass instance, read past its overridden methods (NOTE [Dict subclasses])."""

    fn_ref: Ref
    base: Source

    def expr(self, names: NameTable) -> str:
        return f"{names.name_for(self.fn_ref.obj, self.fn_ref.label)}({self.base.expr(names)})"

    def reload(self, cg) -> None:
        if getattr(self.fn_ref.obj, "once_per_call", False) and hasattr(cg, "kept"):
            kept_local(cg, self, lambda: self._call(cg))  # NOTE [Referents loaded once, at entry]
        else:
            self._call(cg)

    def _call(self, cg) -> None:
        cg.push_null()
        cg.load_const(self.fn_ref.obj)
        self.base.reload(cg)
        cg.call(1)

    def root_local(self) -> str | None:
        return self.base.root_local()

    def describe(self) -> str:
        return f"{self.fn_ref.label}({self.base.describe()})"


def kept_local(cg, source: Source, load) -> None:
    """Push `source`'s value as the prologue of `cg` (a codegen.Codegen) loaded it at entry; `load()` emits its
    reload, once (NOTE [Referents loaded once, at entry] in weak_refs.py)."""
    name = cg.kept.get(source)
    if name is None:
        name = f"___kept{len(cg.kept)}"
        saved, cg.insts = cg.insts, []
        try:
            load()  # a kept source inside it is added to the prologue first
            cg.store_fast(name)
            cg.prologue += cg.insts
        finally:
            cg.insts = saved
        cg.kept[source] = name
    cg.load_fast(name)


def with_prologue(cg) -> list:
    """The instructions of `cg`, its prologue (NOTE [Referents loaded once, at entry]) first."""
    return [*getattr(cg, "prologue", ()), *cg.insts]


@dataclasses.dataclass(frozen=True)
class ObjectSource(Source):
    """A fixed object named directly (a class whose `__dict__` a guard reads, a library module): the
    guards that make it the right object are elsewhere (e.g. the TYPE_MATCH of an instance)."""

    ref: Ref

    def expr(self, names: NameTable) -> str:
        return names.name_for(self.ref.obj, self.ref.label)

    def reload(self, cg) -> None:
        cg.load_const(self.ref.obj)

    def describe(self) -> str:
        return self.ref.label
