"""FRAMEJIT_DUMP=<dir>: every compiled entry written as readable files with deterministic names.

`dump_entry(...)` is called once per compiled entry (by capture/convert.py). When `config.dump_dir` is
set it writes

    <dump_dir>/<function name>_<first line>/entry_<n>/
        guards.py                 the generated guard function
        original_bytecode.txt     dis of the user's code object
        transformed_bytecode.txt  dis of the transformed code object
        transformed.py            the transformed code as readable pseudo-source (see PseudoSource)
        graph_<i>.py              each captured graph as Python (gm.code), with a header
        graph_<i>.txt             each captured graph as a table (opcode, name, target, args, kwargs)
        backend_<i>.txt           what the backend made of graph i

Invariants:
- Deterministic: the same function dumped twice gives byte-identical files. Nothing written depends on
  memory addresses, ids, time or process-wide counters: `0x...` addresses are stripped from reprs and
  the process-wide counter in generated guard-function names is replaced by the entry number
  (NOTE [Deterministic dumps]).
- Never raises: an I/O error (or any other failure) is logged on the `eager_fallback` artifact and the
  compiled program goes on. With `config.dump_dir` None, `dump_entry` does nothing.
- Files left in an entry directory from an earlier dump that this dump did not write are removed, so a
  directory always describes one entry.

Main types: `PseudoSource` (renders straight-line bytecode as Python statements, or says it cannot).
"""
from __future__ import annotations

import dis
import inspect
import io
import os
import re
import types
from typing import Any, Sequence

import torch

from . import config, logs
from .capture import emit, normalize

# NOTE [Deterministic dumps]: reprs of functions, bound methods and plain objects carry memory
# addresses ("<function f at 0x7f...>"); they are stripped. Hex numbers shorter than 6 digits are kept:
# they are more likely literals from the user's source than addresses.
_AT_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]{6,}")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_]+")
_DEFINED_NAME = re.compile(r"^def (___\w+?)_(\d+)\(", re.MULTILINE)


def strip_addresses(text: str) -> str:
    """`<function f at 0x7f3a...>` -> `<function f>`; any other long hex number -> `0x...`."""
    return _ADDRESS.sub("0x...", _AT_ADDRESS.sub("", text))


def sanitize(name: str) -> str:
    """A function's (qualified) name as a directory-name fragment: `A.<locals>.f` -> `A_locals_f`."""
    return _UNSAFE_NAME.sub("_", name).strip("_") or "anonymous"


def entry_dir(dump_dir: str, code_name: str, firstlineno: int, entry_index: int) -> str:
    return os.path.join(dump_dir, f"{sanitize(code_name)}_{firstlineno}", f"entry_{entry_index}")


def dump_entry(code_name: str, filename: str, firstlineno: int, entry_index: int, guard_source: str,
               transformed_code: types.CodeType, graphs: Sequence[torch.fx.GraphModule],
               backend_outputs: Sequence[str], original_code: types.CodeType) -> str | None:
    """Write one compiled entry's artifacts; returns the entry directory, or None (disabled or failed)."""
    dump_dir = config.dump_dir
    if not dump_dir:
        return None
    directory = entry_dir(dump_dir, code_name, firstlineno, entry_index)
    try:
        header = f"# framejit dump: {code_name} ({filename}:{firstlineno}), entry {entry_index}\n"
        files = _render_files(header, entry_index, guard_source, transformed_code, graphs, backend_outputs,
                              original_code)
        _write_all(directory, files)
    except Exception as e:  # never the user's crash: the dump is a debugging aid
        logs.log("eager_fallback", "FRAMEJIT_DUMP: could not write %s (%s: %s); compilation goes on",
                 directory, type(e).__name__, e)
        return None
    return directory


