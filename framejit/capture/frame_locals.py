"""Frames that read their own locals or the frame stack run eagerly; callees that read frames break at their call.

NOTE [Frames that read their locals]: `locals()`, `vars()` and `dir()` without arguments, and `eval` /
`exec` without their own namespaces, read the calling frame's local variables. A traced frame keeps
only what it needs: a local that nothing reads later is never stored, and code after a graph break runs
in a resume function whose locals are the live values (plus its own helpers). So `len(locals())` after
`a = 1` gave 1 where eager gives 2, `eval("a + 1")` raised NameError, and `locals()` after a break listed
the resume function's names (red team 6). A root frame whose code names one of these builtins (and does
not define it as a global of its own) runs wholly eagerly, from where the trace reaches the call when every
such read is a no-argument `locals()`/`vars()`/`dir()` (NOTE [Locals readers decided where they are reached]
in deferred_readers.py); a callee inlined into a traced frame is not concerned (its call runs the builtin at
a break, in its own frame).

NOTE [Frames read through the frame stack]: `sys._getframe(n)`, `inspect.currentframe()` / `.f_back`,
`inspect.stack()` / `getouterframes`, `traceback.extract_stack()` / `print_stack()` and a frame's
`f_locals` / `f_lineno` reach the real frames. Traced, the user's frame is the transformed function or
a resume function, whose locals are only what the graph's break needs (a dead local is never stored)
and whose lines are not the user's, and an inlined callee has no frame at all: `helper()` reading
`sys._getframe(1).f_locals["y"]` raised KeyError where eager returns y (issue 11). A root frame whose
code names one of these therefore runs wholly eagerly: its own code in its own frame, every local under
its own name, callees called as Python; a frame whose trace reaches such a callee breaks at the call
that leads to it instead (NOTE [Breaks at calls that read frames]). logging's own code (`Logger.findCaller`) is left to NOTE [Callees that read their caller's
frame] in graph_break.py. Not covered: the frames above a compiled function's frame are framejit's
hook frames (no frame-evaluation hook), so `sys._getframe().f_back` in it names hook.py, not its caller
(but see NOTE [Frame readers called directly]).

NOTE [Frame readers called directly]: a function compiled by `framejit.compile(fn)` whose own code reads
the frame stack always runs wholly eagerly (above), yet it ran one FrameHook.__call__ (and on a miss one
`miss`) frame below its caller: `sys._getframe(1).f_code.co_name` answered 'miss', then '__call__' where
eager answers the caller's name, and `len(inspect.stack())` / `traceback.extract_stack()` counted 2 or 1
frames more (red team h12red3). Unless fullgraph=True (which raises at the first call), such a hook gets a
class of its own whose `__call__` is the function itself (a staticmethod: CPython's call slot calls it with
no Python frame between), so the function's frame is called by its caller's frame as in eager. The hook
keeps its attributes; explain() puts the hook's class back to report the break. A later `fn.__code__ = ...`
runs the new code eagerly too.

NOTE [Breaks at calls that read frames]: a frame whose own code reads frames runs eagerly (above), but one
whose trace reaches a *callee* that reads them (inlined at any depth) no longer does: the trace breaks at the
root frame's call that leads to it (`frame_reader_break(code, root_index)` marks the break with that index),
and the call runs in Python, directly from the transformed function, not through a frame hook (a hook's
frames would stand between the callee and the user's frame), so every frame below it is a real one. The
transformed function (or resume function) is the frame the callee sees at `sys._getframe(1)`: its code has
the user's name, file and line (NOTE [Resume function names], NOTE [The break's line]); for its `f_locals`,
`emit_user_frame_call` stores every local the user's frame has bound at that point (dead ones included, in
the order of the original code's `co_varnames`; free variables read from the closure cells) under its own
name, and takes framejit's own locals (`___graph_out`, `___pre0`, a resume function's `___stack0`, ...) out
of the frame while the call runs: they are moved onto the value stack (one tuple below the call's operands)
and stored back after it. The resume function is then called with the user's locals read back from their
slots, so a callee that writes through `f_locals` (3.13's write-through proxy) is seen as in eager.
Where this cannot be exact, the frame runs eagerly as before (`reader_break_ok` says no): the call is inside
a try or with-block (it would run in a tail function or through `run_in_blocks`, a frame of framejit's
between), the break moved to an earlier instruction (a generator context manager made before it), it is not
a plain CALL, or the code before the call branches. Not exact in either form: the frames above the user's
frame (framejit's hook frames; a resume function is called by the frame that broke before it). In a resume function the call is made from a frame
with the original code's shape, one frame more (NOTE [User frames for readers in resume functions] in
user_frames.py).
"""
from __future__ import annotations

