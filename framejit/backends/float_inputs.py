"""Float graph inputs passed to lowered programs as 0-d tensors, so one program serves every value.

NOTE [Float inputs as tensors]: a float argument that changed between calls is a graph input
(`meta["dynamic_float"]`, NOTE [Dynamic floats]): a compiled optimizer step's learning rate under an LR
scheduler, a temperature. Lowering traces with make_fx, which bakes a Python float into the program, so
onnxrt and triton ran such graphs eagerly (the update graph of every scheduled optimizer step). Here the
graph is rewritten so that each such input is a 0-d float64 tensor, the wrapper (`FloatInputsGraph`) turns
the call's float into one, and the backend compiles the rewritten graph once, for every value:

- float arithmetic on the inputs (`lr * 0.1`, `1 - x`, `-lr`) becomes the same arithmetic on float64 0-d
  tensors: IEEE double as Python's floats, value for value. Only +, -, *, unary -/+ and division by a
  non-zero number constant are taken (Python raises where a tensor gives inf: division by a float that may
  be 0, `**` overflowing); constants are int (|n| < 2**53) or float.
- where such a value meets tensors (`lr / bias_correction`, `p.mul_(1 - lr * wd)`, `add_(g, alpha=-lr)`,
  `addcdiv_(a, b, value=v)`, `lerp_(g, w)`), it is first cast to the result's dtype, as torch casts a Python
  scalar for float32 and float64 math (opmath); other result dtypes (half, bfloat16, whose opmath is
  float32; complex) are not taken. `alpha=` becomes `other * alpha` and `value=` of
  addcmul/addcdiv `(value * t1) op t2`, as torch's kernels compute them (the addition rounds separately
  where the kernel may fuse it: within an ulp).
- a comparison (`cum > top_p`, `torch.lt(x, p)`, `p <= x`) with a float32 or float64 tensor casts the value to
  that tensor's dtype: eager compares in the common dtype, to which a Python scalar does not promote (top-p
  sampling ran wholly eagerly once `top_p` changed). A comparison with an int or reduced tensor is not taken.
- any other use (a list argument, an unexpanded foreach call, a graph output, another comparison, a call not
  listed) and the graph is not rewritten: the backend runs it eagerly, as before. Nothing is guessed: the
  float never reaches a Scalar argument of a traced op, where make_fx would bake its value.

Foreach calls are expanded first (NOTE [Foreach expansion]), so `_foreach_mul_(params, 1 - lr * wd)` is
per-parameter `mul_` calls. The 0-d tensors live on the device of the graph's tensor inputs (triton wants
one device). The rewritten placeholder has no `source`: onnxrt never takes it for a weight to freeze
(NOTE [Frozen weights]).

NOTE [Persisted float inputs]: a backend's `save` of a FloatInputsGraph (`save_float_inputs`) is an
artifact of kind "float_inputs": the positions, the device and the artifact of what the backend compiled
from the rewritten graph. `load_float_inputs` rewrites the loaded graph again (the rewrite is a function of
the graph, whose persisted form keeps the `dynamic_float` marks, and of the inputs' metadata: placeholder
values are faked from the call's example inputs, no make_fx, no lowering), checks that the float inputs
are at the persisted positions, and loads the inner artifact for the rewritten graph. Before, such graphs
were kept in memory only: every warm process compiled a scheduled optimizer step again.
"""
from __future__ import annotations

import copy
import operator
from typing import Any, Callable

import torch
import torch.fx
from torch.fx.node import map_arg

from .state import has_dynamic_float_input

_SCALAR_OPS = {operator.add, operator.sub, operator.mul, operator.neg, operator.pos, operator.abs, operator.truediv}
_TENSOR_OPERATORS = {operator.add, operator.sub, operator.mul, operator.truediv, operator.pow,
                     operator.iadd, operator.isub, operator.imul, operator.itruediv}
# torch functions and Tensor methods (the in-place forms too) whose tensor operands may be the 0-d value
_ARITHMETIC = {"add", "sub", "mul", "div", "true_divide", "multiply", "subtract", "divide", "lerp", "pow",
               "addcmul", "addcdiv", "clamp", "clip"}
