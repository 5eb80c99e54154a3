"""A warm process running real code traces nothing (issue 16): frames whose entries were kept in memory only,
each for a reason of its own, and traced again by every new process. Each program runs compiled and eagerly
side by side in a cold process, then in a warm one sharing its cache folder; the warm one must load every
entry (frames_traced 0) and return what eager returns. What was missing:

- a bound method of a module-level list on a resume function's stack (`LOG.append(y.sum().item() > 0)`
  breaking at `.item()`: the guard pins the list, which had no name): NOTE [Objects by the global that binds
  them] in locators.py;
- a resume function inside `for i in range(n)` (its guard names `range_iterator`, which neither `builtins`
  nor `types` names): NOTE [Interpreter types by a sample];
- a user `@contextlib.contextmanager` entered before a break (the decorator's helper code, pinned before it
  was inlined: NOTE [Code by its file's module]; the helper's own frame returns a `_GeneratorContextManager`,
  which the plan cannot describe: NOTE [Return values the plan cannot describe] in frame_cache.py);
- namedtuple `p._replace(...)` (the traced stand-in, `_make`'s classmethod and `tuple.__new__`: NOTE
  [Library substitutes by their original]);
- a graph calling a `torch.library.custom_op` (OpOverloads do not pickle: NOTE [Persisted operator targets]),
  also through `torch.ops.ns.name(...)` and `torch.ops.ns.name.default(...)` (the namespace object and the
  packet the guards pin: NOTE [Op packets by name] in locators.py);
- torch.func.vmap and torch.func.grad regions (NOTE [Persisted transform regions]);
- while some function is marked allow_in_graph (importing transformers marks four), a module whose `forward` is
  a decorator's wrapper without functools.wraps (the set of marked ids was guarded: NOTE [Persisted marks]);
  the wrapper is found by the class that holds it (NOTE [Functions by the class that holds them]);
- a module-level instance of a class made in a function (transformers with `kernels` installed: NOTE [Local
  classes by an instance]), a class `__setattr__` made in a function (huggingface_hub's strict dataclasses),
  `F.max_pool1d` (made by boolean_dispatch) as a graph target, `os.environ` and a tuple of types in guards;
- a break resuming in a method under two functools.wraps decorators (NOTE [Functions under their
  decorators]).

The loading side is checked too: a warm process whose program differs where a persisted entry's guards
look (the global list is now a deque, a custom op's body changed, called directly or through torch.ops,
other functions marked, the local class of the module-level instance is another one, a decorated method's
body changed) traces again and returns what eager returns.

Programs run in forked children of a program server (tests.helpers.run_program) on a copy of framejit (the
`install` fixture: framejit's source digest is part of every key, and others may edit the checkout).
"""
from __future__ import annotations

import textwrap

import pytest

from tests.cache.warm_programs import copy_framejit, run_warm

PRELUDE = textwrap.dedent('''
    import collections, contextlib, functools, json, os, sys
    import torch
    import framejit
    from torch import nn

    WARM_VARIANT = len(sys.argv) > 3 and sys.argv[3] == "variant"

    def same(a, b):
        if isinstance(a, torch.Tensor):
            return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.allclose(a, b, atol=1e-5)
        if isinstance(a, (list, tuple)):
            return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    def check(fn, make_args, after=lambda: None, seeds=(0, 1)):
        c = framejit.compile(fn, backend=sys.argv[1])
        ok = True
        for s in seeds:
            got = c(*make_args(s)); got_state = after()
            want = fn(*make_args(s)); want_state = after()
            ok = ok and same(got, want) and got_state == want_state
        stats = framejit.stats()
        print(json.dumps({"equal": ok, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"],
                          "eager_frames": stats["eager_frames"]}))

    def rand(s, *shape):
        return torch.randn(*shape, generator=torch.Generator().manual_seed(s))
''')