import builtins
import dis
import inspect
import logging
import types
import typing
from typing import Any, Callable

import bytecode

from .breaks import BreakKind, Unsupported
from .values.base import LazyArg

_READERS = frozenset({"locals", "vars", "dir", "eval", "exec"})
_NEED_NO_ARGS = frozenset({"vars", "dir"})  # with an argument, they read that object only


def reads_own_locals(fn: types.FunctionType) -> str | None:
    """The builtin through which `fn`'s code may read its own locals, or None (NOTE [Locals read inside
    inlined comprehensions])."""
    code = fn.__code__
    if not _READERS.intersection(code.co_names) or _readers_in_comprehensions(fn):
        return None
    raw = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    instructions = [i for i in raw if i.opname not in ("PRECALL", "PUSH_NULL")]
    for k, inst in enumerate(instructions):
        name = inst.argval if inst.opname in ("LOAD_GLOBAL", "LOAD_NAME") else None
        if name not in _READERS or name in fn.__globals__ or getattr(builtins, name, None) is None:
            continue
        following = instructions[k + 1] if k + 1 < len(instructions) else None
        if (name in _NEED_NO_ARGS and following is not None and _argument_load(following)
                and not _spread_call(raw, raw.index(inst))):
            continue
        return name
    return None


# NOTE [vars() and dir() reached otherwise]: `vars(obj)` and `dir(obj)` read `obj` only; `vars()`/`dir()` read
# the frame. A `vars`/`dir` load is taken for a read of the frame unless the next instruction loads its argument
# (a LOAD_* other than an attribute's: `vars(self.config)` loads `self` next). Before, only a call with no
# arguments right after the load counted, so `vars.__call__()`, `f = vars; f()`, `operator.call(dir)` listed
# the transformed frame's `___graph_out` where eager lists the user's locals.
def _argument_load(inst) -> bool:
    return inst.opname.startswith("LOAD_") and inst.opname not in ("LOAD_ATTR", "LOAD_METHOD", "LOAD_SUPER_ATTR")


# NOTE [vars(*a) may pass nothing]: an argument load after `vars`/`dir` is no proof of an argument: in
# `vars(*a)`, `dir(*a)` and `vars(**kw)` the load is the star argument, which may be empty, and then the call
# reads the frame (eager lists ['a', 'x', 'y'] where the traced frame listed ['___graph_out', 'a', 'x'], review
# revM F8). From the load, the stack is followed in straight-line code (net stack effects) to the first call
# that reaches the loaded builtin; a call spreading its arguments (CALL_FUNCTION_EX), naming keywords
# (KW_NAMES before it, CALL_KW), a jump, or a COPY/SWAP before it makes the load a read of the frame.
_CALLS = frozenset({"PRECALL", "CALL", "CALL_KW", "CALL_FUNCTION_EX"})


def _spread_call(raw: list, k: int) -> bool:
    """Whether the builtin loaded at raw[k] may be called without a positional argument."""
    height, after_precall, keywords = 0, False, False
    for inst in raw[k + 1:]:
        name = inst.opname
        if name in ("COPY", "SWAP") or inst.opcode in dis.hasjrel or inst.opcode in dis.hasjabs:
            return True
        if name in _CALLS and not (name == "CALL" and after_precall):
            above = {"CALL_FUNCTION_EX": 1 + (inst.arg or 0) % 2, "CALL_KW": (inst.arg or 0) + 1}.get(name, inst.arg)
            if height - above <= 0:
                return keywords or name in ("CALL_FUNCTION_EX", "CALL_KW")
            keywords = False
        keywords = keywords or name == "KW_NAMES"  # 3.11/3.12: names the keywords of the next call
        after_precall = name == "PRECALL"
        height += dis.stack_effect(inst.opcode, inst.arg if inst.opcode >= dis.HAVE_ARGUMENT else None)
        if height < 0 or name.startswith(("RETURN", "RAISE")):
            return True
    return True


