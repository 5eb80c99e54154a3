"""Tracing runs none of the user's code that eager does not run: the texts of guards (what the recompiles
log shows as expected) describe user objects without calling their `__repr__` (NOTE [Guard texts run no user
code] in capture/graph_calls.py). Each program runs eagerly and compiled over several calls and compares
values and how often the user's `__repr__` ran."""
from __future__ import annotations

import abc
import collections
import collections.abc
import functools

import torch

import framejit
from tests.helpers import CountingBackend, assert_same


class _Counted:
    def __init__(self, log, scale=2.0):
        self.log, self.scale = log, scale

    def __repr__(self):
        self.log.append("repr")
        return "Counted()"


class _Refusing:
    scale = 3.0

    def __repr__(self):
        raise RuntimeError("no repr for you")


def _compare(make, calls=3):
    results = []
    for compiled in (False, True):
        log = []
        fn = make(log)
        f = framejit.compile(fn, backend="eager") if compiled else fn
        results.append([(f(torch.arange(float(n))), list(log)) for n in range(2, 2 + calls)])
    assert_same(results[1], results[0])


def test_identity_of_a_global_object():
    # before: id(r) guards r by identity and the guard's text was repr(r): log ["repr"] where eager has []
    def make(log):
        r = _Counted(log)

        def fn(x):
            return x * 2, id(r) == id(r)
        return fn
    _compare(make)


def test_namedtuple_default_object():
    def make(log):
        nt = collections.namedtuple("NT", "a b", defaults=[_Counted(log)])

        def fn(x):
            return x * nt(1).b.scale
        return fn
    _compare(make)


def test_cached_call_answering_an_object():
    def make(log):
        @functools.lru_cache(None)
        def settings(k):
            return _Counted(log, scale=float(k))

        def fn(x):
            return x * settings(3).scale
        return fn
    _compare(make)


def test_object_whose_repr_raises_is_still_traced():
    # before: repr raised while the guard text was made, an internal error: the frame ran wholly eagerly
    r = _Refusing()

    def fn(x):
        return x * r.scale + 1, id(r) == id(r)

    backend = CountingBackend()
    f = framejit.compile(fn, backend=backend)
    for n in (2, 3):
        x = torch.arange(float(n))
        assert_same(f(x), fn(x))
    assert backend.graph_count >= 1


def test_a_failing_guard_does_not_repr_its_new_object():
    # the `got ...` side of a recompile reason (guards/codegen.short_repr): a new object under the same name
    # was described by calling its __repr__ on every recompile, logging on or off (review revQ Q4 / revR R4)
    log = []
    holder = {"o": _Counted(log)}

    def f(x):
        return x * 2, id(holder["o"]) > 0
    compiled = framejit.compile(f, backend="eager")
    for i in range(4):
        holder["o"] = _Counted(log) if i % 2 else _Refusing()
        want, got = f(torch.ones(2) * i), compiled(torch.ones(2) * i)
        assert_same(got, want)
    assert log == []


def test_a_list_holding_itself_keeps_its_frame_compiled():
    # review revQ Q3 / revR R3: the guard text of a cached call's result recursed into a self-containing list
    # (RecursionError, an internal error: the frame ran wholly eagerly)
    items = [1]
    items.append(items)

    @functools.lru_cache
    def cached(k):
        return items

    def f(x):
        r = cached(2)
        return x + len(r), r[1] is r
    backend = CountingBackend()
    compiled = framejit.compile(f, backend=backend)
    eager_before = framejit.stats().get("eager_entries", 0)
    for n in (2, 2, 3):
        assert_same(compiled(torch.ones(n)), f(torch.ones(n)))
    assert backend.graph_count >= 1 and framejit.stats().get("eager_entries", 0) == eager_before


def _counting(base):
    log = []

    class Counting(base):
        def __getattribute__(self, name):
            log.append(name)
            return super().__getattribute__(name)
    return Counting, log


def _append_break_count(x, o):
    o.append(3)
    print("b")
    return x * len(o), o.count(3)


def _isinstance_reads(x, o):
    return x + isinstance(o, (int, float)), isinstance(o, object), isinstance(o, collections.abc.Mapping)


