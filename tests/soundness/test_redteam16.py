"""Adversarial differential programs, sixteenth round (issue 12, red team): each runs eagerly and compiled
on separate but equal state over several calls, changing what the code reads between calls, and compares
results, printed output and the state left behind."""
from __future__ import annotations

import builtins
import collections.abc
import functools
import sys
import types

import pytest
import torch

import framejit


def _plain(value):
    """A comparable form of a result: tensors as (dtype, values), containers element by element."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype), value.detach().tolist())
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [_plain(v) for v in value]
    if isinstance(value, dict):  # a namespace's __builtins__ is not state the programs change (and it may hold
        # itself: exec() into builtins' own dict adds '__builtins__' there)
        return "dict", [(k, _plain(v)) for k, v in value.items() if k != "__builtins__"]
    return value


def _runs(make, calls, backend="eager"):
    """(eager, compiled) outcomes of `calls` (each: (fn, state) -> result) on fresh state from `make`."""
    runs = []
    for compiled in (False, True):
        framejit.reset()
        fn, state = make()
        if compiled:
            fn = framejit.compile(fn, backend=backend)
        out = []
        for call in calls:
            try:
                out.append(_plain(call(fn, state)))
            except Exception as e:  # noqa: BLE001 - compared with eager
                out.append((type(e).__name__, str(e)))
        out.append(_plain(state))
        runs.append(out)
    return runs


# ---- NOTE [Stores under a buffer's name] (capture/side_effects.py) ----------------------------------------

class _Buffered(torch.nn.Module):
    def __init__(self, read):
        super().__init__()
        self.register_buffer("b", torch.ones(2))
        self.register_buffer("kept", torch.ones(1), persistent=False)
        self.read = read

    def forward(self, x):
        held = self._buffers
        self.b = x * 2 if x.sum() != 0 else None
        return self.read(self, held)


_BUFFER_READS = {
    "buffers": lambda m, held: sum(b.sum() for b in m.buffers()),
    "named_buffers": lambda m, held: [(n, b + 0) for n, b in m.named_buffers()],
    "slot_item": lambda m, held: m._buffers["b"],
    "slot_items": lambda m, held: [v for v in m._buffers.values()],
    "held_slot": lambda m, held: held["b"],
}


@pytest.mark.parametrize("read", sorted(_BUFFER_READS))
def test_a_store_under_a_buffers_name_is_seen_by_reads_of_the_buffers(read):
    # before: `self.b = x * 2` (b a buffer) was replayed after the graph, and reads of the real `_buffers`
    # later in the same graph (buffers(), named_buffers(), self._buffers[..], a `_buffers` held before the
    # store) gave the old buffer; `self.b = None` still counted it
    def make():
        m = _Buffered(_BUFFER_READS[read])
        return m, m.__dict__["_buffers"]

    xs = (torch.ones(2), torch.full((2,), 3.0), torch.zeros(2), torch.ones(2) * 5)
    calls = [lambda fn, state, x=x: fn(x) for x in xs]
    eager, compiled = _runs(make, calls)
    assert eager == compiled


# ---- NOTE [Raw stores into modules] (capture/getattribute.py) ---------------------------------------------

class _RawStore(torch.nn.Module):
    def __init__(self, read):
        super().__init__()
        self.register_buffer("b", torch.ones(2))
        self.read = read

    def forward(self, x):
        object.__setattr__(self, "b", x * 3)
        return self.b + 1, self.read(self)


_RAW_STORE_READS = {
    "none": lambda m: None,
    "instance_dict": lambda m: sorted(k for k in vars(m) if not k.startswith("_")),
    "buffers": lambda m: list(m.buffers()),
}


@pytest.mark.parametrize("read", sorted(_RAW_STORE_READS))
def test_object_setattr_on_a_module_goes_past_module_setattr(read):
    # before: object.__setattr__(self, 'b', t) for a buffer b was replayed as self.b = t (Module.__setattr__),
    # which replaced the buffer in _buffers where eager puts t in self.__dict__ and keeps the buffer
    def make():
        m = _RawStore(_RAW_STORE_READS[read])
        return m, m.__dict__

    calls = [lambda fn, state, x=x: fn(x) for x in (torch.ones(2), torch.full((2,), 3.0), torch.zeros(2))]
    eager, compiled = _runs(make, calls)
    assert eager == compiled


# ---- NOTE [Registering stores into modules] (capture/modules.py check_marked_store) -----------------------

class _StoresIncoming(torch.nn.Module):
    def forward(self, x, t):
        self.c = t
        return x + 1, [n for n, _ in self.named_buffers()], [n for n, _ in self.named_parameters()]


def _marked(kind):
    t = torch.ones(2)
    if kind == "buffer":
        return torch.nn.Buffer(t)
    t._is_param = True
    return t


@pytest.mark.parametrize("kind", ["buffer", "param"])
def test_storing_a_tensor_marked_as_a_buffer_or_parameter_registers_it(kind):
    # before: Module.__setattr__ registers a tensor marked _is_buffer (nn.Buffer(t)) or _is_param under a new
    # name, but the store was recorded as a plain one: named_buffers()/named_parameters() later in the graph
    # missed 'c'
    def make():
        m = _StoresIncoming()
        return m, m.__dict__

    calls = [lambda fn, state: fn(torch.ones(2), _marked(kind)), lambda fn, state: fn(torch.ones(2), torch.ones(2)),
             lambda fn, state: fn(torch.ones(2), _marked(kind))]
    eager, compiled = _runs(make, calls)
    assert eager == compiled


# ---- NOTE [Stores that raise] (capture/side_effects.py) ----------------------------------------------------

class _Slotted:
    __slots__ = ("a",)

    def __init__(self):
        self.a = 1


class _BufferHolder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.ones(2))


_RAISING_STORES = {
    "slots_without_the_name": (_Slotted, "b", 5),
    "plain_object": (object, "z", 1),
    "non_tensor_under_a_buffer_name": (_BufferHolder, "b", 3),
}


@pytest.mark.parametrize("case", sorted(_RAISING_STORES))
def test_a_store_that_raises_in_eager_raises_inside_the_users_try(case):
    # before: the store was recorded and replayed after the graph, outside the user's try: the handler never
    # ran, the append after the store was made, and the call raised AttributeError/TypeError
    make_target, name, stored = _RAISING_STORES[case]

    def make():
        log = []
        target = make_target()

        def fn(x):
            try:
                if x.shape[0] == 3:
                    setattr(target, name, stored)
                else:
                    target.__setattr__(name, stored)
                log.append("stored")
            except (AttributeError, TypeError) as e:
                log.append(type(e).__name__)
            log.append("after")
            return x + 1

        return fn, log

    calls = [lambda fn, state, n=n: fn(torch.ones(n)) for n in (2, 3, 2)]
    eager, compiled = _runs(make, calls)
    assert eager == compiled


# ---- NOTE [Entries set to None] (capture/modules.py) -------------------------------------------------------

class _TwoOfEach(torch.nn.Module):
    def __init__(self, walk):
        super().__init__()
        self.a = torch.nn.ReLU()
        self.b = torch.nn.Tanh()
        self.p = torch.nn.Parameter(torch.ones(2))
        self.register_buffer("q", torch.ones(2))
        self.walk = walk

    def forward(self, x):
        return self.walk(self, x)


def _through_children(m, x):
    for c in m.children():
        x = c(x)
    return x


_NONE_WALKS = {
    "children": (_through_children, "a", lambda: torch.nn.Sigmoid()),
    "named_modules": (lambda m, x: x + len(list(m.named_modules())), "a", lambda: torch.nn.Sigmoid()),
    "parameters": (lambda m, x: x + sum(p.sum() for p in m.parameters()), "p",
                   lambda: torch.nn.Parameter(torch.full((2,), 3.0))),
    "buffers": (lambda m, x: x + sum(b.sum() for b in m.buffers()), "q", lambda: torch.full((2,), 5.0)),
}


@pytest.mark.parametrize("walk", sorted(_NONE_WALKS))
def test_walks_over_an_entry_set_to_none_and_back(walk):
    # before: a walk skipped the None entry without a guard, and the key list guard held when it was set
    # back: children() walked one module, parameters()/buffers() summed one tensor, after `m.a = None` then
    # `m.a = nn.Sigmoid()`
    fn, name, make_entry = _NONE_WALKS[walk]

    def make():
        m = _TwoOfEach(fn)
        return m, m

    calls = [lambda m, state: m(torch.tensor([-1.0, 1.0])),
             lambda m, state: (setattr(state, name, None), m(torch.tensor([-1.0, 1.0])))[1],
             lambda m, state: (setattr(state, name, make_entry()), m(torch.tensor([-1.0, 1.0])))[1],
             lambda m, state: m(torch.tensor([-2.0, 2.0]))]
    eager, compiled = _runs(make, calls)
    assert eager[:-1] == compiled[:-1]  # (the last entry is the module object itself)


# ---- NOTE [Handlers of callees given up] (capture/caught_exceptions.py) ----------------------------------

def _handled_inside(log, handler_body):
    def callee(x):
        try:
            raise ValueError("inner")
        except ValueError:
            handler_body(log, x)
            log.append("callee handled")
        return x * 2

    def middle(x):
        return callee(x) + 1

    def fn(x):
        try:
            return middle(x)
        except ValueError:
            log.append("caller caught")
            return x

    return fn


_UNTRACEABLE_HANDLERS = {
    "str_of_a_tensor": lambda log, x: log.append(str(x)),
    "getframe": lambda log, x: log.append(sys._getframe().f_code.co_name),
    "print": lambda log, x: print("handling", x.shape),
}


@pytest.mark.parametrize("body", sorted(_UNTRACEABLE_HANDLERS))
def test_a_callees_own_handler_runs_when_it_cannot_be_traced(body, capsys):
    # before: the callee's except clause could not be traced, so the trace gave it up and the exception
    # left the callee; the caller's `except ValueError` was followed instead: the callee's handler never
    # ran and the caller's did, on every call
    def make():
        log = []
        return _handled_inside(log, _UNTRACEABLE_HANDLERS[body]), log

    calls = [lambda fn, state, n=n: fn(torch.ones(n)) for n in (2, 3, 2)]
    eager, compiled = _runs(make, calls)
    assert eager == compiled


class _Raises(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] > 2:
            raise ValueError("too long")
        return x + 1


def test_an_always_called_forward_hook_runs_when_forward_raises():
    # before: torch's exception path (module_hooks._run_always_called) reads torch's global hook dicts, which
    # the trace gave up on, and the caller's `except` took the exception: the hook never ran
    def make():
        log = []
        m = _Raises()
        m.register_forward_hook(lambda mod, args, out: log.append("hook"), always_call=True)

        def fn(x):
            try:
                return m(x)
            except ValueError:
                log.append("caught")
                return x

        return fn, log

    calls = [lambda fn, state, n=n: fn(torch.ones(n)) for n in (2, 3, 2, 3)]
    eager, compiled = _runs(make, calls)
    assert eager == compiled


class _FallbackProperty:
    @property
    def p(self):
        try:
            return self._missing
        except AttributeError:
            print("fallback")
            return 5


class _FallbackMapping(collections.abc.Mapping):
    def __init__(self):
        self.d = {"a": 1}

    def __getitem__(self, key):
        try:
            return self.d[key]
        except KeyError:
            print("fallback")
            return 8

    def __iter__(self):
        return iter(self.d)

    def __len__(self):
        return len(self.d)


_MODELLED_CATCHES = {
    "hasattr": lambda: hasattr(_FallbackProperty(), "p"),
    "getattr_default": lambda: getattr(_FallbackProperty(), "p", -1),
    "mapping_get": lambda: _FallbackMapping().get("zz", -3),
    "mapping_contains": lambda: "zz" in _FallbackMapping(),
}


@pytest.mark.parametrize("catch", sorted(_MODELLED_CATCHES))
def test_a_callees_own_handler_runs_under_hasattr_and_friends(catch, capsys):
    # before: the getter's / __getitem__'s except clause (a print) could not be traced, the exception left
    # the callee and hasattr / getattr(.., default) / Mapping.get / `in` modelled it as absent: False, -1,
    # -3 and False where eager's handler returns a value
    read = _MODELLED_CATCHES[catch]

    def make():
        return (lambda x: (x + 1, read())), None

    calls = [lambda fn, state, n=n: fn(torch.ones(n)) for n in (2, 3, 2)]
    eager, compiled = _runs(make, calls)
    assert eager == compiled


# ---- NOTE [Reads past writes through a namespace dict] (capture/side_effects.py) -------------------------

_NAMESPACE_WRITES = {
    "globals_item": "globals()['X'] = globals()['X'] + 1",
    "globals_update": "globals().update(X=X + 10)",
    "module_dict_item": "vars(mod)['Y'] = mod.Y + 1",
    "module_dict_update": "mod.__dict__.update(Y=mod.Y + 5)",
    "function_dict_item": "vars(helper)['k'] = helper.k + 1",
    "builtins_dict_item": "vars(builtins)['abs'] = lambda v: 42",
}

_NAMESPACE_PROGRAM = """
import builtins
X = 1
def helper():
    pass