PROGRAMS = {
    "global_list_across_break": '''
LOG = collections.deque() if WARM_VARIANT else []
def f(x):
    LOG.append(x.shape[0])
    y = x * 2
    print("between", file=sys.stderr)
    LOG.append(y.sum().item() > 0)
    return y + len(LOG)
def state():
    items = list(LOG); LOG.clear(); return items
check(f, lambda s: (rand(s, 4) + (2 if s else -2),), state)
''',
    "resume_in_range_loop": '''
def f(x, n):
    for i in range(n):
        x = x * 1.5
        if x.sum() > 0:
            x = x - 0.1
        print("it", i, file=sys.stderr)
    return x
check(f, lambda s: (rand(s, 4), 3))
''',
    "user_context_manager_across_break": '''
@contextlib.contextmanager
def tagged(log):
    log.append("enter")
    yield
    log.append("exit")
LOG = []
def f(x):
    with tagged(LOG):
        y = x + 1
        print("inside", file=sys.stderr)
        y = y * 2
    return y
def state():
    items = list(LOG); LOG.clear(); return items
check(f, lambda s: (rand(s, 4),), state)
''',
    "namedtuple_replace": '''
P = collections.namedtuple("P", "a b")
def f(x):
    p = P(x, 1)
    q = p._replace(b=3)
    return q.a * q.b + p.b
check(f, lambda s: (rand(s, 4),))
''',
    "custom_op": '''
if WARM_VARIANT:
    @torch.library.custom_op("h16warm::scaled", mutates_args=())
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * 3
else:
    @torch.library.custom_op("h16warm::scaled", mutates_args=())
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return x * 2
@scaled.register_fake
def _(x):
    return torch.empty_like(x)
def f(x):
    return scaled(x.sin()) + 1
check(f, lambda s: (rand(s, 4),))
''',
    "custom_op_through_torch_ops": '''
if WARM_VARIANT:
    @torch.library.custom_op("h16warm::shifted", mutates_args=())
    def shifted(x: torch.Tensor) -> torch.Tensor:
        return x + 3
else:
    @torch.library.custom_op("h16warm::shifted", mutates_args=())
    def shifted(x: torch.Tensor) -> torch.Tensor:
        return x + 2
@shifted.register_fake
def _(x):
    return torch.empty_like(x)
def f(x):
    return torch.ops.h16warm.shifted.default(x.cos()) * torch.ops.h16warm.shifted(x)
check(f, lambda s: (rand(s, 4),))
''',
    "vmap_and_grad": '''
from torch.func import grad, vmap
def f(x, w):
    per_row = vmap(lambda r: (r * w).sum())(x)
    g = grad(lambda t: (t.sin() * t).sum())(w)
    return per_row, g
check(f, lambda s: (rand(s, 3, 4), rand(s + 5, 4)))
''',
    "marked_functions_and_an_unnamed_forward": '''
def marked(x):
    return x + 1
def other(x):
    return x - 1
torch.compiler.allow_in_graph(other if WARM_VARIANT else marked)  # transformers marks functions on import
def doubled(forward):
    def wrapper(self, x):  # no functools.wraps: Net.forward is named 'doubled.<locals>.wrapper'
        return forward(self, x) * 2
    return wrapper
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
    @doubled
    def forward(self, x):
        return torch.relu(self.lin(x))
torch.manual_seed(0)
net = Net()
check(net, lambda s: (rand(s, 2, 4),))
''',
    "library_idioms": '''
import torch.nn.functional as F
def make_func_module():
    if WARM_VARIANT:  # the same names, another body
        class Func(nn.Module):
            def forward(self, x):
                return x.cos()
    else:
        class Func(nn.Module):  # kernels' _create_func_module: a module-level instance of a local class
            def forward(self, x):
                return x.sin()
    return Func
rotate = make_func_module()()
def strict(cls):
    def __strict_setattr__(self, name, value):  # huggingface_hub's strict dataclasses
        if name == "bad":
            raise ValueError(name)
        object.__setattr__(self, name, value)
    cls.__setattr__ = __strict_setattr__
    return cls
@strict
class Config:
    pass
CONFIG = Config()
def f(x):
    CONFIG.last = 1
    pooled = F.max_pool1d(x.unsqueeze(0), 2)
    flag = os.environ.get("H16WARM_FLAG", "off")
    k = 2 if isinstance(x.shape[0], (int, float)) else 3
    return rotate(pooled) * k + (1 if flag == "on" else 0)
def state():
    value = CONFIG.__dict__.pop("last", None); return value
check(f, lambda s: (rand(s, 3, 8),), state)
''',
    "break_in_decorated_method": '''
def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
    @logged
    @logged
    def forward(self, x):
        y = self.lin(x)
        print("break", file=sys.stderr)
        return y.relu() + (2 if WARM_VARIANT else 1)
torch.manual_seed(0)
net = Net()
check(net, lambda s: (rand(s, 2, 4),))
''',
}


@pytest.fixture(scope="module")
def install(tmp_path_factory):
    """A copy of framejit shared by the module's tests (one program server for all of them)."""
    return copy_framejit(tmp_path_factory.mktemp("install"))


def _cold_then_warm(tmp_path, install, name: str, backend: str = "eager", warm_variant: bool = False):
    program = PRELUDE + PROGRAMS[name]
    cold = run_warm(tmp_path, install, program, name, backend=backend)
    warm = run_warm(tmp_path, install, program, name, *(("variant",) if warm_variant else ()), backend=backend)
    assert cold["equal"] and cold["traced"] > 0 and cold["eager_frames"] == 0, cold
    return cold, warm


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_warm_process_traces_nothing(tmp_path, install, name):
    cold, warm = _cold_then_warm(tmp_path, install, name)
    assert warm["equal"], warm
    assert (warm["traced"], warm["eager_frames"]) == (0, 0) and warm["loaded"] >= cold["traced"], (cold, warm)


@pytest.mark.parametrize("name", ["global_list_across_break", "custom_op", "marked_functions_and_an_unnamed_forward",
                                  "library_idioms", "break_in_decorated_method", "custom_op_through_torch_ops"])
def test_a_warm_process_whose_program_differs_traces_again(tmp_path, install, name):
    # the list is now a deque; the custom op's body multiplies by 3; another function is marked allow_in_graph;
    # the module-level instance is of another local class (another forward); the decorated method adds 2 after
    # its break; the op called through torch.ops adds 3
    cold, warm = _cold_then_warm(tmp_path, install, name, warm_variant=True)
    assert warm["equal"] and warm["eager_frames"] == 0, warm
    assert warm["traced"] > 0, warm
