"""Warnings of the ops in a graph, shown as eager shows them: never at the trace, never a graph break.

NOTE [Warnings of graph ops]: every op is run on fake tensors while tracing. An op that warns in eager
(`torch.tensor(t)`'s "To copy construct from a tensor", `F.softmax` without `dim`, `torch.range`, `x.T` on
3 dimensions) also warned in that fake run, at the trace, from framejit's own file (and under the "error"
filter raised there); the eager backend's graph then ran the real op, which warned again from the graph's
`<eval_with_key>` line (other filename, other once-registry), and onnxrt/triton ran no torch code (no
warning on later calls). Making such an op a graph break (8e6c094, reverted) cost splits on every trace of
ops whose TORCH_WARN_ONCE warning is spent (LSTM projections), broke fullgraph=True and library code.
Now:
- The fake run's warnings are held back (`run_held`): the filters are swapped to "always" and
  `warnings._showwarnmsg` to a collector (reached whatever `warnings.showwarning` is: logging.captureWarnings,
  user hooks), not with `catch_warnings()`, which marks the filters changed and empties every module's
  once-registry. torch's warn-always flag is on, so a TORCH_WARN_ONCE fires without spending the once that
  eager's real call shows. Warnings of other threads in that window are not the op's: the user's filters
  judge them and they are shown at once. Warnings of the fake-tensor machinery's own files are dropped.
- A held warning is recorded on the op's node (`node.meta["op_warnings"]`, an OpMarks with the user's site:
  file, line and module globals of the user frame the warning names: the op's caller, or for a Python
  warning whose stacklevel goes further, that caller's caller...). Whether it is a TORCH_WARN_ONCE is found
  by two more fake runs with warn-always off (not for ops that write a tensor they are given): a warning neither shows is a once
  already spent (never shown: eager shows none); one only the first shows is a once the probe spent (shown
  once per process, replayed); one both show is a plain warning. A call folded to a constant (no node:
  functorch's deprecated `vmap` calls torch's `warn_deprecated`) has its warnings replayed before the first
  op node after it (`close_graph`; a region such as vmap's replaces the nodes made inside it).
- The eager backend (and every graph that runs as its own code): the graph runs with each marked node
  called through a located trampoline, a one-line function whose code has the user's filename and line and
  whose globals are the user module's. The real op then warns as eager's call does (C++ warnings name the
  innermost Python frame; Python ones with stacklevel pass through the trampoline as through the user's
  frame): filters, `__warningregistry__`, "error" raising at the op after the ops before it ran, showwarning.
  The trampoline first replays what no real run shows (a spent once, a folded call's). Size-dependent
  kernel warnings the fake run cannot see (`x.std(0)` of one row: "degrees of freedom is <= 0") come from
  the real kernel, so var/std nodes are located too.
- Other backends (their code runs no op as torch does): every recorded warning is replayed before the graph
  runs, in node order, with `warnings.warn_explicit` at the site's file, line, module and registry. One the
  "error" filter raises runs the located graph code first (the ops before it make their effects, its real
  op raises as eager's). The backend's own runs of the ops while compiling (constant folding) are silent.
Graphs without marked nodes are unchanged (no cost at call time). A graph with recorded warnings is kept
in memory only (the frame cache does not persist the records), so a warm process traces it again; so is a
graph whose op's TORCH_WARN_ONCE was found spent (no record: the once is spent in the writing process only, a
new process shows it: review revD MED-4).
Not covered: an op inside a region made into a submodule (custom autograd Function, checkpoint) warns from
the region's code; a folded call's warning in a frame with no graph is lost; onnxrt/triton compute var/std
their own way (onnxrt: torch's `var()` warning from torch's file; triton: NumPy's under TRITON_INTERPRET).
"""
from __future__ import annotations

import os
import sys
import threading
import types
import warnings
from typing import Any, Callable, NamedTuple

import torch

