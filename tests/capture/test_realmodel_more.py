"""More idioms of real library models (issue 11): the code shapes behind the remaining transformers gaps.

- Wav2Vec2ForCTC's loss: `with torch.backends.cudnn.flags(enabled=False): return ctc_loss(...)`. The call
  makes a contextlib manager in plain Python (a break), so the resume function meets a manager whose
  generator already exists; its `__enter__` cannot be traced (NOTE [Breaks at BEFORE_WITH]).
- Every ...ForSequenceClassification head with labels: `self.config.problem_type = "..."` on a config
  whose class defines `__setattr__` (NOTE [Custom __setattr__]).
- JetMoE's `expert_size = expert_size.tolist()` then `inputs.split(expert_size)`: a list of ints that
  change together between calls (one recompile makes all the changed ones symbolic).

Each runs eagerly and compiled on fresh inputs over several calls, with the state the code reads changed
between calls, and asserts graph counts and that no frame ran wholly eagerly.
"""
from __future__ import annotations

import contextlib

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same, run_differential, eager_frames


# ---- a context manager whose __enter__ cannot be traced -----------------------------------------------------
def test_cudnn_flags_block_after_compute():
    """The code before the `with` is one graph; the block runs in the manager, which is exited after it."""
    def f(x):
        y = x.sin() * 2
        with torch.backends.cudnn.flags(enabled=False):
            inside = torch.backends.cudnn.enabled
            z = y.cos() + 1
        return z * 3, inside, torch.backends.cudnn.enabled

    before = eager_frames()
    backend = run_differential(f, lambda seed: (torch.randn(4, 3),), fullgraph=False)
    # sin, mul before the break; the manager is entered as Python and the block resumes captured (cos, add;
    # NOTE [Breaks at BEFORE_WITH]); its exit runs as Python, and the code after it is captured (mul)
    assert [backend.op_count(i) for i in range(backend.graph_count)] == [2, 2, 1]
    assert eager_frames() == before


@contextlib.contextmanager
def _catching(log: list, value: int):
    """A generator context manager that logs, yields a value and swallows ValueError."""
    log.append("enter")
    try:
        yield value
    except ValueError as e:
        log.append(f"caught {e}")
    log.append("exit")


def _made_outside(seed: int):
    """A manager made (not entered) outside the compiled function, as a break's call makes it."""
    log: list = []
    return torch.randn(3, generator=torch.Generator().manual_seed(seed)), _catching(log, seed + 2), log


@pytest.mark.parametrize("raising", [False, True])
def test_generator_manager_from_outside(raising):
    """`with cm as v:` over a contextlib manager from outside: entered as plain Python; the block's
    exception reaches the manager, which swallows it; its log and the results equal eager's."""
    def f(x, cm, log, raising):
        y = x.exp() - 1
        log.append("before")
        with cm as v:
            log.append(f"value {v}")
            if raising:
                raise ValueError(v)
            y = y * v
        log.append("after")
        return y + 1

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    before = eager_frames()
    counts = []
    for seed in range(6):
        x, cm, log = _made_outside(seed)
        expected = f(x.clone(), cm, log, raising)
        x2, cm2, log2 = _made_outside(seed)
        assert_same(compiled(x2, cm2, log2, raising), expected)
        assert log2 == log
        counts.append(backend.graph_count)
    if raising:
        # NOTE [Exceptions leaving generator context manager blocks]: the raise inside the block is thrown into
        # the traced generator, which swallows it: the first value's frame is one graph (exp, sub, add; before,
        # a break before the `with`); once `v` is symbolic, formatting it breaks (exp, sub before the break),
        # then nothing is traced for later values
        assert counts == [1, 2, 2, 2, 2, 2] and backend.op_count(0) == 3
    else:
        # The block is traced (NOTE [Generator context managers from outside]); `v`, formatted into the log
        # string, is a constant in the first trace; once it changed it is symbolic and formatting it breaks
        # (NOTE [Dynamic ints formatted into strings]): the graphs before and after that break, then no trace
        # for any later value (it was one trace per value, up to the recompile limit).
        assert counts[-1] <= 4 and counts[2:] == [counts[2]] * 4  # nothing traced from the 3rd value on
        assert all(backend.op_count(i) >= 1 for i in range(backend.graph_count))
    assert eager_frames() == before