def test_framejits_own_type_reads_run_no_getattribute(capsys):
    # NOTE [Type facts without user code] (guards/plain_reads.py): isinstance() and `__name__` reads of a
    # list subclass (tracing a bound builtin, the recompiles explanation of a failing identity guard) ran its
    # counting __getattribute__: 66, 90, 102 reads per call, eager 2 (review revQ Q10)
    Counting, log = _counting(list)
    compiled = framejit.compile(_append_break_count, backend="eager")
    for i in range(3):
        runs = []
        for f in (_append_break_count, compiled):
            log.clear()
            runs.append((f(torch.ones(2) * i, Counting([i])), list(log)))
        assert_same(runs[0][0], runs[1][0])
        assert runs[0][1] == runs[1][1] == ["append", "count"]


def test_isinstance_reads_class_through_getattribute():
    # NOTE [isinstance reads __class__] (capture/type_checks.py): eager reads `o.__class__` once per class the
    # type check fails (and an ABC always), the fold read nothing
    Counting, log = _counting(object)
    compiled = framejit.compile(_isinstance_reads, backend="eager")
    for i in range(3):
        runs = []
        for f in (_isinstance_reads, compiled):
            log.clear()
            runs.append((f(torch.ones(2) * i, Counting()), list(log)))
        assert_same(runs[0][0], runs[1][0])
        assert runs[0][1] == runs[1][1] and len(runs[0][1]) >= 3


class _RegisteredABC(abc.ABC):
    pass


def _isinstance_reads_answering_true(x, o, make):
    n = make()
    return (x + isinstance(o, _RegisteredABC), isinstance(o, (int, type(o), float)),
            isinstance(n, _RegisteredABC), isinstance(n, (collections.abc.Sized, object)), isinstance(n, int))


def test_isinstance_reads_class_when_an_abc_or_a_later_class_answers_true():
    # NOTE [isinstance reads __class__]: an ABC answering True (a registered class) and a tuple whose later
    # class answers True read `o.__class__` as eager does (revW W3: folded with no read), also for an object
    # made inside the function (read nothing)
    Counting, log = _counting(object)
    _RegisteredABC.register(Counting)
    compiled = framejit.compile(_isinstance_reads_answering_true, backend="eager")
    for i in range(3):
        runs = []
        for f in (_isinstance_reads_answering_true, compiled):
            log.clear()
            runs.append((f(torch.ones(2) * i, Counting(), Counting), list(log)))
        assert_same(runs[0][0], runs[1][0])
        assert runs[0][1] == runs[1][1] and len(runs[0][1]) == 5


class _Other:
    pass


def _isinstance_other(x, o):
    return x + 1, isinstance(o, _Other), isinstance(o, (int, _RegisteredABC))


def _answering_other(log):
    def getattribute(self, name):
        log.append(name)
        return _Other if name == "__class__" else object.__getattribute__(self, name)
    return getattribute


class _Deferred:
    """A `__getattribute__` that is no function: a descriptor object answering a bound callable."""
    def __init__(self, f):
        self.f = f

    def __get__(self, obj, owner=None):
        return lambda name: self.f(obj, name)


def _class_read_programs():
    """Per program: (make the argument of call i, change the classes before call i); fresh classes per side."""
    import weakref

    def later(on_base):  # review revA A1: a Python __getattribute__ added after call 0, removed after call 2
        log, base = [], type("Base", (), {})
        cls = type("P", (base,), {})
        def between(i):
            target = base if on_base else cls
            if i == 1:
                target.__getattribute__ = _answering_other(log)
            elif i == 3:
                del target.__getattribute__
        return log, lambda i: cls(), between

    def proxy():  # revA A2: the proxy forwards __class__ to its referent
        keep = []
        def make(i):
            keep.append(_Other())
            return weakref.proxy(keep[-1])
        return [], make, lambda i: None

    def no_function(wrap):  # revA A3: a descriptor object, a functools.partialmethod
        log = []
        cls = type("R", (), {"__getattribute__": wrap(_answering_other(log))})
        return log, lambda i: cls(), lambda i: None
    def library_base(wrap, at):  # user code given to a library class (NOTE [Patched library __getattribute__])
        log, cls = [], type("S", (torch.utils.data.Sampler,), {})
        def between(i):
            if i == at:
                torch.utils.data.Sampler.__getattribute__ = wrap(_answering_other(log))
            elif i == 3:
                del torch.utils.data.Sampler.__getattribute__
        return log, lambda i: cls(), between
    return [lambda: later(False), lambda: later(True), proxy, lambda: no_function(_Deferred),
            lambda: no_function(functools.partialmethod)] + \
        [functools.partial(library_base, wrap, at) for wrap in _LIBRARY_LOOKALIKES for at in (0, 1)]


