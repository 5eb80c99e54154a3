"""Guard functions: one generated Python function per compiled entry, and their explanation.

`compile_guards` turns a list of `Guard`s into a `GuardFunction`:
- `check(*args, **kwargs) -> bool`: the generated fast function. Its signature is the frame's own
  (same parameter names, defaults and kw-defaults), so CPython binds the call's arguments exactly as it
  binds them for the user's function. One check per line, each line commented with the user source that
  caused it, cheapest checks first. Its source text is kept in `source` (dumps, logs, linecache).
- `first_failure(*args, **kwargs)`: the slow path; the first failing guard and its actual value.
- `reference_check(*args, **kwargs)`: the reference evaluator, which evaluates the guards one by one
  with `eval`; a test compares it with `check` on randomised inputs.

An exception raised while evaluating a guard (e.g. a missing dict key) means the guard failed.
"""
from __future__ import annotations

import ast
import builtins
import re
import types
import dataclasses
import enum
import functools
import linecache
import weakref
from typing import Any, Callable, Sequence

from .guard import Guard
from .outcomes import NONE, NOT_RECORDED, Outcome, check, reach, compiled, described, mentions_safe, type_now
from .plain_reads import is_a, module_text

# Helpers every guard function may use; names start with ___ so that no frame argument can shadow them.
def _distinct_storages(*tensors: Any) -> bool:
    """No two of the tensors share memory (guards frames that mutate an input in place)."""
    pointers = [_storage_pointer(t) for t in tensors]
    return len(set(pointers)) == len(pointers)


def _storage_apart(tensor: Any, *others: Any) -> bool:
    """`tensor` shares memory with none of `others` (guards frames that mutate `tensor` in place)."""
    pointer = _storage_pointer(tensor)
    return all(_storage_pointer(t) != pointer for t in others)


# NOTE [One guard for the inputs written in place]: a graph that writes inputs in place is sound only while no
# other tensor input shares a written input's memory (NOTE [Input mutation] in capture/graph.py). That was one
# `___storage_apart(written, *others)` guard per written input, each naming every other tensor input: a manual
# SGD step over 400 parameters (`p.data.add_(p.grad, alpha=-lr)`) wrote 400 inputs of 800, so its guard function
# had 400 lines of 800 arguments, took 17 s to order and compile and ~250 ms per call to check. One guard,
# `___storages_apart(k, *written, *others)`, checks the same facts in one pass: the k written inputs' storages
# are pairwise distinct and none is the storage of another input (the others may share memory among
# themselves: only read, as a view and its base).
def _storages_apart(written: int, *tensors: Any) -> bool:
    """Each of the first `written` tensors shares memory with no other of `tensors`."""
    pointers = [_storage_pointer(t) for t in tensors]
    mine = set(pointers[:written])
    return len(mine) == written and mine.isdisjoint(pointers[written:])


def _storage_pointer(t: Any) -> int:
    """NOTE [Guards run no user code]: a tensor subclass's own `__torch_function__` would see `untyped_storage`
    (eager never calls it there: review revQ Q9), so a subclass's storage is read with subclass dispatch off."""
    function = type(t).__torch_function__
    if function is _TENSOR_TF or function is _DISABLED_TF:  # a Parameter or Buffer: torch functions disabled
        return t.untyped_storage().data_ptr()
    import torch
    with torch._C.DisableTorchFunctionSubclass():
        return t.untyped_storage().data_ptr()


def _default_tf() -> tuple:
    import torch
    return torch.Tensor.__torch_function__, torch._C._disabled_torch_function_impl


# NOTE [Guards run no user code]: reading the storage of a Parameter (whose __torch_function__ is torch's
# disabled one) took the context-manager path, 11 us per read: 800 reads were most of a 400-parameter SGD
# step's guard check
_TENSOR_TF, _DISABLED_TF = _default_tf()


def _distinct_objects(*objects: Any) -> bool:
    """No two of the objects are one object. They are all alive while their ids are compared: a guard
    expression may make a fresh object (`raw_dict_items(d)`, NOTE [Dict subclasses]), and a temporary freed
    after its `id()` was taken can hand its address to the next one, so `len({id(a), id(b)})` may count
    two distinct objects as one."""
    return len(set(map(id, objects))) == len(objects)


def generated_namedtuple_new(cls: type) -> bool:
    """NOTE [Generated namedtuple __new__]: `NT(...)` is traced as the tuple of its fields while the `__new__`
    it reaches is the one `collections.namedtuple` generated (calls._guard_namedtuple_construction). Guarded
    by identity, that staticmethod cannot be persisted (its function's module is `namedtuple_<name>`, no
    importable name), so no frame that builds a namedtuple started warm. It is recognised instead by what
    only namedtuple makes: a staticmethod in the dict of a class defining `_fields` and `_make`, whose
    function was compiled from a string in a namespace holding `_tuple_new = tuple.__new__`, with exactly
    that class's fields as its parameters."""
    for klass in cls.__mro__:
        entry = klass.__dict__.get("__new__")
        if entry is None:
            continue
        func = getattr(entry, "__func__", None)
        code = getattr(func, "__code__", None)
        fields = klass.__dict__.get("_fields")
        return (type(entry) is staticmethod and code is not None and "_make" in klass.__dict__
                and isinstance(fields, tuple) and code.co_filename == "<string>"
                and func.__globals__.get("_tuple_new") is tuple.__new__
                and code.co_varnames[1:code.co_argcount] == fields)
    return False


