"""Warm starts for entries whose guards name objects with no importable name (issue 16, after
test_warm_gaps.py; tools/warm_gaps.py finds them): a model written as transformers writes its models, whose
every frame entry was "kept in memory only" before, so every warm process traced it again:

- a dataclass output whose __init__ is wrapped in a closure named like it (transformers' _BCCacheNameMeta):
  its cell holds the dataclass's own __init__; a forward under two `functools.wraps` decorators, whose
  cells hold the real forward (NOTE [Closure cells by path] in capture/locators.py);
- `"jax" in sys.modules` (the guard names sys.modules), a module-level logging.Logger passed to an
  lru_cache function (`warning_once(logger, msg)`: the logger pinned by identity, the lru wrapper's
  `__wrapped__` pinned too: NOTE [Cached functions]);
- and the same program with the function in the cell changed (another default): never loaded from the
  stale entry, traced again, values as eager's;
- code hashes that do not depend on the iteration order of a set constant (NOTE [Set constants hashed in
  order]: str hashes differ between processes);
- an onnxrt training joint holding lifted tensor constants (`torch.tensor([])`, as DynamicCache makes):
  loaded, not AOT-traced, in the warm process (NOTE [Lifted tensor constants] in backends/joint_cache.py).

Each program runs in a forked child of a program server (tests.helpers.run_program) on a copy of framejit
(its source digest is in every key).
"""
from __future__ import annotations

import textwrap

import pytest

from tests.cache.warm_programs import copy_framejit, run_warm

WRAPPED_PROGRAM = textwrap.dedent('''
    import copy, dataclasses, functools, json, logging, sys
    import torch
    import framejit

    logger = logging.getLogger("warm_gaps2.program")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False

    def keep_name(init):  # as transformers' _BCCacheNameMeta wraps every ModelOutput's __init__
        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            init(self, *args, **kwargs)
        return __init__

    @dataclasses.dataclass
    class Output:
        value: torch.Tensor = None
        scale: float = float(sys.argv[2])

    Output.__init__ = keep_name(Output.__init__)

    def deprecated(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            return func(*args, **kwargs)
        return wrapper

    def returns_output(func):
        @functools.wraps(func)
        def wrapper(self, *args, **kwargs):
            return func(self, *args, **kwargs)
        return wrapper

    @functools.lru_cache(None)
    def warning_once(log, message):
        log.warning(message)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        @returns_output
        @deprecated
        def forward(self, x, k=2.0):
            if "jax" in sys.modules:
                x = x + 1
            warning_once(logger, "forward runs")
            out = Output(self.fc(x) * k)
            return Output(out.value * out.scale)

    torch.manual_seed(0)
    model = Net()
    ref = copy.deepcopy(model)
    compiled = framejit.compile(model, backend=sys.argv[1])
    equal = []
    for step in range(2):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(step))
        out, want = compiled(x), ref(x)
        out.value.square().sum().backward()
        want.value.square().sum().backward()
        equal.append(type(out) is Output and torch.allclose(out.value, want.value) and all(
            torch.allclose(a.grad, b.grad) for a, b in zip(model.parameters(), ref.parameters())))
    stats = framejit.stats()
    print(json.dumps({"equal": equal, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"],
                      "compiles": stats["backend_compiles"]}))
''')


@pytest.fixture(scope="module")
def install(tmp_path_factory):
    """A copy of framejit shared by the module's tests (one program server for all of them)."""
    return copy_framejit(tmp_path_factory.mktemp("install"))


_run = run_warm


def test_closures_named_like_what_they_wrap_start_warm_and_a_changed_cell_is_not_loaded(tmp_path, install):
    cold = _run(tmp_path, install, WRAPPED_PROGRAM, "3.0", backend="eager")
    warm = _run(tmp_path, install, WRAPPED_PROGRAM, "3.0", backend="eager")
    # the dataclass __init__ in the wrapper's cell has another default: the stale entry is not loaded
    changed = _run(tmp_path, install, WRAPPED_PROGRAM, "5.0", backend="eager")
    for run in (cold, warm, changed):
        assert all(run["equal"]), (cold, warm, changed)
    assert cold["traced"] == 1, cold
    assert (warm["traced"], warm["loaded"], warm["compiles"]) == (0, 1, 0), warm
    assert changed["traced"] == 1 and changed["compiles"] == 1, changed


def test_code_hash_does_not_depend_on_the_order_of_a_set_constant():
    """NOTE [Set constants hashed in order] (locators.py): the same code whose frozenset constant iterates in
    another order (as str items do in another process) has the same hash."""
    from framejit.capture.locators import code_hash

    def uses_a_set(device):
        return device in {8, 16} and (lambda d: d in {8, 16})(device)

    code = uses_a_set.__code__

    def reordered(c):
        consts = [reordered(k) if hasattr(k, "co_consts") else
                  frozenset(reversed([16, 8] if list(k) == [16, 8] else [8, 16])) if isinstance(k, frozenset) else k
                  for k in c.co_consts]
        return c.replace(co_consts=tuple(consts))

    other = reordered(code)
    sets = [k for k in code.co_consts if isinstance(k, frozenset)]
    other_sets = [k for k in other.co_consts if isinstance(k, frozenset)]
    assert sets == other_sets and [list(k) for k in sets] != [list(k) for k in other_sets]  # equal, listed apart
    assert code_hash(other) == code_hash(code)


CONSTANT_PROGRAM = textwrap.dedent('''
    import copy, json, sys
    import torch
    import framejit
    from framejit.backends import joint

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            empty = torch.tensor([])  # as DynamicCache makes it: a lifted tensor constant of the joint
            weights = torch.tensor([0.5, 2.0, -1.0])
            return torch.cat([empty, (self.fc(x) * weights).flatten()])

    torch.manual_seed(0)
    model = Net()
    ref = copy.deepcopy(model)
    compiled = framejit.compile(model, backend=sys.argv[1])
    equal = []
    for step in range(2):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(step))
        out, want = compiled(x), ref(x)
        out.square().sum().backward()
        want.square().sum().backward()
        equal.append(torch.allclose(out, want) and all(
            torch.allclose(a.grad, b.grad) for a, b in zip(model.parameters(), ref.parameters())))
    stats = framejit.stats()
    print(json.dumps({"equal": equal, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"],
                      "joints_traced": joint.STATS["traced"], "joints_loaded": joint.STATS["loaded"]}))
''')


def test_lifted_tensor_constants_of_a_joint_start_warm(tmp_path, install):
    """NOTE [Lifted tensor constants] (backends/joint_cache.py): the onnxrt joint of a graph that makes
    tensors from constants is persisted with their values; the warm process AOT-traces no joint."""
    cold = _run(tmp_path, install, CONSTANT_PROGRAM, backend="onnxrt")
    warm = _run(tmp_path, install, CONSTANT_PROGRAM, backend="onnxrt")
    assert all(cold["equal"]) and all(warm["equal"]), (cold, warm)
    assert cold["joints_traced"] == 1, cold
    assert (warm["traced"], warm["joints_traced"], warm["joints_loaded"]) == (0, 0, 1), warm