# files whose warnings come from tracing machinery, never from the op as eager runs it
_MACHINERY = ("/torch/_subclasses/", "/torch/fx/", "/torch/_dispatch/", "/torch/_guards", "/torch/_library/fake")
# Python code only the fake run goes through (torch's references of C++ kernels: an `out=` resize warns from
# _prims_common/wrappers.py where eager's kernel warns from C++, with other text)
_FAKE_ONLY = ("/torch/_prims_common/", "/torch/_refs/", "/torch/_prims/", "/torch/_decomp/")
_FRAMEJIT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# kernels that warn from sizes their fake (meta) run does not check (NOTE [Warnings of graph ops])
_SIZE_WARNINGS = frozenset({"std", "var", "std_mean", "var_mean"})
_ONCE_SHOWN: set = set()  # (category, message) of TORCH_WARN_ONCE warnings replayed in this process


class OpWarning(NamedTuple):
    category: type
    message: str
    filename: str
    lineno: int
    module_globals: dict | None  # the module whose __name__ and __warningregistry__ eager's warning uses
    once: bool  # a TORCH_WARN_ONCE the fake probe spent: shown once per process
    instance: Any = None  # the Warning the fake run raised: replayed as it is (a subclass's __init__ may take
    # other arguments than the message; review revD HIGH-1)


class OpMarks(NamedTuple):
    """A node's `meta["op_warnings"]`: what its real op shows at the site, and what is replayed before it."""
    real: tuple  # OpWarnings the op itself raises when it runs at `site` (the graph's own code shows them)
    site: tuple  # (filename, lineno, module globals) of the user's frame that calls the op
    replayed: tuple  # OpWarnings no real run shows: a once the probe spent, a folded call's (NOTE [Warnings of graph ops])
    silent: tuple = ()  # OpWarnings of a custom op's fake implementation: never shown, kept out of the backend compile


def run_held(output: Any, target: Any, call: Callable[[], Any], kwargs: dict | None = None) -> Any:
    """`call()` (the fake run of `target` with keyword arguments `kwargs`) with its warnings held back and noted
    for the op's node."""
    output.__dict__["op_warnings"] = None
    first = _held(call, True)
    if first[1] is not None:
        raise first[1]
    if first[0]:
        kinds = _plain(first[0]) if _writes(target, kwargs or {}) else _probe_once(call, first[0])
        output.__dict__["op_warnings"] = (target, _records(first[0], kinds, output))
        output.__dict__.setdefault("process_local", _PROCESS_LOCAL)  # a spent once too: spent in THIS process (revD MED-4)
    return first[2]


# in-place operators (operator.iadd, Tensor.__iadd__, ...) and item assignment, by name without underscores
_WRITING_OPERATORS = frozenset(("setitem", "iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "imatmul",
                                "iand", "ior", "ixor", "ilshift", "irshift"))


def _writes(target: Any, kwargs: dict) -> bool:
    """An op whose fake run changes a fake tensor it is given: an in-place op, `out=`, `inplace=True`. Its
    probes would run on the changed tensor (an `out=` already resized warns no more: review revD MED-1)."""
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return (name.endswith("_") and not name.endswith("__") or name.strip("_") in _WRITING_OPERATORS
            or kwargs.get("out") is not None or kwargs.get("inplace") is True)


def _plain(held: list) -> dict:
    return {_key(m): "plain" for m, _ in held}