# NOTE [Locals read inside inlined comprehensions]: 3.12+ inline a comprehension into its frame (PEP 709), so
# `[locals() for i in ...]` (or vars(), dir(), eval(), exec()) made the whole frame run eagerly, where 3.11 runs
# only its `<listcomp>` eagerly. When every such read lies inside an inlined comprehension, the frame is traced:
# the read is a break in the comprehension's body, which moves to its GET_ITER (NOTE [Breaks inside inlined
# comprehensions]); the comprehension runs in a tail function whose locals are the frame's bound locals and the
# iteration variables, the names and values eager's locals() shows there, in the original's slot order (NOTE
# [Locals of loops run as Python] in resume.py), and the code after it is captured again.
def _readers_in_comprehensions(fn: types.FunctionType) -> bool:
    """Whether every read of the frame's locals by `fn`'s own code lies inside an inlined comprehension."""
    from .inlined_comprehensions import body_binds_unbound, comprehensions
    code = fn.__code__
    found = comprehensions(code)
    if not found or code.co_cellvars:  # a cell argument of the tail function would be listed out of order
        return False
    from .normalize import normalize
    for inst in normalize(code).insts:
        if inst.name not in ("LOAD_GLOBAL", "LOAD_NAME") or _loaded_name(inst.arg) not in _READERS:
            continue
        # the break moves to the outermost one's GET_ITER; a walrus target bound in its body keeps it inside
        outer = next((c for c in found if c.loop < inst.index < c.exit), None)
        if outer is None or body_binds_unbound(code, outer, frozenset()):
            return False
        # eager lists the slots in co_varnames order: the tail function's arguments (the locals bound at
        # the break) come first there, so a local bound there must not have a slot after the variables
        if not _slots_in_order(code, outer):
            return False
    return True


def _slots_in_order(code: types.CodeType, comp: Any) -> bool:
    """No local with a slot after the comprehension's variables can be bound at its GET_ITER: none is stored
    before it, and no jump goes back over it (a loop around it)."""
    from .normalize import normalize
    insts = normalize(code).insts
    first = min(code.co_varnames.index(name) for name in comp.saved if name in code.co_varnames)
    later = set(code.co_varnames[first:]) - set(comp.saved) - set(code.co_varnames[:code.co_argcount +
                                                                                    code.co_kwonlyargcount])
    if len(later) + len(comp.saved) < len(code.co_varnames[first:]):
        return False  # an argument after them (not possible, kept as a guard)
    for inst in insts:
        if inst.index < comp.get_iter and inst.name in ("STORE_FAST", "DELETE_FAST") and str(inst.arg) in later:
            return False
        if inst.index > comp.get_iter and isinstance(inst.instr, bytecode.Instr) and inst.instr.has_jump() \
                and isinstance(inst.arg, int) and inst.arg <= comp.get_iter:
            return False
    return True


def _loaded_name(arg: Any) -> Any:
    return arg[1] if isinstance(arg, tuple) else arg


_FRAME_READERS = frozenset({"_getframe", "currentframe", "getouterframes", "getinnerframes", "f_back", "f_locals",
                            "extract_stack", "print_stack", "format_stack", "walk_stack"})


def reads_frames(code: types.CodeType) -> bool:
    """Whether `code` may read the frame stack (NOTE [Frames read through the frame stack])."""
    names = code.co_names
    return not _FRAME_READERS.isdisjoint(names) or ("stack" in names and "inspect" in names)  # not torch.stack