_BOUNDS = ("min", "max")  # clamp's keywords: cast as its positional bounds are (torch casts a Scalar bound so)
_FUSED = {"addcmul": torch.mul, "addcdiv": torch.div}  # `value=` scales t1 before this op
_CAST_DTYPES = (torch.float32, torch.float64)  # opmath is the dtype itself: casting first is what torch does
_MAX_EXACT_INT = 2 ** 53
_OPERATOR_COMPARISONS = {operator.gt, operator.lt, operator.ge, operator.le, operator.eq, operator.ne}
_COMPARISONS = {"gt", "lt", "ge", "le", "eq", "ne", "greater", "less", "greater_equal", "less_equal", "not_equal"}


class NotRewritable(Exception):
    """The graph uses a float input in a way this rewrite does not express (NOTE [Float inputs as tensors])."""


def _name(node: torch.fx.Node) -> str | None:
    """'add' for torch.add / Tensor.add / 'add_' (method or torch function); None for anything else."""
    if node.op == "call_method":
        name = node.target
    elif node.op == "call_function" and getattr(node.target, "__module__", None) in ("torch", "torch._C._VariableFunctions") \
            and getattr(torch, getattr(node.target, "__name__", ""), None) is node.target:
        name = node.target.__name__
    else:
        return None
    base = name[:-1] if name.endswith("_") and not name.startswith("_") else name
    return base if base in _ARITHMETIC else None


def _is_comparison(node: torch.fx.Node) -> bool:
    """`t > p` (operator), `torch.gt(t, p)` or `t.gt(p)`, and the other comparisons."""
    target = node.target
    if node.op == "call_method":
        return target in _COMPARISONS
    return node.op == "call_function" and (target in _OPERATOR_COMPARISONS or getattr(
        target, "__name__", None) in _COMPARISONS and getattr(torch, target.__name__, None) is target)


def _zero_dim(value: Any) -> bool:
    """A node computing a 0-d float tensor (torch takes it for a Scalar argument by reading its value)."""
    val = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.dim() == 0 and val.dtype in _CAST_DTYPES


def _scaled_by_a_tensor(node: torch.fx.Node) -> bool:
    """`alpha=`/`value=` of add/sub/addcmul/addcdiv given as a 0-d tensor (single-tensor Adam's
    `addcdiv_(exp_avg, denom, value=-step_size)`, step_size computed from the lr)."""
    name = _name(node)
    key = "alpha" if name in ("add", "sub", "subtract") else "value" if name in ("addcmul", "addcdiv") else None
    return key is not None and _zero_dim(node.kwargs.get(key))


def _number(value: Any) -> bool:
    if type(value) is float:
        return True
    return type(value) is int and abs(value) < _MAX_EXACT_INT