BASE_NAMESPACE: dict[str, Any] = {
    "___generated_namedtuple_new": generated_namedtuple_new,
    "___distinct_storages": _distinct_storages,
    "___distinct_objects": _distinct_objects,
    "___storage_apart": _storage_apart,
    "___storages_apart": _storages_apart,
    "___type": type,
    "___len": len,
    "___isinstance": isinstance,
    "___id": id,
    "___raw_attr": object.__getattribute__,  # NOTE [Raw attribute reads] in capture/sources.py
    "___list": list,
    "___reach": reach,  # NOTE [Cached calls explained without calling them]
    "__builtins__": builtins,
}

_counter = [0]


@dataclasses.dataclass
class Failure:
    guard: Guard
    actual: str

    def __str__(self) -> str:
        expected = f" expected {self.guard.expected}," if self.guard.expected else ""
        where = f" (from {self.guard.origin})" if self.guard.origin else ""
        return f"{self.guard.kind} on {self.guard.source}:{expected} got {self.actual}{where}"


class GuardFunction:
    def __init__(self, guards: Sequence[Guard] | Callable[[], list[Guard]], check: Callable, bind: Callable,
                 source: str, namespace: dict[str, Any]) -> None:
        self._guards = guards if callable(guards) else list(guards)  # a callable: ordered when first read
        self.check = check
        self._bind = bind
        self.source = source
        self.namespace = namespace

    @property
    def guards(self) -> list[Guard]:
        """The guards in the order the function checks them (NOTE [Guard order of a kept source])."""
        if callable(self._guards):
            self._guards = self._guards()
        return self._guards

    def __call__(self, *args: Any, **kwargs: Any) -> bool:
        try:
            return self.check(*args, **kwargs)
        except Exception as e:
            _reraise_from_signal_handler(e)
            return False

    def bind(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self._bind(*args, **kwargs)

    def reference_check(self, *args: Any, **kwargs: Any) -> bool:
        return self.first_failure(*args, **kwargs) is None

    def first_failure(self, *args: Any, **kwargs: Any) -> Failure | None:
        return self.miss_failure(args, kwargs, recorded=False)

    def miss_failure(self, args: tuple, kwargs: dict, recorded: bool = True) -> Failure | None:
        """first_failure of a call the check function has just refused (`recorded`: its cached calls are not
        made again, NOTE [Cached calls explained without calling them])."""
        try:
            frame_locals = self._bind(*args, **kwargs)
        except TypeError as e:
            return Failure(Guard("<call>", "SIGNATURE", "arguments"), str(e))
        for i, guard in enumerate(self.guards):
            failed, outcome = self._check(i, guard, frame_locals, recorded)  # NOTE [Explanations run each check once]
            if not outcome.held:
                return self._missing_key(guard, i, frame_locals, outcome) or self._failure(failed, outcome, frame_locals)
        return None

    def _missing_key(self, guard: Guard, index: int, frame_locals: dict, outcome: Outcome) -> Failure | None:
        """NOTE [Missing keys named by their dict's guard]: a check reading `kwargs['attention_mask']` may come
        before the check of kwargs' keys (cheaper first) and raises KeyError when the key is absent; the log said
        `INSTANCE_ATTR_ABSENT ... (the check raised KeyError)`. The failing check of that dict itself (its keys, or
        `'m' in kw`), later in the function, is the one named, followed by the raising check (only checks of the
        dict itself are evaluated)."""
        if not isinstance(outcome.error, KeyError):
            return None
        raised = f"the check raised KeyError: {str(outcome.error)[:120]}"
        for later in self.guards[index + 1:]:
            if guard.source.startswith(later.source + "["):
                failed, result = check(later, self.namespace, frame_locals)
                if not result.held:
                    failure = self._failure(failed, result, frame_locals)
                    first = f" (checked before it: {guard.kind} on {guard.source}, {raised})"
                    return Failure(failure.guard, failure.actual + first)
        return None

    def _check(self, index: int, guard: Guard, frame_locals: dict, recorded: bool) -> tuple[Guard, Outcome]:
        reached = self.namespace.get("___reached", NOT_RECORDED)[0]
        if recorded and guard.kind == "CACHED_CALL" and reached is not None and reached >= index:
            return guard, Outcome(reached > index, False if reached == index else NONE)
        return check(guard, self.namespace, frame_locals)

    def _failure(self, guard: Guard, outcome: Outcome, frame_locals: dict) -> Failure:
        return Failure(guard, described(guard, outcome, self.namespace, frame_locals))

    def all_failures(self, *args: Any, **kwargs: Any) -> list[Failure]:
        return self.miss_failures(args, kwargs, recorded=False)

    def miss_failures(self, args: tuple, kwargs: dict, recorded: bool = True) -> list[Failure]:
        """Every failing guard, except those past a failed one that would read through an object no
        longer known safe to read (NOTE [Guards run no user code]): after a failed lookup fact, only
        guards reading nothing but class dicts; after a failed pin of `P`, none reading through `P` or
        passing it anywhere (NOTE [No user code past a failed pin])."""
        frame_locals = self._bind(*args, **kwargs)
        failures: list[Failure] = []
        unsafe: dict[str, type | None] = {}  # a pin that failed -> the type of its object now (None: unknown)
        fact_failed = False
        facts = _FactsTable()  # NOTE [Guard facts once per pass]
        for i, g in enumerate(self.guards):
            fact = facts[g.expr]
            if any(b in unsafe for b in fact.bases) or fact_failed and not all(self._named(b) for b in fact.bases):
                continue
            if unsafe and not mentions_safe(g.expr, unsafe):  # NOTE [No user code past a failed pin]
                continue
            if failures and g.kind == "CACHED_CALL":  # NOTE [No cached call past a failed guard]
                continue
            failed, outcome = self._check(i, g, frame_locals, recorded)  # NOTE [Explanations run each check once]
            if not outcome.held:
                failures.append(self._failure(failed, outcome, frame_locals))
                if g.kind == "TORCH_MODES":  # NOTE [No guard past a new torch mode]
                    break
                subject = facts[failed.expr].subject  # a combined guard's failing part: `___type(x) is T`
                if subject is not None:
                    unsafe[subject] = type_now(failed, outcome)
                fact_failed = fact_failed or g.kind in _LOOKUP_FACTS or ".__dict__[" in g.expr
        return failures

    def _named(self, base: str) -> bool:
        """`base` is an object of the namespace, or its `__dict__`. Not a frame argument, even one whose
        generated name starts with `___` like the namespace's (a resume function's `___stack2`, a renamed
        `.0`: NOTE [Locals that are not identifiers] in capture/sources.py): read past a failed lookup fact,
        its attribute ran a property the class had gained since."""
        name = base[:-len(".__dict__")] if base.endswith(".__dict__") else base
        return name.isidentifier() and name in self.namespace


# NOTE [One explanation per miss]: a miss explains itself several times over: a float that changed
# (NOTE [Dynamic floats]), a size or int that changed (NOTE [Automatic dynamic]), values carried across a
# break, and the verbose recompile log each asked the newest entry for all its failing guards, and each
# answer evaluated every guard of the entry one by one (eval of each expression, parsed again once an
# entry has more expressions than the caches keep): about 20 s per question for 300 conv blocks
# (cProfile). The guards read the same call's arguments each time, with no user code run in between, so
# one miss asks each entry once and the answers are shared.
class Explanations:
    """`explain(entry)`: `entry.guard.all_failures(*args, **kwargs)` for one miss, computed once per entry."""

    def __init__(self, args: tuple, kwargs: dict) -> None:
        self.args, self.kwargs = args, kwargs
        self.answers: dict[int, tuple[Any, list[Failure]]] = {}  # id(entry) -> (entry, failures)

    def __call__(self, entry: Any) -> list[Failure]:
        known = self.answers.get(id(entry))
        if known is None:
            known = self.answers[id(entry)] = (entry, entry.guard.miss_failures(self.args, self.kwargs))
        return known[1]


_LOOKUP_FACTS = ("CLASS_ATTR_ABSENT", "INSTANCE_ATTR_ABSENT", "INSTANCE_ATTR_PRESENT", "MODULE_ATTR_ABSENT")

# NOTE [No cached call past a failed guard]: a CACHED_CALL guard calls the user's lru_cache function with
# the arguments of the trace (NOTE [Cached functions] in capture/cached_calls.py). The check function
# reaches it only when the guards before it (those arguments' own checks) hold, so it makes the lookup the
# eager call makes. all_failures, evaluating guards past a failed one, called it with another call's
# arguments: `h(1)` with `k == 2`, a lookup eager never makes, which ran `h` again once a bounded cache had
# evicted 1 (its side effects too) and reordered the cache. Past a failure it is not evaluated.

# NOTE [No guard past a new torch mode]: under a TorchFunctionMode the entry was not made for, every tensor
# method a later guard calls (`x.stride()`, `x.is_neg()`, `x.shape`) is handed to the mode's
# __torch_function__, a call eager never makes: a mode logging its calls saw 7 more on the first call under
# it. all_failures stops at a failed mode-count guard (the frame runs eagerly under the mode anyway,
# NOTE [Torch function and dispatch modes] in capture/convert.py); the check function and first_failure
# stop there already, as these guards come first (cheapest).


def _reraise_from_signal_handler(e: Exception) -> None:
    """A guard that raises fails, but not when a signal handler raised (NOTE [Signal handlers while a compiled
    frame runs] in signal_handlers.py): that exception reaches the caller."""
    from ..signal_handlers import reraise_if_from_signal_handler
    reraise_if_from_signal_handler(e)


# NOTE [Short values in recompile logs]: a guard's actual value is written into the `recompiles` log line;
# repr() of a tensor or of a tuple of tensors (a `past_key_values` that was None on the first call) printed
# every element, hundreds of lines per recompile. Tensors are written as their type, shape and dtype, and
# any other repr is cut to _REPR_LIMIT characters.
_REPR_LIMIT = 200


def short_repr(value: Any, depth: int = 0) -> str:
    """repr(value) for a log line: tensors by shape and dtype, containers of them by their items, cut."""
    import torch
    if is_a(value, torch.Tensor):  # NOTE [Type facts without user code] (guards/plain_reads.py)
        with torch._C.DisableTorchFunctionSubclass():
            shape, dtype = torch.Tensor.shape.__get__(value), torch.Tensor.dtype.__get__(value)
        return f"{type(value).__name__}(shape={tuple(shape)}, dtype={dtype})"
    if type(value) in (tuple, list) and depth < 3:
        items = ", ".join(short_repr(v, depth + 1) for v in value[:8])
        more = ", ..." if len(value) > 8 else ("," if type(value) is tuple and len(value) == 1 else "")
        text = ("({})" if type(value) is tuple else "[{}]").format(items + more)
    elif type(value) is dict and depth < 3:  # a SHAPE_ENV guard's symbol values: {'x.size(0)': 6}
        pairs = list(value.items())
        items = ", ".join(f"{short_repr(k, depth + 1)}: {short_repr(v, depth + 1)}" for k, v in pairs[:8])
        text = "{" + items + (", ..." if len(pairs) > 8 else "") + "}"
    elif type(value) is types.ModuleType:  # its repr() may call the module's __getattr__
        text = module_text(value)
    elif is_a(value, type):
        text = type.__repr__(value)
    elif type(value) in _PLAIN_REPR or is_a(value, (torch.dtype, torch.device, torch.Size)) or \
            is_a(value, enum.Enum) and type(value).__repr__ in (enum.Enum.__repr__, enum.IntEnum.__repr__):
        text = repr(value)
    else:  # NOTE [Guard texts run no user code] (capture/graph_calls.py): a failing guard's object, by type and id
        text = f"<{type(value).__qualname__} object at {id(value):#x}>"
    return text if len(text) <= _REPR_LIMIT else text[:_REPR_LIMIT] + "..."


_PLAIN_REPR = (int, float, complex, str, bytes, bool, type(None), types.FunctionType, types.BuiltinFunctionType,
               types.ModuleType, slice, range)


# NOTE [Compiled guard expressions]: a recompile explains itself by evaluating every guard of every entry
# of the frame one by one (all_failures, first_failure), and `eval` of a string compiles it each time;
# the entries of one frame repeat most expressions. The code is what `eval(expr)` compiles: leading spaces
# and tabs stripped, file "<string>", this module's compiler flags. A SyntaxError is raised (not kept).
_expression_code = compiled


# NOTE [Guards run no user code]: a guard reading `o.name` runs whatever `type(o)` resolves `name` to: a
# property added to the class later, a `__getattr__`, a `__getattribute__`. The trace guards the facts that
# make such a read a plain dict read (the type of `o`, and NOTE [Lookup facts] for `name`), so the read is
# safe once those hold, and only then. Guards are therefore checked cheapest first (a stable sort by cost),
# except that a guard reading an attribute or item of `P` comes after every earlier guard pinning `P`
# itself (`___type(P) is K`, `P is obj`): those are pulled forward. The lookup facts are identity-cost
# guards on class dicts, added before the value they justify is guarded, so they precede it already.
# Shared subexpressions (NOTE [Guard subexpressions]) are computed right before their first use.
def _order(guards: Sequence[Guard], facts: dict[str, _Facts] | None = None) -> list[Guard]:
    """De-duplicated (the same expression is checked once), cheapest first, and every guard after the
    guards that pin the objects it reads through."""
    facts = _FactsTable() if facts is None else facts
    seen: set[str] = set()
    unique = []
    for g in guards:
        if g.expr not in seen:
            seen.add(g.expr)
            unique.append(g)
    pinned: dict[str, list[int]] = {}
    for i, g in enumerate(unique):
        subject = facts[g.expr].subject
        if subject is not None:
            pinned.setdefault(subject, []).append(i)
    ordered: list[Guard] = []
    done: set[int] = set()

    def emit(i: int) -> None:
        if i in done:
            return
        done.add(i)
        for base in facts[unique[i].expr].bases:
            for j in pinned.get(base, ()):
                if j < i:
                    emit(j)
        ordered.append(unique[i])

    for i in sorted(range(len(unique)), key=lambda i: unique[i].cost):
        emit(i)
    return ordered


# NOTE [Parsed guard expressions]: ordering and sharing read three facts off each guard's expression (the
# object it pins, the objects it reads through, its attribute/item chains). Each expression is parsed
# once for all three, and the facts are kept per expression text: frames compiled in one process repeat
# most of their guard expressions (`___type(x) is ___K0`, a module's parameter paths), and parsing was
# most of the cost of compiling a guard function.
@dataclasses.dataclass(frozen=True)
class _Facts:
    subject: str | None  # `P` for a guard that pins an object: `___type(P) is K` or `P is obj`
    bases: frozenset[str]  # the objects whose attributes or items it reads (`P` for `P.name`, `P[key]`)
    spans: tuple[tuple[int, int, str], ...]  # its chains: (start, end, text), UTF-8 byte offsets


@functools.lru_cache(maxsize=16384)
def _facts(expr: str) -> _Facts:
    tree = ast.parse(expr, mode="eval")
    nodes = _walk(tree)
    texts: dict[int, str | None] = {}  # NOTE [Chain texts built link by link]
    data = expr.encode()  # ast offsets are UTF-8 byte offsets
    links = [(n, base) for n in nodes if (base := _link_base(n)) is not None]
    called = {id(n.func) for n in nodes if type(n) is ast.Call}
    spans = tuple((n.col_offset, n.end_col_offset, data[n.col_offset:n.end_col_offset].decode())
                  for n, _ in links if id(n) not in called and _chain_text(n, texts) is not None)
    bases = frozenset(text for _, base in links if (text := _chain_text(base, texts)) is not None)
    return _Facts(_subject(tree.body, texts), bases, spans)


# NOTE [Guard facts once per pass]: `_facts` keeps the facts of the last 16384 expressions. A large model's
# entry has more: EfficientNet-B7 or 300 conv blocks guard ~22000 distinct expressions, whose ~22000
# shared chains make 44000 keys. Compiling the guard function read the facts of every expression three
# times in turn (ordering twice, then sharing) and the least recently used was always the next one read, so
# every read parsed again: 173000 parses, about 100 s of a 270 s cold compile of 300 blocks (cProfile).
# Each pass (compiling one guard function, explaining one miss) reads them through one table, which parses
# each expression at most once; the chains' own spans are cut from the spans of the expression that holds
# them (NOTE [Guard subexpressions]) instead of parsing the chains again.
class _FactsTable(dict):
    def __missing__(self, expr: str) -> _Facts:
        facts = self[expr] = _facts(expr)
        return facts


# NOTE [Nodes in walk order]: the nodes in `ast.walk`'s order (breadth first, each node's children in field
# order), without its generator per node: the spans keep that order, and so do the names of shared
# subexpressions (NOTE [Guard subexpressions]). NOTE [Parsed guard expressions] reads them.
def _walk(tree: ast.AST) -> list[ast.AST]:
    nodes = [tree]
    for node in nodes:  # grows while it is read
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, ast.AST):
                nodes.append(value)
            elif isinstance(value, list):
                nodes.extend(item for item in value if isinstance(item, ast.AST))
    return nodes