def _render_files(header: str, entry_index: int, guard_source: str, transformed_code: types.CodeType,
                  graphs: Sequence[torch.fx.GraphModule], backend_outputs: Sequence[str],
                  original_code: types.CodeType) -> dict[str, str]:
    files = {
        "guards.py": header + "# the guard function (generated names renumbered by entry)\n"
                     + normalize_guard_source(guard_source, entry_index),
        "original_bytecode.txt": header + disassemble(original_code),
        "transformed_bytecode.txt": header + disassemble(transformed_code),
        "transformed.py": header + PseudoSource(transformed_code, graphs).render(),
    }
    for i, gm in enumerate(graphs):
        files[f"graph_{i}.py"] = (f"{header}# graph {i}: {_count_ops(gm)} ops, "
                                  f"{len(_placeholders(gm))} inputs\n{strip_addresses(gm.code.strip())}\n")
        files[f"graph_{i}.txt"] = f"{header}# graph {i}\n{graph_table(gm)}"
    for i, text in enumerate(backend_outputs):
        files[f"backend_{i}.txt"] = f"{header}# backend output for graph {i}\n{strip_addresses(str(text))}\n"
    return files


def _write_all(directory: str, files: dict[str, str]) -> None:
    os.makedirs(directory, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name not in files and os.path.isfile(path):
            os.remove(path)


def normalize_guard_source(source: str, entry_index: int) -> str:
    """Replace the process-wide counter in generated function names (`___guard_f_7`, `___bind_7`)."""
    for name, _number in _DEFINED_NAME.findall(source):
        source = re.sub(rf"\b{re.escape(name)}_\d+\b", f"{name}_{entry_index}", source)
    text = strip_addresses(source)
    return text if text.endswith("\n") else text + "\n"


def disassemble(code: types.CodeType) -> str:
    """`dis.dis(code)` with the instruction offsets on every CPython (3.13 leaves them out by default):
    graph-break reasons, resume functions (`<resume at 18>`) and tracebacks name offsets."""
    out = io.StringIO()
    dis.dis(code, file=out, **normalize.DIS_WITH_OFFSETS)
    return strip_addresses(out.getvalue())


def _placeholders(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "placeholder"]


def _count_ops(gm: torch.fx.GraphModule) -> int:
    return sum(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes)


def _target_text(node: torch.fx.Node) -> str:
    target = node.target
    if isinstance(target, str):
        return target
    module = getattr(target, "__module__", None)
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if name:
        return f"{module}.{name}" if module and module not in ("builtins", "_operator") else name
    return strip_addresses(str(target))


def graph_table(gm: torch.fx.GraphModule) -> str:
    """The graph as a fixed-width table (like `Graph.print_tabular`, without needing `tabulate`)."""
    header = ("opcode", "name", "target", "args", "kwargs")
    rows = [header] + [(n.op, n.name, _target_text(n), strip_addresses(str(n.args)), strip_addresses(str(n.kwargs)))
                       for n in gm.graph.nodes]
    widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


# ---- pseudo-source ------------------------------------------------------------------------------------
_NULL = object()  # the NULL that PUSH_NULL / LOAD_GLOBAL / LOAD_METHOD put below a callable
_LITERAL_TYPES = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis))
_BINARY_NAMES = {"+": "add", "-": "sub", "*": "mul", "/": "truediv", "//": "floordiv", "%": "mod",
                 "**": "pow", "@": "matmul", "<<": "lshift", ">>": "rshift", "&": "and", "|": "or", "^": "xor"}
_UNARY = {"UNARY_NEGATIVE": "-", "UNARY_INVERT": "~", "UNARY_NOT": "not ", "UNARY_POSITIVE": "+"}
_IGNORED = {"RESUME", "NOP", "PRECALL", "CACHE", "EXTENDED_ARG", "COPY_FREE_VARS", "MAKE_CELL"}
_NO_CONST = object()


class CannotRender(Exception):
    """The code uses an instruction the pseudo-source printer does not model."""


class _Expr:
    """A rendered expression on the abstract stack. `atom`: safe before `.attr`, `[i]` or `(...)`.
    `pure`: a literal or named constant, which no later statement can change; `const`: a literal's
    value (else _NO_CONST); `slice_parts`: the parts of a BUILD_SLICE, to print `x[a:b]`."""

    def __init__(self, text: str, atom: bool = True, pure: bool = False, const: Any = _NO_CONST,
                 slice_parts: list["_Expr"] | None = None) -> None:
        self.text, self.atom, self.pure, self.const = text, atom, pure, const
        self.slice_parts = slice_parts

    def wrapped(self) -> str:
        return self.text if self.atom else f"({self.text})"


