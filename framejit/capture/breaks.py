"""Graph breaks as data, and the exceptions that carry them.

A `GraphBreak` records why tracing could not continue: a stable `BreakKind`, a human explanation, a hint
that says what the user can change, and the user's stack (file:line:source, innermost last). Tests assert
on the kind, never on the message text.

`Unsupported` is raised inside the translator at an unsupported step; the frame hook catches it. With
`fullgraph=True` it reaches the user (it is `framejit.Unsupported`, documented in api.py).
`UserException` wraps an exception that the user's own code raised while being traced (a bad shape, a
failing assert): the frame then runs eagerly, so the user sees the very exception eager raises.
"""
from __future__ import annotations

import dataclasses
import enum


# Code objects of functions marked with framejit.disable: never traced, never inlined.
DISABLED: "set" = set()


# NOTE [Compiled callables under FX tracing]: `torch.fx.symbolic_trace` of a model that calls a compiled
# function, or of a compiled module (FX calls the class's `forward`: NOTE [The forward of a compiled module]
# in api.py), calls the hook with FX Proxies; no entry's guards accept them, and tracing them failed (an
# AttributeError, or "symbolically traced variables cannot be used as inputs to control flow"). A hook called
# while FX traces runs its function as plain Python, so FX records its operations, as with torch.compile
# (whose compiled callables run the original function under FX symbolic tracing).
def fx_tracing() -> bool:
    import sys
    fx = sys.modules.get("torch.fx._symbolic_trace")
    getter = getattr(fx, "_get_is_fx_tracing", None)  # a per-thread flag in newer torch, a global before
    return bool(getter() if getter is not None else getattr(fx, "_is_fx_tracing_flag", False))


# NOTE [Compiled callables under the TorchScript tracer]: `torch.jit.trace` and `torch.onnx.export(...,
# dynamo=False)` record the aten ops that run while the tracer's state is set. An entry's graph ran through
# its backend there: an ORT session or a Triton kernel hands back tensors the tracer never saw (a segfault in
# trace_module, review revO O10), and the eager backend's FX graph traced differently on the check run
# (TracingCheckError "Graphs differed across invocations"). A hook called while the tracer is active
# (`torch._C._is_tracing()`, checked first on every call, hits included) runs its function as plain Python,
# with no guard check, cache lookup or trace, so the trace records the callable's own ops, as tracing the
# uncompiled callable does. (Stock torch.compile raises RuntimeError there, "Detected that you are using FX
# to torch.jit.trace a dynamo-optimized function"; running the code unchanged is what the user asked the
# tracer for.) Logged once per hook.
class TracerInterop:
    """What a FrameHook does under torch's other tracers and compilers (its base class)."""

    def run_uncompiled(self, args: tuple, kwargs: dict):
        """A call under config.disable or the TorchScript tracer: the function, as plain Python."""
        from .. import config
        if not config.disable and not getattr(self, "jit_trace_logged", False):
            from .. import logs
            self.jit_trace_logged = True
            logs.log("eager_fallback", "%s runs as Python while torch.jit.trace (or torch.onnx.export with "
                     "dynamo=False) traces it", getattr(self.fn, "__qualname__", self.fn))
            from .module_frame import module_call
            self.jit_scoped = self.fn is module_call
        if getattr(self, "jit_scoped", False) and not config.disable:
            return _in_compiled_scope(self.eager, args, kwargs)
        return self.eager(*args, **kwargs)

    def __prepare_scriptable__(self):
        """`torch.jit.script(compiled_f)` scripts f, as it scripts the function torch.compile's wrapper wraps
        (it failed with "Compiled functions can't take variable number of arguments": it scripted the hook's
        `__call__`). A compiled module's scripted `forward` is already its class's (api._compiled_forward wraps it)."""
        return self.fn


def _in_compiled_scope(module_call, args: tuple, kwargs: dict):
    """`module_call(module, ...)` with the module named in the tracer's scopes as its compiled form is: the
    tracer names the modules of the traced root (the compiled module, whose children are the original's), and
    the original module's call pushes its scope only under a name (Module._slow_forward), so without it the
    ops had no `__module` scope and torch.onnx.export named its nodes `a/Gemm` instead of `/a/Gemm`."""
    import torch.jit._trace
    names, module = torch.jit._trace._trace_module_map, args[0] if args else None
    if not names or module in names:
        return module_call(*args, **kwargs)
    name = next((name for compiled, name in names.items() if getattr(type(compiled), "_framejit_compiled", False)
                 and type(compiled)._orig_mod is module), None)
    if name is None:
        return module_call(*args, **kwargs)
    names[module] = name
    try:
        return module_call(*args, **kwargs)
    finally:
        names.pop(module, None)


class FramejitError(Exception):
    """Base class of framejit's own exceptions."""


class BreakKind(enum.Enum):
    UNSUPPORTED_OPCODE = "unsupported_opcode"
    UNSUPPORTED_CALL = "unsupported_call"
    DATA_DEPENDENT = "data_dependent"
    UNSUPPORTED_ATTRIBUTE = "unsupported_attribute"
    UNSUPPORTED_VALUE = "unsupported_value"
    SIDE_EFFECT = "side_effect"
    EXCEPTION_RAISED = "exception_raised"
    INLINE_LIMIT = "inline_limit"
    MODULE_HOOKS = "module_hooks"
    DYNAMIC_CONTROL_FLOW = "dynamic_control_flow"
    TRACE_LIMIT = "trace_limit"
    INTERNAL_ERROR = "internal_error"