def _held(call: Callable[[], Any], warn_always: bool) -> tuple:
    """([(warning, user levels)] of the op, exception or None, result) of `call()`."""
    caught: list = []
    me = threading.get_ident()
    always, filters, show = torch._C._get_warnAlways(), warnings.filters, warnings._showwarnmsg
    user_filters = list(filters)
    # The filters' contents are swapped in place, never the list object: another thread's catch_warnings() in
    # this window saves and restores the same object, so it cannot put the held-back filters back for good
    # (review revD HIGH-3).

    def hold(msg: Any) -> None:
        if threading.get_ident() == me:
            frame = sys._getframe(1)
            caught.append((msg, -1 if _in_fake_impl(frame) else _user_levels(msg, frame)))
        else:
            _forward(msg, user_filters, show)

    torch._C._set_warnAlways(warn_always)
    filters[:], warnings._showwarnmsg = [("always", None, Warning, None, 0)], hold
    try:
        result, error = call(), None
    except BaseException as e:  # the op's error: eager's real call raises it (and shows its warnings)
        result, error, caught = None, e, []
    finally:
        filters[:], warnings._showwarnmsg = user_filters, show
        torch._C._set_warnAlways(always)
    ops = [m for m in caught if not any(p in str(m[0].filename).replace("\\", "/") for p in _MACHINERY)]
    return ops, error, result


def _in_fake_impl(frame: Any) -> bool:
    """The warning comes from a custom op's fake implementation (`register_fake`), called through torch/_library:
    code eager never runs (its user levels are -1: recorded as silent). Eager's warnings are the real
    implementation's, which runs in torch on every backend (its node has no lowering): the fake one's was
    replayed from the fake's line as well, and shown by the backend's compile (review revD MED-6)."""
    while frame is not None and not frame.f_code.co_filename.startswith(_FRAMEJIT_DIR):
        if "/torch/_library/" in frame.f_code.co_filename.replace("\\", "/"):
            return True
        frame = frame.f_back
    return False


def _user_levels(msg: Any, frame: Any) -> int:
    """How far past the op's call the warning's location is: 0 inside the op's own (library) code, 1 the
    user's frame that calls the op (C++ warnings name framejit's frame that runs the op), 2 its caller, ..."""
    levels, entered = 0, False
    while frame is not None:
        entered = entered or frame.f_code.co_filename.startswith(_FRAMEJIT_DIR)
        levels += entered
        if frame.f_code.co_filename == msg.filename and frame.f_lineno == msg.lineno:
            return levels
        frame = frame.f_back
    return 0


def _key(msg: Any) -> tuple:
    return msg.category, str(msg.message)


def _probe_once(call: Callable[[], Any], held: list) -> dict:
    """{key: "plain" | "once" | "spent"} of the held warnings (NOTE [Warnings of graph ops]). An op that writes
    a tensor it is given is not run again (`_writes`): its warnings count as plain."""
    try:
        first = {_key(m) for m, _ in _held(call, False)[0]}
        second = {_key(m) for m, _ in _held(call, False)[0]}
    except Exception:  # noqa: BLE001 - a probe must never change the trace
        return _plain(held)
    return {_key(m): "plain" if _key(m) in second else "once" if _key(m) in first else "spent" for m, _ in held}


def _records(held: list, kinds: dict, output: Any) -> list:
    """[(OpWarning, shown by the real op at the node's site; None: never shown)] of the held warnings."""
    out = []
    for msg, levels in held:
        if levels < 0:  # a custom op's fake implementation (`_in_fake_impl`)
            out.append((OpWarning(msg.category, str(msg.message), str(msg.filename), msg.lineno, None, False), None))
            continue
        if kinds[_key(msg)] == "spent":
            continue
        if not levels and any(p in str(msg.filename).replace("\\", "/") for p in _FAKE_ONLY):
            levels = 1  # eager's kernel warns from C++: at the op's caller (its own text: revD MED-1)
        if levels:  # a user frame's line: the op's caller, or (stacklevel) one of its callers
            filename, lineno, module_globals = user_site(output, levels)
        else:  # a Python warning inside library code (stacklevel=1): its own line and module
            filename, lineno, module_globals = str(msg.filename), msg.lineno, _module_globals(str(msg.filename))
        once = kinds[_key(msg)] == "once"
        instance = msg.message if isinstance(msg.message, Warning) else None
        out.append((OpWarning(msg.category, str(msg.message), filename, lineno, module_globals, once, instance),
                    levels <= 1 and not once))
    return out