# NOTE [Chain texts built link by link]: a guard expression on a module's parameter is a chain of ~10
# links (`self._modules['a']._modules['b']..._parameters['w']`), and every link is the base of the next.
# The text of each rooted link (what `ast.unparse` gives for it) is built from its base's text, memoized
# per node of one expression, instead of unparsing every link from the root (quadratic in the chain's
# length: 14% of the CPU time of compiling transformers models, tests/models/hf). The same text as
# `ast.unparse`: a rooted chain has no parentheses, and only its constant subscripts are unparsed.
def _chain_text(node: ast.AST, texts: dict[int, str | None]) -> str | None:
    """`ast.unparse(node)` when `node` is rooted (a chain of attribute reads, plain or raw, and constant
    subscripts starting at a name), else None; memoized in `texts`."""
    key = id(node)
    if key in texts:
        return texts[key]
    text = None
    if isinstance(node, ast.Name):
        text = node.id
    elif (base := _link_base(node)) is not None \
            and not (isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Constant)) \
            and (base_text := _chain_text(base, texts)) is not None:
        if isinstance(node, ast.Attribute):
            text = f"{base_text}.{node.attr}"
        elif isinstance(node, ast.Subscript):
            text = f"{base_text}[{_constant_text(node.slice)}]"
        elif len(node.args) == 1:  # NOTE [Raw dict contents shared]
            text = f"{node.func.id}({base_text})"
        else:  # ___raw_attr(P, 'name')
            text = f"___raw_attr({base_text}, {_constant_text(node.args[1])})"
    texts[key] = text
    return text