def frame_reader_break(code: types.CodeType, root_index: int | None = None) -> Unsupported | None:
    """The break for a frame whose code reads frames, or None: for the root frame's own code (`root_index`
    None), the whole frame runs eagerly; for an inlined callee, a break at the root frame's call at
    `root_index` (NOTE [Breaks at calls that read frames])."""
    # logging keeps its handling at graph breaks; typing._caller reads only the module name of the frame that
    # makes a TypeVar (f_globals['__name__'], the same in the trace), as a PEP 695 generic function does
    if code.co_filename in (logging.__file__, typing.__file__) or not reads_frames(code):
        return None
    name = getattr(code, "co_qualname", code.co_name)
    if root_index is not None:
        e = Unsupported(BreakKind.UNSUPPORTED_CALL, f"{name} reads the frame stack (sys._getframe, inspect, "
                        "traceback): it is called in Python at a graph break, from a frame holding the user's locals")
        e.frame_reader_index = root_index
        return e
    e = Unsupported(BreakKind.UNSUPPORTED_CALL, f"{name} reads the frame stack (sys._getframe, inspect, "
                    "traceback): the frame runs eagerly")
    e.frame_eager = True
    return e


# NOTE [Frame readers reached by value]: convert.py runs a root frame eagerly when its code *names* `locals`,
# `vars`, `dir`, `eval` or `exec`; one reached another way (`_L = locals` at module level, `builtins.locals()`,
# a callee's `getattr(builtins, name)()`) was a plain break whose call ran in the transformed function, and
# listed its locals (`___pre0`, `___stack0`, no `y`: review revG G1's k1-k3). The call of such a builtin
# object that reads its caller's namespace is now the same decision: in the root frame the frame runs
# eagerly (a resume function through its eager function: NOTE [Unbound hidden from eager runs]); in an
# inlined callee, a break at the root frame's call that leads to it (NOTE [Breaks at calls that read
# frames]), so it runs in the callee's own frame.
def caller_namespace_break(tx: Any, fn: Any, args: list, kwargs: dict) -> Unsupported | None:
    """The break for a call of builtins.locals/vars()/dir()/eval/exec reading the calling frame, or None."""
    name = next((n for n in _READERS if getattr(builtins, n) is fn), None) if callable(fn) else None
    passed = None if name is not None or isinstance(fn, types.FunctionType) or any(fn is c for c in _NEVER_CALL) \
        else _reader_passed(args, kwargs)
    if passed is None and (name is None or (name in _NEED_NO_ARGS and (args or kwargs)) or
                           (name in ("eval", "exec") and len(args) + len(kwargs) >= 2)):
        return None
    root = tx
    while root.parent is not None:
        root = root.parent
    if passed is not None:
        name = f"{getattr(fn, '__name__', type(fn).__name__)}({passed})"
    elif root is tx and _names_reader(tx.code, name) and not getattr(tx.output, "readers_deferred", False):
        return None  # named in the frame's own code: decided by reads_own_locals (convert.py) as before
    # (reached in a frame traced under NOTE [Locals readers decided where they are reached]: it runs eagerly)
    e = Unsupported(BreakKind.UNSUPPORTED_CALL, f"{name}() reads the calling frame's locals: "
                    + ("runs eagerly" if root is tx else "its call runs in Python"))
    if root is tx:
        e.frame_eager = True
    else:
        e.frame_reader_index = root.current.index if root.current is not None else -1
    return e


# NOTE [Frame readers passed to library callables]: a C callable that calls its argument (`operator.call(LC)`,
# `operator.call(EV, "y + 1")` with `LC = locals`, `EV = eval` at module level) runs the reader with no frame of
# its own, so it reads the frame that made the call. Folded at trace time (a call of constants), it read
# framejit's own frame and baked that dict in: sorted(d) was ['fn', 'kwargs', 'values'] on every call where eager
# lists ['x', 'y'] (review revJ J4). A library callable (not a Python function, which is inlined and reaches
# the reader's call itself) given one of the readers as an argument is therefore treated as a call of the
# reader, whatever it does with it: the frame runs eagerly, or in a callee the root frame breaks at its call.
_NEVER_CALL = (callable, id, repr, str, hash, type, isinstance, issubclass, getattr, hasattr)  # never call it


def _reader_passed(args: list, kwargs: dict) -> str | None:
    """The name of the first builtin frame reader among the argument values, or None."""
    from .values import BuiltinValue
    for value in (*args, *kwargs.values()):
        obj = value.obj if isinstance(value, BuiltinValue) else None
        name = next((n for n in _READERS if getattr(builtins, n) is obj), None) if obj is not None else None
        if name is not None:
            return name
    return None