def user_site(output: Any, levels: int = 1) -> tuple:
    """(filename, lineno, module globals) of the user frame `levels` out from the innermost one of the trace
    (1: the frame calling the op, where eager's C++ warnings point)."""
    tx = output.tx_stack[-1] if output.tx_stack else None
    while tx is not None and tx.parent is not None and tx.code.co_filename.startswith(_FRAMEJIT_DIR):
        tx = tx.parent
    for _ in range(levels - 1):
        tx = tx.parent if tx is not None else None
    if tx is None:
        return "sys", 1, None  # CPython's warn past the outermost frame
    return tx.code.co_filename, tx.frame_info().lineno, tx.f_globals


def _module_globals(filename: str) -> dict | None:
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) == filename:
            return vars(module)
    return None


def mark_node(output: Any, node: Any, kind: str, target: Any) -> None:
    """Notes the held warnings of the op just run (and the user's site) on its node."""
    ran, held = output.__dict__.pop("op_warnings", None) or (target, ())
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    if not held and not (kind in ("call_function", "call_method") and name in _SIZE_WARNINGS):
        return
    if ran is not target and ran != target:  # the fake run of a call whose node was made elsewhere: its op does not run here
        held = [(w, None if real is None else False) for w, real in held]
    node.meta["op_warnings"] = OpMarks(tuple(w for w, real in held if real), user_site(output),
                                       tuple(w for w, real in held if real is False),
                                       tuple(w for w, real in held if real is None))
    if held:
        output.__dict__["process_local"] = _PROCESS_LOCAL


_PROCESS_LOCAL = "a graph op warns (NOTE [Warnings of graph ops]): its records are kept in memory only"


def note_folded(output: Any) -> None:
    """The op just run gave a constant (no node): its warnings are replayed before the next op's node."""
    _, held = output.__dict__.pop("op_warnings", None) or (None, ())
    if held:
        last = next(iter(reversed(output.graph.nodes)), None)
        output.__dict__.setdefault("folded_warnings", []).append((last, tuple(w for w, r in held if r is not None)))
        output.__dict__["process_local"] = _PROCESS_LOCAL


def close_graph(output: Any) -> None:
    """Each folded call's warnings go to the first op node after the node that preceded the call (regions
    such as vmap's replace the nodes made since), or to the graph's output node."""
    for last, records in output.__dict__.pop("folded_warnings", ()):
        node = last if last is not None and not getattr(last, "_erased", False) else None
        node = node.next if node is not None else next(iter(output.graph.nodes), None)
        while node is not None and node.op not in ("call_function", "call_method", "output", "root"):
            node = node.next
        if node is None or node.op == "root":
            continue
        marks = node.meta.get("op_warnings") or OpMarks((), user_site_of(node), ())
        node.meta["op_warnings"] = marks._replace(replayed=records + marks.replayed)


def user_site_of(node: Any) -> tuple:
    """A node's site where none was noted: the innermost frame of its stack trace (its module unknown)."""
    for line in reversed((node.meta.get("stack_trace") or "").strip().splitlines()):
        line = line.strip()
        if line.startswith('File "'):
            filename, _, rest = line[len('File "'):].partition('", line ')
            return filename, int(rest.split(",")[0]), None
    return "sys", 1, None


def compiling(gm: torch.fx.GraphModule, call: Callable[[], Any]) -> Any:
    """`call()` (the backend compiling gm) without the warnings of gm's marked ops, which the backend's own runs
    of them (constant folding, checks) raise: eager shows them where the op runs, the graph's call does."""
    ops = {(w.category, w.message) for w in _all_records(gm)} | {
        (w.category, w.message) for n in gm.graph.nodes if "op_warnings" in n.meta for w in n.meta["op_warnings"].silent}
    return _without(ops, call, True) if ops else call()