# ---- a class with its own __setattr__ -------------------------------------------------------------------------
class Config:
    """Like transformers' PretrainedConfig: `attribute_map` aliases for reads and writes, and a hook that
    counts the stores that go through it (so a replay that ran it twice would show)."""
    attribute_map = {"num_labels": "_num_labels"}

    def __init__(self, num_labels: int, problem_type=None) -> None:
        object.__setattr__(self, "stores", 0)
        self.num_labels = num_labels
        self.problem_type = problem_type

    def __setattr__(self, key, value):
        if key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        object.__setattr__(self, "stores", self.stores + 1)
        super().__setattr__(key, value)

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


def _head(logits: torch.Tensor, labels: torch.Tensor, config: Config) -> torch.Tensor:
    """The problem-type dispatch of transformers' sequence-classification heads."""
    if config.problem_type is None:
        if config.num_labels == 1:
            config.problem_type = "regression"
        elif labels.dtype == torch.long or labels.dtype == torch.int:
            config.problem_type = "single_label_classification"
        else:
            config.problem_type = "multi_label_classification"
    if config.problem_type == "regression":
        return torch.nn.functional.mse_loss(logits.squeeze(), labels.squeeze())
    if config.problem_type == "single_label_classification":
        return torch.nn.functional.cross_entropy(logits.view(-1, config.num_labels), labels.view(-1))
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)


def _state(config: Config) -> tuple:
    return config.problem_type, config.num_labels, config.stores, sorted(vars(config))


@pytest.mark.parametrize("num_labels,kind", [(1, "regression"), (3, "single"), (3, "multi")])
def test_problem_type_store_through_custom_setattr(num_labels, kind):
    """`config.problem_type = ...` inlines the class's __setattr__: one graph with no break, the store
    replayed once (the hook's counter equals eager's), the next call sees the stored type."""
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        logits = torch.randn(4, num_labels, generator=g)
        if kind == "single":
            return logits, torch.randint(0, num_labels, (4,), generator=g)
        return logits, torch.rand(4, num_labels, generator=g) if kind == "multi" else torch.randn(4, generator=g)

    eager_cfg, compiled_cfg = Config(num_labels), Config(num_labels)
    backend = CountingBackend()
    compiled = framejit.compile(_head, backend=backend, fullgraph=True)
    for seed in range(3):
        logits, labels = make(seed)
        assert_same(compiled(logits, labels, compiled_cfg), _head(logits, labels, eager_cfg))
        assert _state(compiled_cfg) == _state(eager_cfg)
    # the first call stored the type (its graph), the later ones read it (a second entry, then hits)
    assert backend.graph_count == 2
    assert compiled_cfg.problem_type == {"regression": "regression", "single": "single_label_classification",
                                         "multi": "multi_label_classification"}[kind]


def test_alias_store_and_read_back_in_one_trace():
    """A store through an alias (`num_labels` -> `_num_labels`) is read back through the alias later in
    the same trace, and the object's dict after the call equals eager's."""
    def f(x, config):
        config.num_labels = config.num_labels + 2
        config.scale = 0.5
        return x * config.num_labels * config.scale

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend, fullgraph=True)
    for labels in (4, 4, 7):
        eager_cfg, compiled_cfg = Config(labels), Config(labels)
        x = torch.randn(3)
        assert_same(compiled(x, compiled_cfg), f(x, eager_cfg))
        assert vars(compiled_cfg) == vars(eager_cfg) and compiled_cfg.stores == 4
        assert compiled_cfg._num_labels == labels + 2
    assert backend.graph_count == 2  # the int 7 recompiles once (automatic dynamic)