def _constant_text(node: ast.Constant) -> str:
    """`ast.unparse(node)`, kept per value for the keys and names that chains repeat (`._modules['0']`)."""
    value = node.value
    if type(value) is str or type(value) is int:
        return _unparsed_constant(type(value), value, node.kind)
    return ast.unparse(node)


@functools.lru_cache(maxsize=8192)
def _unparsed_constant(kind: type, value: Any, prefix: str | None) -> str:
    return ast.unparse(ast.Constant(value, prefix))


def _subject(tree: ast.expr, texts: dict[int, str | None]) -> str | None:
    if not (isinstance(tree, ast.Compare) and len(tree.ops) == 1 and isinstance(tree.ops[0], ast.Is)):
        return None
    left = tree.left
    if isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "___type" \
            and len(left.args) == 1:
        left = left.args[0]
    return _chain_text(left, texts)


def compile_guards(
    guards: Sequence[Guard],
    params: str,
    namespace: dict[str, Any],
    defaults: tuple | None = None,
    kwdefaults: dict | None = None,
    name: str = "guard",
    source: str | None = None,
) -> GuardFunction:
    """Generate the guard function. `params` is the frame's parameter list as source text.

    `source`, when given, is the text this function generated earlier for the same guards (the frame
    cache keeps it), which is then only executed."""
    _counter[0] += 1
    if source is None:
        facts = _FactsTable()  # NOTE [Guard facts once per pass]
        ordered = _order(guards, facts)
        source = _guard_source(ordered, params, re.sub(r"\W", "_", name), facts)
    else:  # NOTE [Guard order of a kept source]
        guards = list(guards)
        ordered = lambda: _order(guards)  # noqa: E731
    fn_name, bind_name = re.findall(r"^def (\w+)\(", source, re.M)[:2]
    ns = dict(BASE_NAMESPACE)
    ns.update(namespace)
    if "___reach(" in source:  # NOTE [Cached calls explained without calling them]
        ns["___reached"] = [None]
    memos = set(re.findall(r"\b(___memo\d+)\b", source))
    if memos:  # NOTE [Remembered tensor facts]
        from .. import tensor_watch
        tensor_watch.install()
        ns["___data_epoch"] = tensor_watch.EPOCH
        ns["___remember_tensor"] = _remember_tensor
        ns["___version_or_none"] = _version_or_none
        ns["___first3"] = slice(0, 3)
        ns.update({memo: list(_EMPTY_MEMO) for memo in memos})
    filename = f"<framejit guard {_counter[0]}>"
    exec(compile(source, filename, "exec"), ns)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    check, bind = ns[fn_name], ns[bind_name]
    for fn in (check, bind):
        fn.__defaults__ = defaults
        fn.__kwdefaults__ = kwdefaults
    return GuardFunction(ordered, check, bind, source, ns)