def _without(ops: set, call: Callable[[], Any], compile_time: bool = False) -> Any:
    """`call()` without the warnings whose (category, text) is in `ops`; the user's filters judge the others. At
    compile time, the once-registries stay valid (NOTE [Warnings of graph ops at compile time])."""
    if compile_time:
        return _registries_kept(lambda: _without(ops, call))
    user_filters, show = list(warnings.filters), warnings._showwarnmsg
    held, error, result = _held(call, torch._C._get_warnAlways())  # a spent TORCH_WARN_ONCE stays spent (revD MED-3)
    if error is not None:
        raise error
    for msg, levels in held:
        if levels >= 0 and _key(msg) not in ops:
            _forward(msg, user_filters, show)
    return result


def _all_records(gm: torch.fx.GraphModule) -> list:
    """Every recorded warning of gm, in the order eager shows them (each node's replayed ones first)."""
    return [w for n in gm.graph.nodes if "op_warnings" in n.meta
            for w in (*n.meta["op_warnings"].replayed, *n.meta["op_warnings"].real)]


def _forward(msg: Any, user_filters: list, show: Callable) -> None:
    """Another thread's warning in the held-back window: the user's filters decide, as they would have."""
    message = msg.message if isinstance(msg.message, Warning) else msg.category(str(msg.message))
    filename = str(msg.filename)
    module = filename[:-3] if filename.endswith(".py") else filename
    action = _action(user_filters, str(message), message.__class__, module, msg.lineno)
    if action == "error":
        raise message
    if action != "ignore":
        show(msg)


def _action(user_filters: list, text: str, category: type, module: str, lineno: int) -> str:
    for action, msg, cat, mod, ln in user_filters:
        if ((msg is None or msg.match(text)) and issubclass(category, cat)
                and (mod is None or mod.match(module)) and (ln == 0 or lineno == ln)):
            return action
    return warnings.defaultaction


# ---- at call time ------------------------------------------------------------------------------------------
def _template(_fn: Any, _pre: Any) -> Callable:
    def _op(*args, **kwargs): return _pre() or _fn(*args, **kwargs)  # noqa: E704 - one line: the user's line
    return _op


def _method_template(_name: str, _pre: Any, _getattr: Any) -> Callable:
    # `_getattr` is a cell: the code runs with the user module's globals, which may bind `getattr` (revD HIGH-2)
    def _op(self, *args, **kwargs): return _pre() or _getattr(self, _name)(*args, **kwargs)  # noqa: E704
    return _op


_CALL, _METHOD = _template(None, None).__code__, _method_template("", None, None).__code__


def _nothing() -> None:
    return None


def _located(code: types.CodeType, closed: Any, marks: OpMarks) -> Callable:
    filename, lineno, module_globals = marks.site
    located = code.replace(co_filename=filename, co_firstlineno=max(lineno, 1))
    pre = (lambda: show(marks.replayed)) if marks.replayed else _nothing
    cells = {"_fn": closed, "_name": closed, "_pre": pre, "_getattr": getattr}
    fn = types.FunctionType(located, module_globals if module_globals is not None else {"__name__": "<string>"},
                            "_located_op", None, tuple(types.CellType(cells[n]) for n in code.co_freevars))
    fn.__module__ = __name__  # FX names it as a global of the graph's code, not as an importable torch name
    return fn


def located_forward(gm: torch.fx.GraphModule) -> Callable | None:
    """gm's forward with every marked node called through a trampoline at the user's line (NOTE [Warnings of
    graph ops]), bound to gm; None when no node is marked."""
    marked = [n for n in gm.graph.nodes if "op_warnings" in n.meta]
    if not marked:
        return None
    graph, copies, shows = torch.fx.Graph(), {}, []
    graph.output(graph.graph_copy(gm.graph, copies))
    for node in marked:
        copy, marks = copies.get(node), node.meta["op_warnings"]
        if node.op == "call_method":
            copy.op, copy.target = "call_function", _located(_METHOD, node.target, marks)
        elif node.op == "call_function":
            copy.target = _located(_CALL, node.target, marks)
        elif node.op == "output":
            with graph.inserting_before(next(iter(reversed(graph.nodes)))):
                copy = graph.call_function(show, (list(marks.replayed),))
        else:
            continue
        shows.append((copy, (*marks.replayed, *marks.real)))
    own = torch.fx.GraphModule(gm, graph)
    index = {n: i for i, n in enumerate(graph.nodes)}
    type(own).forward.__globals__[_SHOWS] = (own._lineno_map, own._prologue_start, [(index[n], r) for n, r in shows])
    return types.MethodType(type(own).forward, gm)