def _names_reader(code: types.CodeType, name: str) -> bool:
    """Whether `code` loads the builtin `name` by its global name (what reads_own_locals looks at)."""
    from .normalize import normalize
    return name in code.co_names and any(inst.name in ("LOAD_GLOBAL", "LOAD_NAME") and _loaded_name(inst.arg) == name
                                         for inst in normalize(code).insts)


def reader_break_ok(code: types.CodeType, exc: Any, inst: Any, in_handler: bool,
                    with_depth: int | None) -> bool | None:
    """For a break at `inst` of `code` for `exc`: None when it is an ordinary break, else whether the break
    can be taken at that call (NOTE [Breaks at calls that read frames]); False runs the frame eagerly. In
    `module_call` (framejit's own frame for a compiled module) the break is an ordinary one: the module's
    `forward` runs through its hook, and its own trace breaks at the call that leads to the reader."""
    index = getattr(exc, "frame_reader_index", None)
    if index is None or code is _module_call_code():
        return None
    return index == exc.root_index and inst.name == "CALL" and not in_handler and with_depth == 0


def _module_call_code() -> types.CodeType:
    from .module_frame import module_call
    return module_call.__code__


_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)


def emit_user_frame_call(cg: Any, rebuild: Any, fn: types.FunctionType, user_locals: dict[str, Any],
                         operands: Callable[[Callable[[Any], None]], None], call: Callable[[], None],
                         parts: tuple | None = None) -> None:
    """The call at a break, made from a frame holding the user's locals (NOTE [Breaks at calls that read
    frames]). `user_locals` maps the user's bound locals to their values (or LazyArg), `operands(load)` pushes
    the call's operands through `load(value)`, `call()` writes the call itself. `parts`: (the callee and its
    arguments, keyword names, the break's line), for a call from a resume function (NOTE [User frames for
    readers in resume functions] in user_frames.py)."""
    code = fn.__code__
    _check_user_frame_call(cg, code, user_locals)
    order = {n: i for i, n in enumerate(code.co_varnames + code.co_cellvars)}
    names = sorted(user_locals, key=lambda n: order.get(n, len(order)))
    # every value is loaded before any slot is written (`residual = x` then `x = ...` leaves a LazyArg of `x`
    # in `residual`, read from the slot `x`); stored in co_varnames order, the order f_locals lists them in
    moved = [n for n in names if not (isinstance(user_locals[n], LazyArg) and user_locals[n].name == n)]
    for name in reversed(moved):
        value = user_locals[name]
        cg.load_fast(value.name) if isinstance(value, LazyArg) else rebuild.emit(value)
    for name in moved:
        cg.store_fast(name)
    slots = {}
    for name in names:
        slots.setdefault(id(user_locals[name]), name)
    if parts is not None and _from_user_frame(cg, rebuild, fn, names, slots, *parts):
        return
    user_locals = _store_free_variables(cg, fn, user_locals)
    params = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & inspect.CO_VARARGS)
                              + bool(code.co_flags & inspect.CO_VARKEYWORDS)]
    stored = [i.arg for i in [*getattr(cg, "prologue", ()), *cg.insts] if isinstance(i, bytecode.Instr) and
              i.name == "STORE_FAST"]
    temps = [n for n in dict.fromkeys([*params, *stored]) if n not in user_locals]

    def load(value: Any) -> None:
        name = slots.get(id(value))
        cg.load_fast(name) if name is not None else rebuild.emit(value)
    start = len(cg.insts)
    operands(load)
    depth = sum(i.stack_effect(jump=False) for i in cg.insts[start:])
    if temps:
        for name in temps:
            cg.load_fast(name)
        cg.build("BUILD_TUPLE", len(temps))
        for name in temps:
            cg.emit("DELETE_FAST", name)
        for k in range(depth + 1, 1, -1):  # the tuple goes below the callable (SWAP n .. SWAP 2 rotates it)
            cg.emit("SWAP", k)
    call()
    if temps:
        cg.emit("SWAP", 2)
        cg.emit("UNPACK_SEQUENCE", len(temps))
        for name in temps:
            cg.store_fast(name)