# NOTE [Guard order of a kept source]: a source kept by the frame cache already checks the guards in
# `_order`'s order; the ordered list is needed only to explain a failure (first_failure, all_failures,
# explain), so a restored entry orders its guards when one of those first reads them. Ordering parses and
# unparses every guard expression: 0.15 s of the 0.47 s a warm process spent on the zoo's mlp first call.
def _guard_source(ordered: list[Guard], params: str, name: str, facts: dict[str, _Facts]) -> str:
    fn_name = f"___{name}_{_counter[0]}"
    lines = [f"def {fn_name}({params}):"]
    remembered = _remembered_tensor_checks(ordered)
    if remembered:  # NOTE [Facts remembered with what was read before them]
        lines.append(f"    {EPOCH_LOCAL} = ___data_epoch[0]")
    shared, rewrite = _common_subexpressions([remembered.get(g.expr, g.expr) for g in ordered], facts)
    definitions = dict(shared)
    defined: set[str] = set()

    def define(text: str) -> None:  # NOTE [Guards run no user code]: each shared chain before its first use
        for local in re.findall(r"___s\d+\b", text):
            if local in definitions and local not in defined:
                defined.add(local)
                define(definitions[local])
                lines.append(f"    {local} = {definitions[local]}")

    for i, g in enumerate(ordered):
        comment = f"  # {g.source}" + (f" | {g.origin}" if g.origin else "")
        check = rewrite(remembered.get(g.expr, g.expr))
        if g.kind == "CACHED_CALL":  # NOTE [Cached calls explained without calling them]
            check = f"___reach(___reached, {i}) or ({check})"
        define(check)
        lines.append(f"    if not ({check}): return False{_one_line(comment)}")
    lines.append("    return True")
    lines.append(f"def ___bind_{_counter[0]}({params}):")
    lines.append(f"    return {_locals_literal(params)}")
    return "\n".join(lines) + "\n"