def with_replay(gm: torch.fx.GraphModule, compiled: Callable, own: Callable | None) -> Callable:
    """`compiled` (a backend's code, which runs no op of the graph as torch), first replaying all the graph's
    recorded warnings. A replay the "error" filter raises runs `own` (the located graph code) first, so the ops
    before the warning's op make their effects and its real op raises, as in eager."""
    replays = _all_records(gm)
    if not replays:
        return compiled
    _quiet_forward(gm, {(w.category, w.message) for w in replays})

    def replaying(*args: Any) -> Any:
        try:
            show(replays)
        except Exception:  # "error" filter, or a showwarning hook that raises (review revD HIGH-4): the ops
            if own is not None:  # before the warning's op run, and its real op raises as in eager
                own(*args)
            raise
        replayed = compiled  # bound once the replays are shown: read from a traceback (NOTE [Warnings of a graph that raised])
        return replayed(*args)
    replaying.compiled_without_warnings = compiled  # type: ignore[attr-defined]
    return replaying


def _quiet_forward(gm: torch.fx.GraphModule, ops: set) -> None:
    """The backend's own runs of gm's code (onnxrt's torch run after a failed ORT run, or of a signature it does
    not lower) do not show the replayed warnings again (NOTE [Warnings of a graph that raised]). FX gives each
    GraphModule its own class: its forward is wrapped (a deepcopy or a recompile makes a plain one), and
    `compile_quietly` runs a backend's later compile work (NOTE [Warnings of graph ops at compile time])."""
    cls, forward = type(gm), type(gm).forward

    def quiet(self: Any, *args: Any, **kwargs: Any) -> Any:
        return _without(ops, lambda: forward(self, *args, **kwargs))
    cls.forward = quiet
    cls.compile_quietly = staticmethod(lambda call: _without(ops, call, True))


# NOTE [Warnings of graph ops at compile time]: a backend runs the graph's ops while compiling it (constant
# folding, checks) and, for a graph that needs autograd, while tracing its joint at the first training call
# (backends/joint.py: AOT autograd runs gm's code under torch function modes): those runs showed the graph's
# warnings from `<eval_with_key>` and torch_methods.py, and torch's catch_warnings() in that work marked the
# filters changed, which empties every module's `__warningregistry__` at its next warning: under "default" the
# replay of the next call showed again what eager shows once (review revD MED-2, /tmp/revD/wide.py `mod`).
# The backend compile (`compiling`) and the joint's build (`gm.compile_quietly`, an attribute of gm's FX class:
# backends see only the graph module) run without the records' warnings, and when the filters are the same
# after the work, the registries valid before are valid again. Warn-always stays as the user set it: with it
# on, a TORCH_WARN_ONCE the work hits that eager had spent before was shown again (review revD MED-3; a once
# of the graph's own ops is replayed from its record, not from the real op).
def _registries_kept(call: Callable[[], Any]) -> Any:
    before, filters = _filters_version(), list(warnings.filters)
    try:
        return call()
    finally:
        after = _filters_version()
        if after != before and warnings.filters == filters:
            for registry in [warnings.onceregistry, *(vars(m).get("__warningregistry__") for m in list(sys.modules.values())
                                                      if isinstance(m, types.ModuleType))]:
                if isinstance(registry, dict) and registry.get("version") == before:
                    registry["version"] = after