class _Rewriter:
    def __init__(self, graph: torch.fx.Graph, fake_mode) -> None:
        self.graph, self.fake_mode = graph, fake_mode
        self.scalars: set[torch.fx.Node] = set()
        self.casts: dict[tuple, torch.fx.Node] = {}

    def fake(self, fn: Callable, *args, **kwargs):
        def value(a):
            return a.meta["val"] if isinstance(a, torch.fx.Node) else a
        with self.fake_mode:
            return fn(*map_arg(args, value), **map_arg(kwargs, value))

    def new(self, op: str, target, args: tuple, kwargs: dict | None = None) -> torch.fx.Node:
        kwargs = kwargs or {}
        node = self.graph.create_node(op, target, args, kwargs)
        fn = (lambda self_, *rest, **kw: getattr(self_, target)(*rest, **kw)) if op == "call_method" else target
        node.meta["val"] = self.fake(fn, *args, **kwargs)
        return node

    def cast(self, node: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node:
        key = (node, dtype)
        if key not in self.casts:
            with self.graph.inserting_after(node):
                self.casts[key] = self.new("call_method", "to", (node, dtype))
        return self.casts[key]

    def touches(self, value: Any) -> bool:
        found = []
        map_arg(value, lambda n: found.append(n in self.scalars))
        return any(found)

    def scalar_op(self, node: torch.fx.Node) -> None:
        """Float arithmetic on float inputs: the same operator on float64 0-d tensors."""
        if node.op == "call_function" and node.target in (max, min) and len(node.args) == 2 and not node.kwargs:
            return self.extremum(node)
        if node.op != "call_function" or node.target not in _SCALAR_OPS or node.kwargs:
            raise NotRewritable(f"{node.format_node()}: a float computed by {node.target}")
        for i, arg in enumerate(node.args):
            if arg in self.scalars:
                if node.target is operator.truediv and i == 1:
                    raise NotRewritable(f"{node.format_node()}: division by a float input (Python raises at 0)")
            elif not _number(arg):
                raise NotRewritable(f"{node.format_node()}: a float input with {arg!r}")
        if node.target is operator.truediv and node.args[1] == 0:
            raise NotRewritable(f"{node.format_node()}: division by zero")
        self.scalars.add(node)
        node.meta["val"] = self.fake(lambda: torch.empty((), dtype=torch.float64))

    def extremum(self, node: torch.fx.Node) -> None:
        """`max(a, b)`/`min(a, b)` of floats (NOTE [Sorting by symbolic keys] in capture/sym_arith.py):
        `where(b > a, b, a)` (`<` for min) on float64 0-d tensors, CPython's own rule (`b` replaces `a` only when
        strictly greater), so NaN and -0.0 give what Python's max/min give."""
        a, b = node.args
        for arg in node.args:
            if arg not in self.scalars and type(arg) is not float:  # a float constant stays a Scalar argument
                raise NotRewritable(f"{node.format_node()}: {node.target.__name__} of a float input and {arg!r}")
        with self.graph.inserting_before(node):
            better = self.new("call_function", operator.gt if node.target is max else operator.lt, (b, a))
        node.target, node.args = torch.where, (better, b, a)
        self.scalars.add(node)
        node.meta["val"] = self.fake(lambda: torch.empty((), dtype=torch.float64))

    def fill_values(self) -> None:
        """Give the calls foreach expansion made (they have no `val`) what they compute, float inputs still
        being floats (their example values)."""
        for node in self.graph.nodes:
            if node.op not in ("call_function", "call_method") or "val" in node.meta:
                continue
            if node.op == "call_method" and node.target.endswith("_") and isinstance(node.args[0], torch.fx.Node):
                node.meta["val"] = node.args[0].meta.get("val")  # in place: the tensor written
                continue
            fn = (lambda self_, *rest, _name=node.target, **kw: getattr(self_, _name)(*rest, **kw)) \
                if node.op == "call_method" else node.target
            node.meta["val"] = self.fake(fn, *node.args, **node.kwargs)

    def tensor_op(self, node: torch.fx.Node) -> None:
        """A tensor op that reads float inputs: cast them to the result dtype; `alpha=`/`value=` rewritten."""
        if node.op == "call_function" and node.target is operator.setitem:
            return self.setitem(node)
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and val.dtype is torch.bool and _is_comparison(node):
            return self.comparison(node)
        if not isinstance(val, torch.Tensor) or val.dtype not in _CAST_DTYPES:
            raise NotRewritable(f"{node.format_node()}: a float input meets a {type(val).__name__} result "
                                f"{getattr(val, 'dtype', '')}")
        if node.op == "call_function" and node.target is torch.scalar_tensor:
            return self.scalar_tensor(node, val)
        name = None if node.target in _TENSOR_OPERATORS else _name(node)
        if name is None and node.target not in _TENSOR_OPERATORS:
            raise NotRewritable(f"{node.format_node()}: a float input passed to {node.target}")
        for arg in node.args:
            if not isinstance(arg, torch.fx.Node) and self.touches(arg):
                raise NotRewritable(f"{node.format_node()}: a float input inside a container argument")
        dtype = val.dtype
        with self.graph.inserting_before(node):
            args = tuple(self.cast(a, dtype) if a in self.scalars else a for a in node.args)
        kwargs = dict(node.kwargs)
        if name in ("clamp", "clip"):
            with self.graph.inserting_before(node):
                kwargs = {k: self.cast(v, dtype) if k in _BOUNDS and v in self.scalars else v for k, v in kwargs.items()}
            node.kwargs = kwargs
        factor = kwargs.pop("alpha" if name in ("add", "sub", "subtract") else "value", None) \
            if name in ("add", "sub", "subtract", "addcmul", "addcdiv") else None
        if any(self.touches(v) for v in kwargs.values()):
            raise NotRewritable(f"{node.format_node()}: a float input as a keyword argument")
        if factor is None or not (self.touches(factor) or _zero_dim(factor)):
            node.args = args
            return
        with self.graph.inserting_before(node):
            if factor in self.scalars:
                factor = self.cast(factor, dtype)
            else:  # a 0-d tensor: torch reads its value (`.item()`, no gradient), as the cast of a detached copy
                factor = self.new("call_method", "to", (self.new("call_method", "detach", (factor,)), dtype))
        if name in ("addcmul", "addcdiv"):
            # torch's kernels: self + value * t1 (op) t2
            if len(args) != 3:
                raise NotRewritable(f"{node.format_node()}: {name} with {len(args)} positional arguments")
            with self.graph.inserting_before(node):
                scaled = self.new("call_function", torch.mul, (args[1], factor))
                other = self.new("call_function", _FUSED[name], (scaled, args[2]))
            node.args, node.kwargs = (args[0], other), kwargs
            node.target = ("add_" if node.target.endswith("_") else "add") if node.op == "call_method" else torch.add
            return
        if len(args) != 2:
            raise NotRewritable(f"{node.format_node()}: {name} with {len(args)} positional arguments")
        with self.graph.inserting_before(node):
            other = self.new("call_function", torch.mul, (args[1], factor))
        node.args, node.kwargs = (args[0], other), kwargs

    def comparison(self, node: torch.fx.Node) -> None:
        """`t > p` (`lt`, `ge`, `eq`, ...) of a float32/float64 tensor and a float input: the value cast to the
        tensor's dtype, as eager compares in the common dtype, where a Python scalar does not promote (NOTE
        [Float inputs as tensors]); an int or reduced tensor there (compared in another dtype) is not taken."""
        others = [a for a in node.args if a not in self.scalars]
        vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in others]
        if len(node.args) != 2 or node.kwargs or len(others) != 1 or not isinstance(vals[0], torch.Tensor) \
                or vals[0].dtype not in _CAST_DTYPES:
            raise NotRewritable(f"{node.format_node()}: a float input compared other than with a float tensor")
        with self.graph.inserting_before(node):
            node.args = tuple(self.cast(a, vals[0].dtype) if a in self.scalars else a for a in node.args)

    def scalar_tensor(self, node: torch.fx.Node, val: torch.Tensor) -> None:
        """`torch.scalar_tensor(s, dtype=...)` of a float input (`x.new_tensor([x.size(0) / 3])`, NOTE [Tensors
        of mixed numbers]): the 0-d float64 value cast to the float32/float64 result, as scalar_tensor converts
        the Python float (one rounding from double)."""
        if len(node.args) != 1 or node.args[0] not in self.scalars or set(node.kwargs) - {"dtype", "device"}:
            raise NotRewritable(f"{node.format_node()}: scalar_tensor of a float input with other arguments")
        node.op, node.target = "call_method", "to"
        node.args, node.kwargs = (node.args[0],), {"dtype": val.dtype, "device": val.device}

    def setitem(self, node: torch.fx.Node) -> None:
        """`y[i] = s` with a float input `s`: `y[i] = s.to(y.dtype)`, the value eager stores (its float cast
        to y's dtype); before, the float stayed a constant of the program (a stale value at other sizes)."""
        target, index, value = node.args if len(node.args) == 3 else (None, None, None)
        val = target.meta.get("val") if isinstance(target, torch.fx.Node) else None
        if node.kwargs or value not in self.scalars or self.touches(index) \
                or not isinstance(val, torch.Tensor) or val.dtype not in _CAST_DTYPES:
            raise NotRewritable(f"{node.format_node()}: a float input stored other than `tensor[i] = float`")
        node.args = (target, index, self.cast(value, val.dtype))