# NOTE [Binding without locals()]: the bind function returns the frame's parameters as a dict literal of
# its own parameter names, not `locals()`: a frame may have a parameter called `locals` (inspect's
# `_signature_from_callable(obj, *, ..., globals=None, locals=None, ...)`, reached once `inspect.signature`
# breaks inside it), and `locals()` then called that None: TypeError out of the compiled call.
def _locals_literal(params: str) -> str:
    args = ast.parse(f"def f({params}): pass").body[0].args
    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return "{" + ", ".join(f"{n!r}: {n}" for n in names) + "}"


# NOTE [Guard subexpressions]: guards on a module's parameters repeat long source paths
# (`self._modules['0']._parameters['weight']` six times in one tensor check). Attribute/item chains
# used more than once are computed once into locals, shortest first so that longer chains build on
# shorter ones, each right before the first guard that uses it (not earlier: NOTE [Guards run no user
# code]). Any exception makes the whole guard fail.
def _common_subexpressions(exprs: list[str], facts: dict[str, _Facts] | None = None):
    """(shared definitions, expr -> rewritten expr). Works on text spans (ast offsets), no unparsing."""
    facts = _FactsTable() if facts is None else facts
    spans_of: dict[str, list[tuple[int, int, str]]] = {}
    counts: dict[str, int] = {}
    holder: dict[str, tuple[tuple[int, int, str], ...]] = {}  # a chain's text -> spans of an expression holding it
    for expr in exprs:
        spans = facts[expr].spans
        spans_of[expr] = spans
        for _, _, text in spans:
            counts[text] = counts.get(text, 0) + 1
            holder.setdefault(text, spans)
    chosen = sorted((t for t, n in counts.items() if n > 1), key=len)
    names = {text: f"___s{i}" for i, text in enumerate(chosen)}
    shared = [(names[t], _replace_spans(t, _inner_spans(t, holder[t]), names, skip=t)) for t in chosen]
    rewritten = {expr: _replace_spans(expr, spans, names) for expr, spans in spans_of.items()}
    return shared, lambda expr: rewritten.get(expr, expr)