def _check_user_frame_call(cg: Any, code: types.CodeType, user_locals: dict[str, Any]) -> None:
    """Unsupported where the frame holding the user's locals cannot be made (emit_user_frame_call)."""
    if any(isinstance(i, bytecode.Label) or getattr(i, "opcode", None) in _JUMPS for i in cg.insts):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a frame reader's call after code that branches: the "
                          "frame runs eagerly")
    from .resume import maybe_unbound
    if any(isinstance(v, LazyArg) and v.name in maybe_unbound(code) for v in user_locals.values()):
        raise Unsupported(BreakKind.UNSUPPORTED_CALL, "a frame reader's call where a local may hold "
                          "Unbound (NOTE [Resume functions take the same locals on every pass]): the frame runs "
                          "eagerly")


def _store_free_variables(cg: Any, fn: types.FunctionType, user_locals: dict[str, Any]) -> dict[str, Any]:
    """Store each bound free variable of `fn` in the frame under its name (eager's f_locals lists them);
    `user_locals` with those names added."""
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            cell.cell_contents
        except ValueError:  # unbound: eager's f_locals leaves it out too
            continue
        cg.load_const(cell)
        cg.load_attr("cell_contents")
        cg.store_fast(name)
        user_locals = {**user_locals, name: None}
    return user_locals


def _from_user_frame(cg: Any, rebuild: Any, fn: types.FunctionType, names: list[str], slots: dict[int, str],
                     values: list, kw_names: tuple[str, ...], line: int | None) -> bool:
    """NOTE [User frames for readers in resume functions]: the call made from a frame with the original code's
    shape, when `fn` is a resume function (False: not one, the call is made from the transformed frame)."""
    from .resume import origin
    from .sources import safe_local
    from .user_frames import make_user_frame
    original, _ = origin(fn.__code__, 0)
    closure = tuple(fn.__closure__ or ())
    if original is fn.__code__ or line is None or len(closure) != len(original.co_freevars):
        return False
    user_name = {safe_local(n): n for n in original.co_varnames + original.co_cellvars}
    if any(n not in user_name for n in names):
        return False

    def load(value: Any) -> None:
        name = slots.get(id(value))
        cg.load_fast(name) if name is not None else rebuild.emit(value)
    cg.push_null()  # the call of the made function, with no arguments
    cg.push_null()
    cg.load_const(make_user_frame)
    for const in (original, tuple(user_name[n] for n in names), line, tuple(kw_names), closure):
        cg.load_const(const)
    for name in names:
        cg.load_fast(name)
    load(values[0])
    cg.build("BUILD_TUPLE", len(names) + 1)
    arguments = values[1:]
    split = len(arguments) - len(kw_names)
    for group in (arguments[:split], arguments[split:]):
        for value in group:
            load(value)
        cg.build("BUILD_TUPLE", len(group))
    cg.call(8)
    cg.call(0)
    cg.emit("UNPACK_SEQUENCE", 2)  # (the call's result, the user's locals after it)
    cg.emit("SWAP", 2)
    cg.emit("UNPACK_SEQUENCE", len(names))
    for name in names:
        cg.store_fast(name)
    return True


def call_frame_reader_directly(hook) -> None:
    """NOTE [Frame readers called directly]: `hook` (a FrameHook made by framejit.compile) calls its function
    with no frame of its own when that function's code reads the frame stack."""
    fn = hook.fn
    if hook.request.fullgraph or frame_reader_break(fn.__code__) is None:
        return
    base = type(hook)
    hook.__class__ = type(base.__name__, (base,), {"__call__": staticmethod(fn), "__module__": base.__module__,
                                                   "__qualname__": base.__qualname__, "calls_directly": True})


def uncall_directly(hook) -> None:
    """Undo call_frame_reader_directly (explain() traces the frame to report its break)."""
    if type(hook).__dict__.get("calls_directly"):
        hook.__class__ = type(hook).__mro__[1]


__all__ = ["call_frame_reader_directly", "caller_namespace_break", "emit_user_frame_call", "frame_reader_break", "reader_break_ok", "reads_frames",
           "reads_own_locals", "uncall_directly"]