def test_replaced_setattr_recompiles():
    """The inlined __setattr__ is guarded by identity: replacing it on the class is seen by the next call."""
    class Cfg:
        def __setattr__(self, key, value):
            object.__setattr__(self, key, value * 2)

    def f(x, cfg):
        cfg.k = 3
        return x + cfg.k

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend, fullgraph=True)
    a, b = Cfg(), Cfg()
    x = torch.randn(2)
    assert_same(compiled(x, b), f(x, a))
    assert vars(a) == vars(b) == {"k": 6}

    def triple(self, key, value):
        object.__setattr__(self, key, value * 3)
    Cfg.__setattr__ = triple
    a, b = Cfg(), Cfg()
    assert_same(compiled(x, b), f(x, a))
    assert vars(a) == vars(b) == {"k": 9}
    assert backend.graph_count == 2


def test_setattr_onto_property_breaks_but_matches():
    """object.__setattr__ onto a data descriptor runs its setter: not recorded as a plain store (a break),
    still equal to eager."""
    class Cfg:
        def __init__(self):
            object.__setattr__(self, "_v", 1)

        @property
        def v(self):
            return self._v

        @v.setter
        def v(self, value):
            object.__setattr__(self, "_v", value + 100)

        def __setattr__(self, key, value):
            object.__setattr__(self, key, value)

    def f(x, cfg):
        y = x * 2
        cfg.v = 5
        return y + cfg.v

    for _ in range(2):
        a, b = Cfg(), Cfg()
        x = torch.randn(3)
        compiled = framejit.compile(f, backend=CountingBackend())
        assert_same(compiled(x, b), f(x, a))
        assert vars(a) == vars(b) == {"_v": 105}


# ---- ints read from a tensor at a break ---------------------------------------------------------------------
def test_tolist_sizes_change_together():
    """`sizes = counts.tolist()` breaks; the resume function gets a list of ints. When they change, one
    recompile makes every changed int symbolic (not one recompile per int)."""
    def f(x, counts):
        x = x * 2
        sizes = counts.tolist()
        parts = x.split(sizes, dim=0)
        return [p.sum(0) * (i + 1) for i, p in enumerate(parts)]

    sequence = [[2, 3, 2, 3], [3, 2, 3, 2], [4, 2, 2, 2], [2, 2, 4, 2], [3, 3, 2, 2]]
    backend = run_differential(f, lambda seed: (torch.randn(10, 3), torch.tensor(sequence[seed])),
                               seeds=range(len(sequence)), fullgraph=False)
    # f's graph (x * 2), the resume function's static entry, then one symbolic entry for the rest
    assert backend.graph_count == 3


# ---- torch.distributions: library class data and helper functions -------------------------------------------
def _normal_log_prob(x, loc, scale):
    normal = torch.distributions.Normal(loc, scale, validate_args=False)
    independent = torch.distributions.Independent(normal, 1, validate_args=False)
    return independent.log_prob(x), normal.entropy(), normal.mean, normal.stddev


def test_distributions_without_validation_one_graph():
    """Normal/Independent read class-level data (`arg_constraints`, `support`) and call module helpers
    (`broadcast_all`, `constraints.is_dependent`): all traced, one graph, fresh values each call."""
    def make(seed):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(3, generator=g), torch.randn(3, generator=g), torch.rand(3, generator=g) + 0.5

    backend = run_differential(_normal_log_prob, make, seeds=(0, 1, 2), fullgraph=True)
    assert backend.graph_count == 1