def _as_samplers_own(f):
    """functools.wraps(<torch function>) and more: the names of the library's own entry (review revI H1)."""
    f = functools.wraps(torch.utils.data.Sampler.__iter__)(f)
    f.__qualname__ = "Sampler.__getattribute__"
    return f


_LIBRARY_LOOKALIKES = (lambda f: f, _as_samplers_own, functools.partialmethod, _Deferred)


def test_isinstance_class_read_of_later_or_foreign_getattribute():
    # NOTE [The __class__ read guarded] (capture/type_checks.py): eager answered True (with the read logged), the
    # fold False from the first trace's type, on every call
    for program in _class_read_programs():
        runs = []
        for compiled in (False, True):
            log, make, between = program()
            f = framejit.compile(_isinstance_other, backend="eager") if compiled else _isinstance_other
            calls = []
            for i in range(5):
                between(i)
                log.clear()
                calls.append((f(torch.ones(2) * i, make(i)), list(log)))
            runs.append(calls)
        for eager, fjit in zip(*runs):
            assert_same(eager[0], fjit[0])
            assert eager[1] == fjit[1]
        assert any(call[0][1] for call in runs[0])


def test_attribute_read_through_user_code_given_to_a_library_class():
    # NOTE [Patched library __getattribute__] (capture/getattribute.py): a wraps-copied name, a partialmethod or a
    # descriptor was taken for the library's default lookup: eager 7.0 from the patch, compiled 4.0
    def fn(x, s):
        return x + s.k
    for wrap in _LIBRARY_LOOKALIKES[1:]:
        for at in (0, 1):
            runs = []
            for compiled in (False, True):
                f = framejit.compile(fn, backend="eager") if compiled else fn
                calls = []
                for i in range(3):
                    if i == at:
                        torch.utils.data.Sampler.__getattribute__ = wrap(
                            lambda o, name: 7.0 + o.__dict__["k"] if name == "k" else object.__getattribute__(o, name))
                    elif i == 2:
                        del torch.utils.data.Sampler.__getattribute__
                    s = type("S", (torch.utils.data.Sampler,), {})()
                    s.k = float(i)
                    calls.append(f(torch.ones(2), s))
                runs.append(calls)
            assert_same(runs[1], runs[0])


class _CountingModule(torch.nn.Module):
    def __init__(self, log):
        super().__init__()
        self.log, self.w = log, torch.nn.Parameter(torch.ones(2))

    def __getattribute__(self, name):
        if name in ("__class__", "w"):
            object.__getattribute__(self, "log").append(name)
        return super().__getattribute__(name)  # `w`: AttributeError here, Module.__getattr__ answers

    def forward(self, x):
        return x * self.w


def _module_reads(x, m):
    return m(x) + m.w, isinstance(m, _Other), isinstance(m, torch.nn.Linear)


def test_module_with_getattribute_compiles_once():
    # NOTE [Library __getattr__ after a custom __getattribute__] (capture/getattribute.py): a new trace per call
    # (`'__getattr__' not in Module.__dict__` guarded), each calling the user's __getattribute__ 17-68 times while
    # wrapping the module (review revA A4)
    backend = CountingBackend()
    compiled = framejit.compile(_module_reads, backend=backend)
    log = []
    for m in (_CountingModule(log), _CountingModule(log)):
        for i in range(2):
            runs = []
            for f in (_module_reads, compiled):
                log.clear()
                runs.append((f(torch.ones(2) * i, m), list(log)))
            assert_same(runs[0][0], runs[1][0])
            assert runs[0][1] == runs[1][1] == ["w", "w", "__class__", "__class__"]
    assert backend.graph_count == 1


class _Reading:
    def __init__(self, log):
        object.__setattr__(self, "log", log)

    def __getattribute__(self, name):
        object.__getattribute__(self, "log").append(name)
        return object.__getattribute__(self, name)


def _checks_that_raise(x, o, log):
    answers = []
    for spec in ((_Other, 5), (_Other, (int, "s")), (_Reading, 5)):
        try:
            answers.append(isinstance(o, spec))
        except TypeError as e:
            answers.append(str(e))
    log.append("hooked next")
    answers.append(isinstance(o, _Hooked))
    return x + 1, answers


class _Hooked(abc.ABC):
    @classmethod
    def __subclasshook__(cls, subclass):
        _HOOK_LOG[0].append(("hook", subclass.__name__))
        return NotImplemented