class PseudoSource:
    """Renders the straight-line bytecode framejit generates as Python statements.

    Handles loads (LOAD_CONST/FAST/GLOBAL/DEREF/ATTR/METHOD), BINARY_SUBSCR and slices, calls (with
    KW_NAMES), BUILD_TUPLE/LIST/MAP/SET/CONST_KEY_MAP/SLICE, UNPACK_SEQUENCE, unary, binary and comparison
    operators, COPY/SWAP, stores (local, global, attribute, item), POP_TOP and returns. Constants that are not
    literals get names (`graph_<i>` for a captured graph, else from their `__name__`), listed in a
    header. Any other instruction (jumps, exception handling, ...) makes `render()` fall back to the
    dis listing, as comments. Values left on the stack when a statement runs are first saved in
    temporaries `___t<k>`, so the rendered statements keep the bytecode's evaluation order.
    """

    def __init__(self, code: types.CodeType, graphs: Sequence[torch.fx.GraphModule] = ()) -> None:
        self.code = code
        self.graphs = list(graphs)
        self.stack: list[Any] = []
        self.lines: list[str] = []
        self.kw_names: tuple[str, ...] = ()
        self.const_names: dict[int, tuple[str, Any]] = {}  # id(obj) -> (name, obj), in order of first use
        self.temps = 0

    def render(self) -> str:
        try:
            body = self._body()
        except CannotRender as e:
            listing = "\n".join(f"#   {line}" if line else "#" for line in disassemble(self.code).splitlines())
            return (f"# this code cannot be shown as Python ({e}); its disassembly:\n"
                    f"{listing}\n")
        head = [f"# {name} = {_describe_constant(obj, self.graphs)}" for name, obj in self.const_names.values()]
        head = (["# constants that are not literals:"] + head) if head else []
        signature = f"def {self.code.co_name}({render_params(self.code)}):"
        return "\n".join(head + [signature] + [f"    {line}" for line in body]) + "\n"

    def _body(self) -> list[str]:
        for inst in dis.get_instructions(self.code):
            if inst.opname in _IGNORED:
                continue
            handler = getattr(self, f"_op_{inst.opname}", None)
            if handler is None:
                raise CannotRender(f"instruction {inst.opname} at offset {inst.offset}")
            handler(inst)
        if self.stack:
            raise CannotRender(f"{len(self.stack)} values left on the stack")
        return self.lines or ["pass"]

    # -- helpers ------------------------------------------------------------------------------------
    def push(self, expr: Any) -> None:
        self.stack.append(expr)

    def pop(self) -> _Expr:
        if not self.stack:
            raise CannotRender("stack underflow")
        value = self.stack.pop()
        if value is _NULL:
            raise CannotRender("NULL used as a value")
        return value

    def popn(self, n: int) -> list[_Expr]:
        values = [self.pop() for _ in range(n)]
        return values[::-1]

    def statement(self, text: str) -> None:
        """Emit a statement after saving stacked values it could otherwise reorder or change."""
        self.spill()
        self.lines.append(text)

    def spill(self) -> None:
        """Save every stacked value that is not a constant in a temporary, bottom first (= evaluation order)."""
        for i, value in enumerate(self.stack):
            if value is not _NULL and not value.pure:
                name = f"___t{self.temps}"
                self.temps += 1
                self.lines.append(f"{name} = {value.text}")
                self.stack[i] = _Expr(name, pure=True)  # temporaries are assigned once

    def constant(self, value: Any) -> _Expr:
        if _is_literal(value):
            text = repr(value)
            return _Expr(text, atom=not text.startswith("-"), pure=True, const=value)
        known = self.const_names.get(id(value))
        if known is None:
            known = (self._const_name(value), value)
            self.const_names[id(value)] = known
        return _Expr(known[0], pure=True)

    def _const_name(self, value: Any) -> str:
        index = _graph_index(value, self.graphs)
        if index is not None:
            base = f"graph_{index}"
        else:
            name = _callable_name(value)
            base = f"___{sanitize(name)}" if name else "___const"
        taken = {n for n, _ in self.const_names.values()}
        candidate, k = base, 1
        while candidate in taken:
            candidate, k = f"{base}_{k}", k + 1
        return candidate

    # -- loads --------------------------------------------------------------------------------------
    def _op_LOAD_CONST(self, inst) -> None:
        self.push(self.constant(inst.argval))

    def _op_LOAD_FAST(self, inst) -> None:
        self.push(_Expr(inst.argval))

    _op_LOAD_FAST_CHECK = _op_LOAD_FAST
    _op_LOAD_DEREF = _op_LOAD_FAST
    _op_LOAD_CLOSURE = _op_LOAD_FAST

    def _op_LOAD_GLOBAL(self, inst) -> None:
        self._push_loaded(_Expr(inst.argval), inst)

    def _push_loaded(self, value: _Expr, inst) -> None:
        """The value a load pushed, with the NULL of a call beside it where the load pushes one (LOAD_GLOBAL's
        and LOAD_ATTR's low bit, LOAD_METHOD), below it or above it as the running CPython does
        (NOTE [Call layouts] in capture/emit.py)."""
        null = normalize.raw_load_pushes_null(inst.opname, inst.arg)
        if null and not emit.NULL_AFTER_CALLABLE:
            self.push(_NULL)
        self.push(value)
        if null and emit.NULL_AFTER_CALLABLE:
            self.push(_NULL)

    def _op_LOAD_FAST_LOAD_FAST(self, inst) -> None:
        for name in inst.argval:
            self.push(_Expr(name))

    def _op_STORE_FAST_STORE_FAST(self, inst) -> None:
        for name in inst.argval:
            self.statement(f"{name} = {self.pop().text}")

    def _op_STORE_FAST_LOAD_FAST(self, inst) -> None:
        store, load = inst.argval
        self.statement(f"{store} = {self.pop().text}")
        self.push(_Expr(load))

    def _op_TO_BOOL(self, inst) -> None:
        self.push(_Expr(f"bool({self.pop().text})"))

    def _op_PUSH_NULL(self, inst) -> None:
        self.push(_NULL)

    def _op_LOAD_ATTR(self, inst) -> None:
        obj = self.pop()
        self._push_loaded(_Expr(f"{obj.wrapped()}.{inst.argval}"), inst)

    _op_LOAD_METHOD = _op_LOAD_ATTR

    def _op_BINARY_SUBSCR(self, inst) -> None:
        key = self.pop()
        obj = self.pop()
        self.push(_Expr(f"{obj.wrapped()}[{_subscript_text(key)}]"))

    def _op_BINARY_SLICE(self, inst) -> None:
        stop, start = self.pop(), self.pop()
        obj = self.pop()
        self.push(_Expr(f"{obj.wrapped()}[{_slice_part(start)}:{_slice_part(stop)}]"))

    # -- calls and builds ---------------------------------------------------------------------------
    def _op_KW_NAMES(self, inst) -> None:
        self.kw_names = tuple(self.code.co_consts[inst.arg])

    def _op_CALL_KW(self, inst) -> None:
        names = self.pop()
        if not isinstance(names.const, tuple):
            raise CannotRender("CALL_KW without a literal tuple of names")
        self.kw_names = names.const
        self._op_CALL(inst)

    def _op_CALL(self, inst) -> None:
        args = self.popn(inst.arg)
        if len(self.stack) < 2:
            raise CannotRender("CALL without a callable")
        first, second = self.stack.pop(-2), self.stack.pop()
        # [NULL, f] (3.11, 3.12), [f, NULL] (3.13) or [f, first argument] (NOTE [Call layouts] in capture/emit.py)
        top = second if first is _NULL else first
        if first is not _NULL and second is not _NULL:
            args = [second, *args]
        if not isinstance(top, _Expr):
            raise CannotRender("CALL without a callable")
        kw = self.kw_names
        self.kw_names = ()
        positional = [a.text for a in args[:len(args) - len(kw)]]
        keywords = [f"{k}={a.text}" for k, a in zip(kw, args[len(args) - len(kw):])]
        self.push(_Expr(f"{top.wrapped()}({', '.join(positional + keywords)})"))

    def _op_BUILD_TUPLE(self, inst) -> None:
        items = [x.text for x in self.popn(inst.arg)]
        self.push(_Expr(f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"))

    def _op_BUILD_LIST(self, inst) -> None:
        self.push(_Expr(f"[{', '.join(x.text for x in self.popn(inst.arg))}]"))

    def _op_BUILD_SET(self, inst) -> None:
        items = [x.text for x in self.popn(inst.arg)]
        self.push(_Expr(f"{{{', '.join(items)}}}" if items else "set()"))

    def _op_BUILD_MAP(self, inst) -> None:
        flat = self.popn(2 * inst.arg)
        pairs = [f"{k.text}: {v.text}" for k, v in zip(flat[::2], flat[1::2])]
        self.push(_Expr(f"{{{', '.join(pairs)}}}"))

    def _op_BUILD_CONST_KEY_MAP(self, inst) -> None:
        keys = self.pop()
        if not isinstance(keys.const, tuple):
            raise CannotRender("BUILD_CONST_KEY_MAP without a literal tuple of keys")
        values = self.popn(inst.arg)
        pairs = [f"{k!r}: {v.text}" for k, v in zip(keys.const, values)]
        self.push(_Expr(f"{{{', '.join(pairs)}}}"))

    def _op_BUILD_SLICE(self, inst) -> None:
        parts = self.popn(inst.arg)
        self.push(_Expr(f"slice({', '.join(p.text for p in parts)})", slice_parts=parts))

    def _op_COPY(self, inst) -> None:
        self.spill()  # a copied expression must not be evaluated twice
        value = self.stack[-inst.arg]
        if value is _NULL:
            raise CannotRender("COPY of a NULL")
        self.push(value)

    def _op_SWAP(self, inst) -> None:
        self.spill()  # swapped expressions must keep their evaluation order
        self.stack[-1], self.stack[-inst.arg] = self.stack[-inst.arg], self.stack[-1]

    def _op_UNPACK_SEQUENCE(self, inst) -> None:
        value = self.pop()
        name = f"___t{self.temps}"
        self.temps += 1
        self.statement(f"{name} = {value.text}")
        for i in reversed(range(inst.arg)):
            self.push(_Expr(f"{name}[{i}]", pure=True))  # ___t<k> is never reassigned

    # -- operators ----------------------------------------------------------------------------------
    def _op_BINARY_OP(self, inst) -> None:
        rhs, lhs = self.pop(), self.pop()
        symbol = inst.argrepr
        if symbol.endswith("=") and symbol[:-1] in _BINARY_NAMES:
            self.push(_Expr(f"operator.i{_BINARY_NAMES[symbol[:-1]]}({lhs.text}, {rhs.text})"))
        else:
            self.push(_Expr(f"{lhs.wrapped()} {symbol} {rhs.wrapped()}", atom=False))

    def _op_COMPARE_OP(self, inst) -> None:
        rhs, lhs = self.pop(), self.pop()
        self.push(_Expr(f"{lhs.wrapped()} {inst.argrepr.split()[0]} {rhs.wrapped()}", atom=False))

    def _op_IS_OP(self, inst) -> None:
        rhs, lhs = self.pop(), self.pop()
        self.push(_Expr(f"{lhs.wrapped()} {'is not' if inst.arg else 'is'} {rhs.wrapped()}", atom=False))

    def _op_CONTAINS_OP(self, inst) -> None:
        rhs, lhs = self.pop(), self.pop()
        self.push(_Expr(f"{lhs.wrapped()} {'not in' if inst.arg else 'in'} {rhs.wrapped()}", atom=False))

    def _unary(self, inst) -> None:
        self.push(_Expr(f"{_UNARY[inst.opname]}{self.pop().wrapped()}", atom=False))

    _op_UNARY_NEGATIVE = _op_UNARY_INVERT = _op_UNARY_NOT = _op_UNARY_POSITIVE = _unary

    # -- stores and returns -------------------------------------------------------------------------
    def _op_STORE_FAST(self, inst) -> None:
        self.statement(f"{inst.argval} = {self.pop().text}")

    _op_STORE_DEREF = _op_STORE_FAST

    def _op_STORE_GLOBAL(self, inst) -> None:
        self.statement(f"{inst.argval} = {self.pop().text}  # global")

    def _op_DELETE_FAST(self, inst) -> None:
        self.statement(f"del {inst.argval}")

    def _op_STORE_ATTR(self, inst) -> None:
        obj, value = self.pop(), self.pop()
        self.statement(f"{obj.wrapped()}.{inst.argval} = {value.text}")

    def _op_STORE_SUBSCR(self, inst) -> None:
        key, obj, value = self.pop(), self.pop(), self.pop()
        self.statement(f"{obj.wrapped()}[{_subscript_text(key)}] = {value.text}")

    def _op_STORE_SLICE(self, inst) -> None:
        stop, start, obj, value = self.pop(), self.pop(), self.pop(), self.pop()
        self.statement(f"{obj.wrapped()}[{_slice_part(start)}:{_slice_part(stop)}] = {value.text}")

    def _op_POP_TOP(self, inst) -> None:
        self.statement(self.pop().text)

    def _op_RETURN_VALUE(self, inst) -> None:
        self.statement(f"return {self.pop().text}")

    def _op_RETURN_CONST(self, inst) -> None:
        self.statement(f"return {self.constant(inst.argval).text}")


def _is_literal(value: Any) -> bool:
    if isinstance(value, (tuple, frozenset)):
        return all(_is_literal(v) for v in value)
    return type(value) in _LITERAL_TYPES or isinstance(value, torch.dtype)


def _subscript_text(key: _Expr) -> str:
    """`x[slice(1, None)]` reads as `x[1:]`; `x[(0, 1)]` as `x[0, 1]`."""
    if key.slice_parts is not None:
        return ":".join(_slice_part(p) for p in key.slice_parts)
    if isinstance(key.const, tuple) and key.const:
        return key.text[1:-1].rstrip(",")
    return key.text


def _slice_part(value: _Expr) -> str:
    return "" if value.text == "None" else value.text


def _graph_index(value: Any, graphs: Sequence[torch.fx.GraphModule]) -> int | None:
    for candidate in (value, getattr(value, "__self__", None)):
        for i, gm in enumerate(graphs):
            if candidate is gm:
                return i
    return None


def _is_frame_hook(value: Any) -> bool:
    """A compiled function (framejit.capture.hook.FrameHook; duck-typed: of capture, dump imports only the
    version modules normalize.py and emit.py, which import only framejit.versions)."""
    return type(value).__name__ == "FrameHook" and hasattr(value, "fn")


def _hook_of(value: Any) -> Any:
    """The FrameHook that `value` is or calls: the plain function a break's tail call loads (NOTE [Arguments
    handed to resume functions] in capture/lifetimes.py) stands for its hook; else None."""
    handed = getattr(value, "__framejit_handed__", None)
    value = handed[0] if type(handed) is tuple and handed else value
    return value if _is_frame_hook(value) else None


def _callable_name(value: Any) -> str | None:
    hook = _hook_of(value)
    target = hook.fn if hook is not None else value
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    return name if isinstance(name, str) else None


def _describe_constant(obj: Any, graphs: Sequence[torch.fx.GraphModule]) -> str:
    index = _graph_index(obj, graphs)
    hook = _hook_of(obj)
    text = f"compiled {hook.fn!r}" if hook is not None else repr(obj)
    text = strip_addresses(text).replace("\n", " ")
    if len(text) > 120:
        text = text[:117] + "..."
    return f"{text}  (see graph_{index}.py)" if index is not None else text


def render_params(code: types.CodeType) -> str:
    """The parameter list of a code object as source text (defaults are not in code objects)."""
    names = list(code.co_varnames)
    params = names[:code.co_argcount]
    if code.co_posonlyargcount:
        params.insert(code.co_posonlyargcount, "/")
    rest = names[code.co_argcount:]
    kwonly, rest = rest[:code.co_kwonlyargcount], rest[code.co_kwonlyargcount:]
    if code.co_flags & inspect.CO_VARARGS:
        params.append("*" + rest.pop(0))
    elif kwonly:
        params.append("*")
    params += kwonly
    if code.co_flags & inspect.CO_VARKEYWORDS:
        params.append("**" + rest.pop(0))
    return ", ".join(params)


__all__ = ["dump_entry", "entry_dir", "PseudoSource", "graph_table", "strip_addresses", "sanitize",
           "normalize_guard_source", "disassemble", "render_params"]