def test_distributions_with_validation_break_but_match():
    """With validation (the default), each `if not torch._is_all_true(valid)` is a data-dependent break;
    both sides stay captured (no frame runs wholly eagerly), and an invalid scale raises as eagerly."""
    def f(x, scale):
        d = torch.distributions.Independent(torch.distributions.Normal(x * 0.5, scale), 1)
        return d.log_prob(x) + 1

    def make(seed):
        g = torch.Generator().manual_seed(seed)
        scale = torch.rand(3, generator=g) + 0.1
        return torch.randn(3, generator=g), scale if seed != 2 else -scale  # seed 2: ValueError

    before = eager_frames()
    backend = run_differential(f, make, seeds=(0, 1, 2), fullgraph=False)
    assert backend.graph_count >= 1
    assert eager_frames() == before


def test_distributions_class_data_changed_between_calls():
    """`Normal.arg_constraints` is read through its class entry: a changed constraint (the scale may be
    any real) is seen by the next call, as eagerly (where the validation then passes)."""
    def f(scale):
        return torch.distributions.Normal(torch.zeros(3), scale).scale * 2

    compiled = framejit.compile(f, backend=CountingBackend())
    scale = torch.tensor([1.0, -1.0, 2.0])
    with pytest.raises(ValueError):
        f(scale)
    with pytest.raises(ValueError):
        compiled(scale)
    constraints = torch.distributions.Normal.arg_constraints
    saved = constraints["scale"]
    try:
        constraints["scale"] = torch.distributions.constraints.real
        assert_same(compiled(scale), f(scale))
    finally:
        constraints["scale"] = saved
    with pytest.raises(ValueError):
        compiled(scale)


# ---- str(), repr() and f-strings of user objects -------------------------------------------------------------
class Tagged:
    def __init__(self, name, n):
        self.name, self.n = name, n

    def __str__(self):
        return f"{self.name}:{self.n}"

    def __eq__(self, other):  # for the differential runner's comparison of the arguments after the call
        return type(other) is Tagged and vars(other) == vars(self)


class OnlyRepr:
    def __init__(self, k):
        self.k = k

    def __repr__(self):
        return f"OnlyRepr({self.k!r})"


def test_str_of_objects_made_and_passed_in():
    """`str`, `repr` and f-strings of objects made in the region and passed in run their own
    __str__/__repr__ at trace time (one graph, no break); an attribute changed between calls is seen."""
    def f(x, outside):
        made = Tagged("made", 3)
        text = f"{made}|{outside}|{OnlyRepr(2)}|{OnlyRepr('a')!s:>12}|{OnlyRepr(1)!r}"
        return x * len(text), text, str(outside), repr(OnlyRepr(x.dim()))

    names = ["a", "bb", "a"]
    backend = run_differential(f, lambda seed: (torch.randn(2), Tagged(names[seed], seed)), seeds=(0, 1, 2))
    assert backend.graph_count == 3  # the outside object's name and n are guarded: each new pair recompiles


def test_str_method_replaced_and_bad_results():
    """The inlined __str__ is guarded by identity; a __str__ returning a non-string raises eager's
    TypeError; the default repr (an address) is a break, not a made-up string."""
    class C:
        def __str__(self):
            return "one"

    def f(x, c):
        return x + 1, str(c)

    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    x = torch.randn(2)
    assert_same(compiled(x, C()), f(x, C()))
    C.__str__ = lambda self: "two"
    assert_same(compiled(x, C()), f(x, C()))
    assert compiled(x, C())[1] == "two" and backend.graph_count == 2
    C.__str__ = lambda self: 5
    with pytest.raises(TypeError, match="non-string"):
        f(x, C())
    with pytest.raises(TypeError, match="non-string"):
        compiled(x, C())

    class Plain:
        pass

    def g(x):
        p = Plain()
        return x * 2, str(p).split(" object at")[0]

    assert_same(framejit.compile(g, backend=CountingBackend())(x), g(x))
    with pytest.raises(Exception, match="address"):
        framejit.compile(g, backend=CountingBackend(), fullgraph=True)(x)