def floats_as_tensors(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, list[int]]:
    """A copy of `gm` whose float inputs are 0-d float64 tensors, and their placeholder positions; raises
    NotRewritable where it cannot be written so (NOTE [Float inputs as tensors])."""
    from .foreach import expand_foreach  # NOTE [Foreach expansion]

    expanded = expand_foreach(gm)
    graph = copy.deepcopy(expanded.graph)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    fake_mode = next((n.meta["val"].fake_mode for n in placeholders
                      if hasattr(n.meta.get("val"), "fake_mode")), None)
    if fake_mode is None:
        raise NotRewritable("no fake tensor input to propagate metadata with")
    rewriter = _Rewriter(graph, fake_mode)
    rewriter.fill_values()
    positions = []
    for index, node in enumerate(placeholders):
        if node.meta.get("dynamic_float"):
            positions.append(index)
            rewriter.scalars.add(node)
            node.meta = {"val": rewriter.fake(lambda: torch.empty((), dtype=torch.float64)),
                         "float_input": True}  # no `source`, no `dynamic_float`: see the NOTE
    for node in list(graph.nodes):
        if node.op in ("placeholder", "get_attr") or node in rewriter.casts.values():
            continue
        if not rewriter.touches((node.args, node.kwargs)):
            if node.op in ("call_function", "call_method") and _scaled_by_a_tensor(node):
                rewriter.tensor_op(node)
            continue
        if node.op == "output":
            raise NotRewritable("a float computed from a float input is a graph output")
        if type(node.meta.get("val")) is float:
            rewriter.scalar_op(node)
        else:
            rewriter.tensor_op(node)
    graph.lint()
    return torch.fx.GraphModule(expanded, graph), positions