def _filters_version() -> Any:
    """CPython's count of filter changes (a registry with another count is emptied at its next use): read as the
    count a warning that every filter ignores stamps on a new registry."""
    registry: dict = {}
    filters = warnings.filters[:]
    warnings.filters[:] = [("ignore", None, Warning, None, 0)]
    try:
        warnings.warn_explicit("", Warning, "", 0, registry=registry)
    finally:
        warnings.filters[:] = filters
    return registry.get("version")


def show(replays: list) -> None:
    """Each recorded warning as eager's call shows it (filters, registry, "error" raises)."""
    for w in replays:
        if w.once:
            if (w.category, w.message) in _ONCE_SHOWN:
                continue
            _ONCE_SHOWN.add((w.category, w.message))
        g = w.module_globals
        module = g.get("__name__", "<string>") if g is not None else None
        registry = g.setdefault("__warningregistry__", {}) if g is not None else None
        try:
            warnings.warn_explicit(w.instance if w.instance is not None else w.message, w.category, w.filename,
                                   w.lineno, module, registry)
        except Warning as e:  # the "error" filter; for a once the probe spent, an eager rerun would not raise
            e.framejit_replayed_once = w.once  # type: ignore[attr-defined] (requests.raised_in_graph)
            raise


# NOTE [Warnings of a graph that raised]: a graph that raises at run time is rerun eagerly (NOTE [Graph failures
# rerun eagerly] in convert.py). The graph's located code had shown the warnings of its marked nodes up to the
# one that raised, a replaying backend's wrapper all of its records; the rerun showed them again (review revD
# MED-5: "always" showed each warning of the failing call twice). The rerun now drops, once each, the warnings
# (category, text, file, line) the failing call showed: found from the exception's traceback, so a call that
# does not raise pays nothing. The located forward's globals keep, per marked node, its line in the generated
# code (FX's line map) and its records; `replaying` marks in a local that the replays were shown.
_SHOWS = "__framejit_op_warnings__"


def shown_before_failure(exc: BaseException) -> list:
    """[(category, text, filename, lineno)] of the recorded warnings the graph call that raised `exc` showed."""
    try:
        return _shown_in(exc.__traceback__)
    except Exception:  # noqa: BLE001 - finding them must never replace the user's exception
        return []


def _shown_in(tb: Any) -> list:
    out: list = []
    while tb is not None:
        frame = tb.tb_frame
        shows = frame.f_globals.get(_SHOWS) if frame.f_code.co_name == "forward" else None
        if shows is not None:
            lineno_map, prologue_start, marked = shows
            failing = (lineno_map or {}).get(tb.tb_lineno - prologue_start + 1)
            if failing is not None:
                out.extend(w for index, records in marked if index <= failing for w in records)
        elif frame.f_code.co_name == "replaying" and frame.f_code.co_filename == __file__ \
                and "replayed" in frame.f_locals:
            out.extend(frame.f_locals["replays"])
        tb = tb.tb_next
    return [(w.category, w.message, w.filename, w.lineno) for w in out]


def rerun_without(shown: list, call: Callable, args: tuple, kwargs: dict) -> Any:
    """`call(*args, **kwargs)` (the eager rerun of a failed graph call) with the warnings `shown` dropped once each."""
    if not shown:
        return call(*args, **kwargs)
    me, show_user = threading.get_ident(), warnings._showwarnmsg

    def drop(msg: Any) -> None:
        key = (msg.category, str(msg.message), str(msg.filename), msg.lineno)
        if threading.get_ident() == me and key in shown:
            shown.remove(key)
        else:
            show_user(msg)
    warnings._showwarnmsg = drop
    try:
        return call(*args, **kwargs)
    finally:
        if warnings._showwarnmsg is drop:
            warnings._showwarnmsg = show_user


__all__ = ["OpMarks", "OpWarning", "close_graph", "compiling", "located_forward", "mark_node", "note_folded", "rerun_without",
           "run_held", "show", "shown_before_failure", "user_site", "with_replay"]