def _inner_spans(text: str, spans: tuple[tuple[int, int, str], ...]) -> list[tuple[int, int, str]]:
    """The spans `_facts(text)` finds in the chain `text`, cut from the spans of an expression holding it:
    a rooted chain is a subtree of that expression (no parentheses, no call inside), so its links are the
    spans lying within its own, shifted to start at 0 (NOTE [Guard facts once per pass])."""
    start, end = next((s, e) for s, e, t in spans if t == text)
    return [(s - start, e - start, t) for s, e, t in spans if start <= s and e <= end]


def _replace_spans(expr: str, spans: list[tuple[int, int, str]], names: dict[str, str], skip: str | None = None) -> str:
    """Replace the outermost chosen chains (right to left, so offsets stay valid)."""
    picked: list[tuple[int, int, str]] = []
    reach = -1  # the furthest end of a picked span: all of them start at or before `start`
    for start, end, text in sorted(spans, key=lambda s: (s[0], -s[1])):
        if text in names and text != skip and end > reach:  # inside no picked span
            picked.append((start, end, text))
            reach = end
    data = expr.encode()
    for start, end, text in sorted(picked, reverse=True):
        data = data[:start] + names[text].encode() + data[end:]
    return data.decode()


def _link_base(node: ast.AST) -> ast.AST | None:
    """`P` for one link of a chain: `P.name`, `P[key]`, or `___raw_attr(P, 'name')` (NOTE [Raw attribute
    reads] in capture/sources.py); None for anything else."""
    kind = type(node)  # ast.parse makes no subclasses
    if kind is ast.Attribute or kind is ast.Subscript:
        return node.value
    if (kind is ast.Call and type(node.func) is ast.Name and node.func.id == "___raw_attr"
            and len(node.args) == 2 and type(node.args[1]) is ast.Constant and not node.keywords):
        return node.args[0]
    if (kind is ast.Call and type(node.func) is ast.Name and len(node.args) == 1 and not node.keywords
            and _RAW_ITEMS_CALL.fullmatch(node.func.id)):
        return node.args[0]
    return None


# NOTE [Raw dict contents shared]: an optimizer's state is a defaultdict keyed by parameters, read through
# `raw_dict_items(state)` (NOTE [Dict subclasses] in capture/dict_objects.py), a copy of the whole dict; every
# guard on a state tensor (`raw_dict_items(state)[p]['exp_avg']`, a dozen lines per parameter) made that copy
# again: a compiled AdamW step over 100 parameters spent 230 ms per call in its guard (stock torch.compile's whole
# call: 32 ms). The call is a link of a chain like an attribute read (its base is its argument), so the copy is
# made once per check into a shared local (NOTE [Guard subexpressions]), after the guards that pin the dict.
# The functions are the capture's own readers, named in the namespace as `___c<N>_raw_dict_items`.
_RAW_ITEMS_CALL = re.compile(r"___c\d+_raw_(?:o)?dict_items")


# NOTE [Remembered tensor facts]: a module's parameters and buffers are graph inputs, so every call
# checked each one's type, dtype, device, sizes, strides, offset, requires_grad and lazy negation bit
# (eight reads, three of them method calls: about half of a 4-layer MLP's guard). They are the same
# objects call after call, and an object keeps those facts until something changes them in place, which
# either bumps its version counter (every in-place op, view ops in place included: `t_`, `transpose_`,
# `squeeze_`, `unsqueeze_`, `as_strided_`, `resize_`, `set_`, in no_grad and in inference mode) or is
# counted in tensor_watch.EPOCH: `.data` reads and writes of a watched tensor (`module.to(dtype)` and
# `module.double()` assign `.data`), `torch._C._set_neg`/`_set_conj`, `torch.utils.swap_tensors` (the
# object gets another TensorImpl, whose counter may read the same), a counter put back by
# `_unsafe_set_version_counter`. requires_grad (`requires_grad_`, `detach_`) and the type (`__class__`
# assignment) change without any of these, so they stay checked on every call. So the guard of such a
# tensor (one reached through a module's `_parameters` or `_buffers`) is
#   TYPE and REQUIRES_GRAD and (
#       (HELD := memo[0]) is T and (VERSION := T._version) == memo[2] and memo[1] == ___epoch
#       or (HELD is T or (INFERENCE := memo[4]) is T or (VERSION := ___version_or_none(T)) is VERSION)
#          and THE OTHER FACTS
#          and (HELD is T and memo.__setitem__(___first3, (T, ___epoch, VERSION)) is None
#               or HELD is not T and INFERENCE is T or ___remember_tensor(memo, T, MODULE, ___epoch, VERSION)))
# where the memo (one per tensor per guard function, made empty by compile_guards for every `___memoN`
# name of the source, so kept sources restore it) holds the last object that passed every fact and the
# epoch and version it had then; HELD, VERSION and INFERENCE are locals of the guard function (`___heldN`,
# `___versionN`, `___inferenceN`) and `___epoch` is EPOCH read in the function's first line.
# NOTE [Facts remembered with what was read before them]: the epoch and the version a memo records are
# always values read BEFORE the facts were checked (the epoch at the guard's start, the version in the
# first line of the check or before THE OTHER FACTS), never after. Another thread that changes the tensor
# while this guard runs then leaves a memo whose version or epoch is older than the tensor's, so the next
# call checks in full again; reading them after the facts (as before) could record the new version with
# the old facts, and every later call would have trusted facts that no longer hold. tensor_watch bumps
# EPOCH after each change it counts too (not only before), for the same reason. A version mismatch
# (a training loop bumps every version at every step) costs the old full check plus two identity tests,
# a version read and one list store (no Python call): the version was read by the failed fast test.
# Each memo read appears once, and T's `_version` once, so no shared subexpression reads the tensor
# before its type is checked (NOTE [Guards run no user code]). The memo holds the tensor itself, not a
# weak reference: `torch.utils.swap_tensors` (and so `module.to()` under swap-on-conversion) refuses a
# tensor with weak references, and an id could be reused by a new tensor after the old one died. So that
# it keeps no weight alive longer than the module holding it, `___remember_tensor` forgets it when that
# module (the chain before `._parameters[`) dies (a finalizer on the module); the store without a call
# only refreshes the epoch and version of the tensor the memo already holds. Inference tensors (no
# version counter) are never remembered: the memo keeps the last one (memo[4]) so that it is checked in
# full without a call.
# The facts as a list (`parts`) are unchanged: failures, `first_failure` and the reference evaluator read
# them. A tensor that is not the same object on each call (an argument) keeps the plain check:
# remembering it would fail every time. Measured (tests/guards/test_guard_cost2.py counts; /tmp timing in
# the issue 17 report): a remembered tensor costs 4 reads and no method call instead of 8 reads and 3
# method calls.
_REMEMBERED = ("._parameters[", "._buffers[")
EPOCH_LOCAL = "___epoch"  # NOTE [Facts remembered with what was read before them]