_HOOK_LOG = [[]]


def test_isinstance_reads_before_a_type_error_and_a_user_subclasshook_runs_in_place():
    # NOTE [Reads before a TypeError], NOTE [User subclass hooks run where eager runs them] (capture/type_checks.py):
    # eager reads `__class__` for the classes before the one that raises (framejit made no read), and runs the
    # ABC's `__subclasshook__` after the effects before the check (framejit ran it first, in the guard)
    # (review revA A5, A6)
    compiled = framejit.compile(_checks_that_raise, backend="eager")
    for i in range(3):
        runs = []
        for f in (_checks_that_raise, compiled):
            _Hooked._abc_caches_clear()
            log = _HOOK_LOG[0] = []
            runs.append((f(torch.ones(2) * i, _Reading(log), log), log))
        assert_same(runs[0][0], runs[1][0])
        assert runs[0][1] == runs[1][1]
        assert runs[0][1].count("__class__") == 4 and runs[0][1][-1] == ("hook", "_Reading")


class _Meta(type):
    pass


class _OfMeta(metaclass=_Meta):
    k = 4.0


class _OfAbc(abc.ABC):
    k = 4.0


class _Linear(torch.nn.Linear):
    pass


def _default_lookups(x, lin, klass, arg):
    try:  # `bias` lives in _parameters: object.__getattribute__ raises, Module.__getattr__ is not asked
        raw = object.__getattribute__(lin, "bias")
    except AttributeError:
        raw = -100.0
    try:  # a library class's own Python __getattribute__ (_Union's raises for an unset field)
        unset = arg.as_float
    except AttributeError as e:
        unset = str(e)
    return x + raw + klass.k, lin(x), unset, hasattr(arg, "as_float")


def test_default_lookup_metaclass_and_library_getattribute():
    # NOTE [object.__getattribute__ calls no __getattr__]: object.__getattribute__(lin, "bias") answered the
    # parameter (eager -100); a user __getattribute__ adding 10 to it gave 12 where eager gives 2 (review revK H2).
    # NOTE [Metaclass __getattribute__ guarded]: a metaclass __getattribute__ added after call 0 was not seen (H3).
    # NOTE [Patched library __getattribute__]: _Union.__getattribute__ was taken for the default lookup (H1)
    from torch._export.serde import schema

    def ga(self, name):
        return object.__getattribute__(self, name) + 10.0 if name == "bias" else object.__getattribute__(self, name)

    def meta_ga(cls, name):
        return 7.0 if name == "k" else type.__getattribute__(cls, name)

    lin = _Linear(2, 2)
    runs = []
    for compiled in (False, True):
        f = framejit.compile(_default_lookups, backend="eager") if compiled else _default_lookups
        calls = []
        try:
            for i in range(3):
                if i == 1:
                    _Linear.__getattribute__ = ga
                    _Meta.__getattribute__ = abc.ABCMeta.__getattribute__ = meta_ga
                arg = schema.Argument.create(as_int=i) if i != 1 else schema.Argument.create(as_float=1.0)
                calls.append([f(torch.ones(2) * i, lin, klass, arg) for klass in (_OfMeta, _OfAbc)])
        finally:
            for klass in (_Linear, _Meta, abc.ABCMeta):
                if "__getattribute__" in vars(klass):
                    del klass.__getattribute__
        runs.append(calls)
    assert_same(runs[1], runs[0])


def _tensor_attr(x):
    return x + x.k


def test_tensor_attribute_read_through_a_patched_tensor_getattribute():
    # NOTE [Python attributes of tensors past a patched __getattribute__]: the patch ran 11 times on the retrace
    # call and twice per later call (once in the guard `x.k`), where eager runs it once (review revK M1)
    log = []

    def ga(self, name):
        if name == "k":
            log.append(name)
            return 7.0
        return torch._C.TensorBase.__getattribute__(self, name)

    runs = []
    for compiled in (False, True):
        f = framejit.compile(_tensor_attr, backend="eager") if compiled else _tensor_attr
        calls = []
        try:
            for i in range(3):
                if i == 1:
                    torch.Tensor.__getattribute__ = ga
                x = torch.ones(1) * i
                x.k = float(i)
                log.clear()
                calls.append((f(x), list(log)))
        finally:
            if "__getattribute__" in vars(torch.Tensor):
                del torch.Tensor.__getattribute__
        runs.append(calls)
    assert_same(runs[1], runs[0])