# What causes each kind and what the user can do; docs/graph_breaks.md is generated from this table.
KIND_DOCS: dict[BreakKind, tuple[str, str]] = {
    BreakKind.UNSUPPORTED_OPCODE: (
        "a Python bytecode instruction framejit cannot trace yet",
        "move that statement out of the compiled function, or wrap its helper with framejit.disable"),
    BreakKind.UNSUPPORTED_CALL: (
        "a call into a function framejit cannot put in a graph or inline (C extensions, I/O, np.random, ...)",
        "call it outside the compiled region, or mark the callee with framejit.disable"),
    BreakKind.DATA_DEPENDENT: (
        "Python control flow or a Python value that depends on tensor data (.item(), bool(t), if t.sum() > 0)",
        "keep the computation in tensors (torch.where, masks), or move the decision out of the compiled code"),
    BreakKind.UNSUPPORTED_ATTRIBUTE: (
        "an attribute framejit cannot read safely (a descriptor, __getattr__ on a user class, ...)",
        "read the attribute before calling the compiled function and pass the value in"),
    BreakKind.UNSUPPORTED_VALUE: (
        "an argument or global of a type framejit cannot model",
        "pass tensors, Python scalars, containers, modules or plain objects"),
    BreakKind.SIDE_EFFECT: (
        "a mutation of state visible outside the function that cannot be replayed yet",
        "return the new value instead of mutating inputs or globals"),
    BreakKind.EXCEPTION_RAISED: (
        "the traced code raised an exception (raise, a failing assert, a bad shape)",
        "the code from the break on runs as Python so that the same exception reaches you where eager raises it "
        "(where no break can be placed, the whole function runs eagerly); fix the error or catch it outside"),
    BreakKind.INLINE_LIMIT: (
        "inlined calls nested deeper than config.inline_depth_limit (deep or unbounded recursion)",
        "make the recursion bounded by a Python constant, or raise framejit.config.inline_depth_limit"),
    BreakKind.MODULE_HOOKS: (
        "an nn.Module with backward hooks, or a lazy module's first call (forward hooks are captured)",
        "nothing to do without fullgraph: the module call is a break where torch wraps its inputs and "
        "outputs for the backward hooks, and its forward and the code around it are captured; a lazy "
        "module is captured from its second call on"),
    BreakKind.DYNAMIC_CONTROL_FLOW: (
        "control flow whose direction framejit does not decide while tracing: a loop whose body broke at "
        "several of its steps has a dynamic position, so each step runs as Python and the body as a resume "
        "function (NOTE [Loops carried across breaks]); a loop over a range or a tensor's rows whose length "
        "is symbolic runs as Python instead of unrolling, which would compile once per length",
        "remove the graph break inside the loop body (then the loop is unrolled into the graph); for a "
        "symbolic length, mark that size static (framejit.mark_static, dynamic=False) if it takes few values"),
    BreakKind.TRACE_LIMIT: (
        "tracing ran for too many instructions (a very long or unbounded Python loop)",
        "move the long loop out of the compiled function, or compile its body instead"),
    BreakKind.INTERNAL_ERROR: (
        "framejit itself failed while tracing (a bug: please report it with the log)",
        "the frame runs eagerly; FRAMEJIT_LOGS=graph_breaks shows where"),
}


@dataclasses.dataclass(frozen=True)
class UserFrame:
    filename: str
    lineno: int
    function: str
    line: str
    # the code object and its canonical instruction index (None: its first line), from which a restored
    # entry makes the frame again (NOTE [Break locations from the live code] in break_locations.py)
    code: object = dataclasses.field(default=None, compare=False, repr=False)
    index: int | None = dataclasses.field(default=None, compare=False, repr=False)
    module: str | None = dataclasses.field(default=None, compare=False, repr=False)  # its globals' __name__

    def __str__(self) -> str:
        return f"{self.filename}:{self.lineno} in {self.function}: {self.line}"


@dataclasses.dataclass(frozen=True)
class GraphBreak:
    kind: BreakKind
    explanation: str
    user_stack: tuple[UserFrame, ...] = ()

    @property
    def hint(self) -> str:
        return KIND_DOCS[self.kind][1]

    @property
    def location(self) -> str:
        if not self.user_stack:
            return "<unknown>"
        top = self.user_stack[-1]
        return f"{top.filename}:{top.lineno}"

    def __str__(self) -> str:
        lines = [f"[{self.kind.value}] {self.explanation}"]
        lines += [f"  at {frame}" for frame in self.user_stack]
        lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)


class Unsupported(FramejitError):
    """Raised where framejit cannot capture a step; the user sees it only with `fullgraph=True`.

    `.graph_break` holds the GraphBreak (kind, explanation, hint, user file:line and source).
    """

    def __init__(self, kind: BreakKind, explanation: str, user_stack: tuple[UserFrame, ...] = ()):
        self.graph_break = GraphBreak(kind, explanation, user_stack)
        self.root_index: int | None = None  # the outermost frame's instruction where it happened
        super().__init__(str(self.graph_break))

    def with_stack(self, user_stack: tuple[UserFrame, ...]) -> "Unsupported":
        if not self.graph_break.user_stack:
            self.graph_break = dataclasses.replace(self.graph_break, user_stack=user_stack)
            self.args = (str(self.graph_break),)
        return self

    @property
    def kind(self) -> BreakKind:
        return self.graph_break.kind


class UserException(Exception):
    """The user's code raised `exc` while being traced (internal signal; never reaches the user)."""

    def __init__(self, exc: BaseException, user_stack: tuple[UserFrame, ...] = ()):
        super().__init__(repr(exc))
        self.exc = exc
        self.user_stack = user_stack
        self.root_index: int | None = None  # the outermost frame's instruction that raised


def unsupported(kind: BreakKind, explanation: str) -> Unsupported:
    return Unsupported(kind, explanation)