def _remembered_tensor_checks(ordered: Sequence[Guard]) -> dict[str, str]:
    """guard expression -> its check with remembered facts, for the tensors NOTE [Remembered tensor facts]
    covers."""
    out: dict[str, str] = {}
    for g in ordered:
        parts = g.parts
        if g.kind != "TENSOR_MATCH" or len(parts) < 2 or parts[0].kind != "TENSOR_TYPE":
            continue
        match = re.fullmatch(r"___type\((.+)\) is (___\w+)", parts[0].expr)
        grads = [p.expr for p in parts if p.kind == "TENSOR_REQUIRES_GRAD"]
        if match is None or len(grads) != 1 or not any(k in match.group(1) for k in _REMEMBERED):
            continue
        if not grads[0].startswith(f"{match.group(1)}.requires_grad "):  # a subclass with its own
            continue  # __torch_function__: `_version` would run it (NOTE [Guards run no user code]); checked in full
        k = len(out)
        t, memo = match.group(1), f"___memo{k}"
        held, version, inference, epoch = f"___held{k}", f"___version{k}", f"___inference{k}", EPOCH_LOCAL
        owner = max(t.rfind(key) for key in _REMEMBERED)
        module = t[:owner]
        rest = " and ".join(f"({p.expr})" if " or " in p.expr else p.expr for p in parts[1:]
                            if p.kind != "TENSOR_REQUIRES_GRAD")
        fast = f"({held} := {memo}[0]) is {t} and ({version} := {t}._version) == {memo}[2] and {memo}[1] == {epoch}"
        # before THE OTHER FACTS: VERSION is bound (read by `fast`, or here) unless T is the inference
        # tensor remembered in memo[4]
        before = f"({held} is {t} or ({inference} := {memo}[4]) is {t} or " \
                 f"({version} := ___version_or_none({t})) is {version})"
        again = f"{held} is {t} and {memo}.__setitem__(___first3, ({t}, {epoch}, {version})) is None"
        remember = f"({again} or {held} is not {t} and {inference} is {t} or " \
                   f"___remember_tensor({memo}, {t}, {module}, {epoch}, {version}))"
        out[g.expr] = f"{parts[0].expr} and {grads[0]} and ({fast} or {before} and {rest} and {remember})"
    return out


def _forget(memo: list) -> None:
    memo[:] = _EMPTY_MEMO


# NOTE [Remembered tensor facts]: [tensor, epoch, version, id of its module, an inference tensor of that
# module (checked in full, not remembered again), the finalizer that forgets when the module dies]
_EMPTY_MEMO = (None, -1, -1, None, None, None)


def _version_or_none(tensor: Any) -> int | None:
    """The version counter of a tensor whose type was checked; None for an inference tensor (it has none)."""
    return None if tensor.is_inference() else tensor._version


def _remember_tensor(memo: list, tensor: Any, owner: Any, epoch: int, version: int | None) -> bool:
    """NOTE [Remembered tensor facts]: `tensor`, held by the module `owner`, passed every fact; remember
    it until `owner` dies, with the epoch and version read before its facts were checked (NOTE [Facts
    remembered with what was read before them]; None: an inference tensor). Always True."""
    if memo[3] != id(owner):  # (a dead owner's id is never here: its finalizer ran _forget)
        if memo[5] is not None:
            memo[5].detach()
        try:
            finalizer = weakref.finalize(owner, _forget, memo)
        except TypeError:  # an owner without weak references: remember nothing
            _forget(memo)
            return True
        memo[:] = (None, -1, -1, id(owner), None, finalizer)
    if version is None:  # no version counter
        memo[0], memo[4] = None, tensor
    else:
        memo[:3] = (tensor, epoch, version)
    return True


def _one_line(text: str) -> str:
    return text.replace("\n", " ")