class FloatInputsGraph:
    """What a backend compiled from `floats_as_tensors(gm)`, called as `gm` is: the floats at `positions`
    are passed as 0-d float64 tensors on `device`. Other attributes are the compiled callable's (its counts
    and summaries, for explain and tests)."""

    def __init__(self, compiled: Callable, positions: list[int], device: torch.device) -> None:
        self.compiled, self.positions, self.device = compiled, positions, device

    def __call__(self, *args: Any) -> Any:
        args = list(args)
        for i in self.positions:  # a new tensor per call (a joint may save it); `full` never syncs a GPU
            args[i] = torch.full((), args[i], dtype=torch.float64, device=self.device)
        return self.compiled(*args)

    def __getattr__(self, name: str) -> Any:
        if name == "compiled":  # an instance not initialised (copy.copy looks for __setstate__ first)
            raise AttributeError(name)
        return getattr(self.compiled, name)


def compile_with_float_tensors(gm: torch.fx.GraphModule, example_inputs, backend: Callable, log: Callable) -> \
        Callable | None:
    """`backend(rewritten, examples)` wrapped to pass floats as tensors, for a graph with float inputs that
    NOTE [Float inputs as tensors] can rewrite; None (and a `log(why)`) for any other graph."""
    if not has_dynamic_float_input(gm):
        return None
    try:
        rewritten, positions = floats_as_tensors(gm)
    except NotRewritable as why:
        log(str(why))
        return None
    except Exception as error:  # internal failures never reach the user: the graph runs eagerly as before
        log(f"rewriting failed ({type(error).__name__}: {error})")
        return None
    devices = [t.device for t in example_inputs or () if isinstance(t, torch.Tensor)]
    device = devices[0] if devices else torch.device("cpu")
    examples = None if example_inputs is None else [
        torch.full((), v, dtype=torch.float64, device=device) if i in positions else v
        for i, v in enumerate(example_inputs)]
    return FloatInputsGraph(backend(rewritten, examples), positions, device)


KIND = "float_inputs"


def save_float_inputs(compiled: Any, save: Callable) -> bytes | None:
    """The artifact of a FloatInputsGraph (NOTE [Persisted float inputs]); None where the inner compiled
    object has none. `save` is the backend's own."""
    from .artifact import pack
    inner = save(compiled.compiled)
    if inner is None:
        return None
    return pack(KIND, {"positions": list(compiled.positions), "device": str(compiled.device)}, {"inner": inner})


def load_float_inputs(data: bytes, gm: torch.fx.GraphModule, example_inputs, load: Callable) -> Callable | None:
    """The FloatInputsGraph `save_float_inputs` saved, or None when `data` is another kind of artifact;
    raises ArtifactError where the graph does not rewrite to the persisted positions."""
    from .artifact import ArtifactError, kind_of, unpack
    if kind_of(data) != KIND:
        return None
    meta, blobs = unpack(data, KIND)
    if example_inputs is None:
        raise ArtifactError("float inputs: the graph is rewritten for the call's inputs, which were not given")
    annotated = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    placeholders = [n for n in annotated.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise ArtifactError("float inputs: the graph's inputs and the call's differ in number")
    from torch._subclasses.fake_tensor import FakeTensorMode
    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    for node, value in zip(placeholders, example_inputs):
        node.meta["val"] = fake_mode.from_tensor(value) if isinstance(value, torch.Tensor) else value
    try:
        rewritten, positions = floats_as_tensors(annotated)
    except NotRewritable as why:
        raise ArtifactError(f"float inputs: the loaded graph does not rewrite: {why}") from None
    if positions != meta["positions"]:
        raise ArtifactError(f"float inputs at {positions}, persisted at {meta['positions']}")
    device = torch.device(meta["device"])
    examples = [torch.full((), v, dtype=torch.float64, device=device) if i in positions else v
                for i, v in enumerate(example_inputs)]
    return FloatInputsGraph(load(blobs["inner"], rewritten, examples), positions, device)