helper.k = 1
def fn(x):
    old_abs = builtins.abs
    {write}
    r = (x * X, mod.Y, X, helper.k, abs(-1))
    vars(builtins)['abs'] = old_abs
    return r
"""


@pytest.mark.parametrize("write", sorted(_NAMESPACE_WRITES))
def test_a_write_through_a_namespace_dict_is_seen_by_later_reads(write):
    # before: the write through the dict value was replayed after the graph, and the later read of X or
    # mod.Y in the same graph gave the old value on every call
    def make():
        mod = types.ModuleType("h12rt16_namespace")
        mod.Y = 1
        ns = {"__name__": "h12rt16_namespace_user", "mod": mod}
        exec(_NAMESPACE_PROGRAM.format(write=_NAMESPACE_WRITES[write]), ns)
        return ns["fn"], ns

    def change(fn, ns):
        ns["X"] = 7
        ns["mod"].Y = 3
        return fn(torch.ones(2))

    calls = [lambda fn, ns: fn(torch.ones(2)), lambda fn, ns: fn(torch.ones(2)), change]
    real_abs = builtins.abs
    try:
        eager, compiled = _runs(make, calls)
    finally:
        builtins.abs = real_abs
    assert eager[:-1] == compiled[:-1]  # (the last entry is the namespace, holding the function itself)


def test_a_write_through_a_partials_keywords_is_replayed_and_seen_by_its_call():
    # before: p.keywords of a partial from outside answered the trace's own copy: the write was never made
    # (p.keywords stayed {'b': 2}) and every call returned x * 3 where eager gives 3, 4, 5
    def make():
        p = functools.partial(lambda x, b=1: x * b, b=2)

        def fn(x):
            p.keywords["b"] = p.keywords["b"] + 1
            return p(x)

        return fn, p.keywords

    calls = [lambda fn, state: fn(torch.ones(2))] * 3
    eager, compiled = _runs(make, calls)
    assert eager == compiled


def test_an_import_after_a_write_into_sys_modules_sees_it():
    # before: `sys.modules[name] = m` was replayed after the graph and the `import name` after it in the same
    # graph bound the module that was there before: each call used the other module
    first, second = types.ModuleType("h12rt16_swapped"), types.ModuleType("h12rt16_swapped")
    first.v, second.v = 1, 2

    def fn(x):
        sys.modules["h12rt16_swapped"] = second if sys.modules["h12rt16_swapped"] is first else first
        import h12rt16_swapped
        return x * h12rt16_swapped.v

    runs = []
    try:
        for compiled in (False, True):
            framejit.reset()
            sys.modules["h12rt16_swapped"] = first
            call = framejit.compile(fn, backend="eager") if compiled else fn
            runs.append([call(torch.ones(2)).tolist() for _ in range(3)])
    finally:
        sys.modules.pop("h12rt16_swapped", None)
    assert runs[0] == runs[1]


def test_a_module_call_after_a_write_into_its_hook_dict_runs_the_hook():
    # before: m._forward_hooks[k] = h was replayed after the graph and the call m(x) after it in the same
    # graph was planned from the real (empty) hook dicts: the hook never ran
    def make():
        m = torch.nn.ReLU()

        def fn(x):
            m._forward_hooks[999] = lambda mod, args, out: out + 100
            y = m(x)
            del m._forward_hooks[999]
            return y, m(x)

        return fn, list(m._forward_hooks)

    calls = [lambda fn, state: fn(torch.ones(2))] * 3
    eager, compiled = _runs(make, calls)
    assert eager == compiled


# ---- NOTE [Lazy module walks] (capture/modules.py) ---------------------------------------------------------

class _WalkThenStore(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.register_buffer("b", torch.ones(2))
        self.register_buffer("c", torch.ones(2))
        self.kind = kind

    def forward(self, x):
        walk = self.named_buffers()
        if self.kind == "partly_drawn":
            first = next(walk)
            self.c = x * 5
            return first[1] + 0, [(n, t + 0) for n, t in walk]
        if self.kind == "store":
            self.b = x * 2
        else:
            self.register_buffer("d", x * 3)
        return [(n, t + 0) for n, t in walk]


@pytest.mark.parametrize("kind", ["store", "register", "partly_drawn"])
def test_a_module_walk_drawn_after_a_store_sees_it(kind):
    # before: named_buffers() was walked when the generator was made, so a store or register_buffer made
    # before it was drawn was missed (eager walks lazily)
    def make():
        m = _WalkThenStore(kind)
        return m, m

    calls = [lambda m, state, v=v: m(torch.full((2,), v)) for v in (1.0, 3.0, 1.0)]
    eager, compiled = _runs(make, calls)
    assert eager[:-1] == compiled[:-1]  # (the last entry is the module object itself)
