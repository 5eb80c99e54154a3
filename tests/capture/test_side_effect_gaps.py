"""Side effects on containers from outside the frame (issue 12, second part): lists and dicts read only as
far as the trace uses them (a growing global log compiles once), sets from outside mutated without a
break, in-place operators, item deletion, slice assignment and sort replayed in program order, and
mutations interleaved with graph breaks, exceptions, loops, nested calls and aliases.

Each case runs a sequence of calls eagerly and then compiled, each sequence from the same freshly built
module state; after every call the result (or exception type), printed output and the state of every
container involved are compared. Compile counts are asserted where recompiling (or not) is the point.
"""
from __future__ import annotations

import collections

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same, call_capturing


def snapshot(obj, seen=None):
    """A comparable deep picture of `obj`: containers by contents (and type), tensors cloned, aliasing kept."""
    seen = {} if seen is None else seen
    if isinstance(obj, torch.Tensor):
        return ("tensor", obj.detach().clone())
    if id(obj) in seen:
        return ("alias", seen[id(obj)])
    if isinstance(obj, (list, dict, set, collections.deque)) or hasattr(obj, "__dict__"):
        seen[id(obj)] = len(seen)
    if isinstance(obj, (list, tuple, collections.deque)):
        return (type(obj).__name__, [snapshot(o, seen) for o in obj])
    if isinstance(obj, dict):
        default = getattr(obj, "default_factory", None)
        return (type(obj).__name__, default, [(k, snapshot(v, seen)) for k, v in obj.items()])
    if isinstance(obj, (set, frozenset)):
        return (type(obj).__name__, sorted(map(repr, obj)))
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return (type(obj).__name__, snapshot(vars(obj), seen))
    return obj


def same(a, b) -> None:
    if isinstance(a, tuple) and a and a[0] == "tensor":
        assert isinstance(b, tuple) and b[0] == "tensor"
        torch.testing.assert_close(b[1], a[1])
        return
    if isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), f"{a!r} != {b!r}"
        for x, y in zip(a, b):
            same(x, y)
        return
    assert a == b, f"{a!r} != {b!r}"


STATE: dict = {}


def run_sequence(fn, reset, args_for, calls=3, *, fullgraph=False, backend=None):
    """Eager then compiled: `reset()` builds STATE afresh, then `calls` calls with `args_for(i)` (which may
    also change STATE between calls); results, exceptions, output and STATE are compared after each call."""
    backend = backend or CountingBackend()
    compiled = framejit.compile(fn, backend=backend, fullgraph=fullgraph)
    runs = []
    for call in (fn, compiled):
        reset()
        trace = []
        for i in range(calls):
            torch.manual_seed(i)
            args = args_for(i)
            result, exc, out = call_capturing(call, args, {})
            trace.append((snapshot(result) if exc is None else None, exc, out, snapshot(STATE), snapshot(args)))
        runs.append(trace)
    for i, (eager, comp) in enumerate(zip(*runs)):
        assert comp[1] is eager[1], f"call {i}: eager raised {eager[1]}, compiled raised {comp[1]}"
        assert comp[2] == eager[2], f"call {i}: printed output differs"
        same(eager[0], comp[0])
        same(eager[3], comp[3])
        same(eager[4], comp[4])
    return backend


def x_arg(i):
    return (torch.randn(3),)


# ---- gap 1: lists and dicts read only as far as the trace uses them ---------------------------------
LOG: list = []


def log_sum(x):
    LOG.append(x.sum())
    return x * 2


def test_growing_global_log_compiles_once():
    def reset():
        LOG.clear()
        STATE["log"] = LOG
    backend = run_sequence(log_sum, reset, x_arg, calls=20, fullgraph=True)
    assert backend.graph_count == 1
    assert len(LOG) == 20


def log_extend_and_iadd(x):
    LOG.extend([x.sum(), 1])
    log = LOG
    log += (2,)
    return x + 1


def test_log_extended_and_iadded_compiles_once():
    def reset():
        LOG[:] = ["start"]
        STATE["log"] = LOG
    backend = run_sequence(log_extend_and_iadd, reset, x_arg, calls=6, fullgraph=True)
    assert backend.graph_count == 1


ITEMS: list = []


def first_times_length(x):
    return x * ITEMS[0] + len(ITEMS)


def test_index_and_length_reads_recompile_when_they_change():
    changes = [None, "append", None, "first", "append", None]

    def args_for(i):
        if changes[i] == "append":
            ITEMS.append(9)
        elif changes[i] == "first":
            ITEMS[0] += 1
        return x_arg(i)

    def reset():
        ITEMS[:] = [2, 5]
        STATE["items"] = ITEMS
    backend = run_sequence(first_times_length, reset, args_for, calls=len(changes), fullgraph=True)
    assert backend.graph_count == 4  # the first call and each of the three changes


def first_only(x):
    return x * ITEMS[0]


def test_index_read_does_not_depend_on_the_length():
    def args_for(i):
        ITEMS.append(i)  # grows; ITEMS[0] stays the same until the fourth call
        if i == 3:
            ITEMS[0] = 7
        return x_arg(i)

    def reset():
        ITEMS[:] = [3]
        STATE["items"] = ITEMS
    backend = run_sequence(first_only, reset, args_for, calls=6, fullgraph=True)
    assert backend.graph_count == 2


def last_item(x):
    return x + ITEMS[-1]


def test_negative_index_follows_the_growing_list():
    def args_for(i):
        ITEMS.append(i * 10)
        return x_arg(i)

    def reset():
        ITEMS[:] = [1]
        STATE["items"] = ITEMS
    run_sequence(last_item, reset, args_for, calls=4, fullgraph=True)


def index_out_of_range(x):
    return x + ITEMS[2]


def test_index_out_of_range_raises_and_recompiles_when_it_exists():
    def args_for(i):
        if i == 2:
            ITEMS.append(4)
        return x_arg(i)

    def reset():
        ITEMS[:] = [1, 2]
        STATE["items"] = ITEMS
    run_sequence(index_out_of_range, reset, args_for, calls=4)


def truth_of_list(x):
    if ITEMS:
        ITEMS.append(0)
        return x + 1
    return x - 1


def test_truth_of_a_growing_list_compiles_once_per_emptiness():
    def args_for(i):
        if i == 3:
            ITEMS.clear()
        return x_arg(i)

    def reset():
        ITEMS[:] = [1]
        STATE["items"] = ITEMS
    backend = run_sequence(truth_of_list, reset, args_for, calls=5, fullgraph=True)
    assert backend.graph_count == 2


def append_then_read(x):
    ITEMS.append(x.sum())
    ITEMS.append(3)
    return x + ITEMS[-1] + ITEMS[1] + len(ITEMS)


def test_items_appended_in_the_trace_are_read_back():
    def reset():
        ITEMS[:] = [1, 2]
        STATE["items"] = ITEMS
    run_sequence(append_then_read, reset, x_arg, calls=3, fullgraph=True)


def append_then_iterate(x):
    ITEMS.append(4)
    for v in ITEMS:
        if len(ITEMS) < 6:
            ITEMS.append(v + 10)
        x = x + v
    return x


def test_iterating_after_appending_sees_the_whole_list():
    def reset():
        ITEMS[:] = [1, 2]
        STATE["items"] = ITEMS
    run_sequence(append_then_iterate, reset, x_arg, calls=3, fullgraph=True)


CACHE: dict = {}


def store_and_read_scale(x):
    CACHE["last"] = x.sum()
    if "disabled" in CACHE:
        return x
    return x * CACHE["scale"] + CACHE.get("offset", 0)


def test_dict_read_by_key_ignores_other_keys_added_between_calls():
    changes = [None, "other", "other", "scale", "offset", "disabled", None]

    def args_for(i):
        change = changes[i]
        if change == "other":
            CACHE[f"other{i}"] = i
        elif change == "scale":
            CACHE["scale"] = 5
        elif change is not None:
            CACHE[change] = 1
        return x_arg(i)

    def reset():
        CACHE.clear()
        CACHE["scale"] = 2
        STATE["cache"] = CACHE
    backend = run_sequence(store_and_read_scale, reset, args_for, calls=len(changes), fullgraph=True)
    assert backend.graph_count == 4  # first call, scale changed, offset appeared, disabled appeared


def dict_len_and_missing(x):
    CACHE["new"] = 1
    return x + len(CACHE) + CACHE["absent"]


def test_dict_missing_key_raises_after_a_logged_store():
    def reset():
        CACHE.clear()
        CACHE.update(a=1)
        STATE["cache"] = CACHE
    run_sequence(dict_len_and_missing, reset, x_arg, calls=2)


def dict_store_then_iterate(x):
    CACHE["b"] = x.sum()
    CACHE["a"] = 5
    return x + sum(v for k, v in CACHE.items() if k != "b") + len(list(CACHE))


def test_dict_stores_then_whole_dict_read_keep_order():
    def args_for(i):
        CACHE[f"k{i}"] = i
        return x_arg(i)

    def reset():
        CACHE.clear()
        CACHE.update(a=1, z=2)
        STATE["cache"] = CACHE
    run_sequence(dict_store_then_iterate, reset, args_for, calls=3, fullgraph=True)


# ---- gap 2: sets from outside --------------------------------------------------------------------
SEEN: set = set()


def set_mutations(x):
    SEEN.add(3)
    SEEN.discard(1)
    SEEN.update([7, 8], (9,))
    return x * len(SEEN)


def set_operators(x):
    s = SEEN
    s |= {20}
    s -= {2}
    s &= {20, 3, 4, 7}
    s ^= {4, 5}
    return x + len(s)


def set_method_updates(x):
    SEEN.difference_update([2])
    SEEN.intersection_update({1, 3, 4})
    SEEN.symmetric_difference_update({3, 11})
    return x + (11 in SEEN)


def set_pop_single(x):
    SEEN.clear()
    SEEN.add(6)
    return x + SEEN.pop() + len(SEEN)


def set_remove_missing(x):
    SEEN.add(5)
    SEEN.remove(99)
    return x


@pytest.mark.parametrize("fn", [set_mutations, set_operators, set_method_updates, set_pop_single])
def test_global_set_mutated_without_a_break(fn):
    def reset():
        SEEN.clear()
        SEEN.update({1, 2, 4})
        STATE["seen"] = SEEN
    backend = run_sequence(fn, reset, x_arg, calls=3, fullgraph=True)
    assert backend.graph_count >= 1


def test_set_remove_of_a_missing_element_raises_keyerror():
    def reset():
        SEEN.clear()
        SEEN.update({1})
        STATE["seen"] = SEEN
    run_sequence(set_remove_missing, reset, x_arg, calls=2)


def make_closure_adder():
    s = {1, 2}

    def fn(x):
        s.add(3)
        s.add(len(s) + 10)
        return torch.cos(x) * len(x) + len(s)
    return fn, s


def test_closure_set_add():
    fn, s = make_closure_adder()
    eager = [fn(torch.ones(2)) for _ in range(3)]
    eager_state = set(s)
    fn2, s2 = make_closure_adder()
    backend = CountingBackend()
    compiled = framejit.compile(fn2, backend=backend, fullgraph=True)
    for i in range(3):
        assert_same(compiled(torch.ones(2)), eager[i])
    assert s2 == eager_state


class Bag:
    def __init__(self):
        self.tags = {"a"}
        self.items = [1]


def set_argument_and_attribute(x, tags, bag):
    tags.add("t")
    bag.tags.update(["u", "v"])
    bag.tags.discard("a")
    bag.items.append(len(bag.tags))
    return x + len(tags)


def test_set_argument_and_attribute_mutated():
    def make(i):
        return (torch.randn(2), {"q", f"s{i % 2}"}, Bag())
    backend = run_sequence(set_argument_and_attribute, lambda: None, make, calls=3, fullgraph=True)
    assert backend.graph_count >= 1


# ---- in-place operators, deletion, slices, sort -----------------------------------------------------
def list_imul_and_dict_ior(x):
    lst = ITEMS
    lst *= 2
    lst.append(0)
    d = CACHE
    d |= {"c": 3, "a": 0}
    return x + len(ITEMS) + CACHE["a"]


def local_alias_in_place(x):
    a = [1, 2]
    b = a
    a *= 2
    d = {"k": 1}
    e = d
    d |= {"j": 2}
    f = frozenset({1})
    g = f
    f |= {2}
    return x + len(b) + len(e) + len(g) + len(f)


def in_place_with_other_iterables(x):
    d = {"k": 1}
    e = d
    d |= [("j", 2)]
    g = CACHE
    g |= (("z", 3),)
    o = collections.OrderedDict(a=1)
    p = o
    o |= {"b": 2}
    lst = ITEMS
    lst *= True
    return x + len(e) + len(p) + len(ITEMS)


def deletions(x):
    del ITEMS[0]
    del ITEMS[-2:]
    ITEMS.append(x.sum())
    del CACHE["a"]
    CACHE["a"] = 5
    return x + len(ITEMS) + len(CACHE)


def delete_missing_key(x):
    CACHE["q"] = 1
    del CACHE["missing"]
    return x


def delete_out_of_range(x):
    ITEMS.append(1)
    del ITEMS[50]
    return x


def slice_assignments(x):
    ITEMS[1:2] = range(3)
    ITEMS.append(7)
    ITEMS[::2] = [0] * len(ITEMS[::2])
    ITEMS[-1:] = (x.sum(),)
    return x + len(ITEMS)


def extended_slice_length_mismatch(x):
    ITEMS.append(1)
    ITEMS[::2] = [1]
    return x


def item_assignment_out_of_range(x):
    ITEMS.append(2)
    ITEMS[40] = 1
    return x


def sort_between_appends(x):
    ITEMS.append(0)
    ITEMS.sort()
    ITEMS.append(-1)
    ITEMS.sort(reverse=True)
    ITEMS.insert(0, 100)
    ITEMS.reverse()
    return x + ITEMS[0]


def dict_methods(x):
    v = CACHE.setdefault("c", 3)
    CACHE.setdefault("a", 9)
    w = CACHE.pop("zz", 5)
    u = CACHE.pop("a")
    CACHE.update(z=1)
    return x + v + w + u + len(CACHE)


@pytest.mark.parametrize("fn", [list_imul_and_dict_ior, local_alias_in_place, in_place_with_other_iterables,
                                deletions, delete_missing_key,
                                delete_out_of_range, slice_assignments, extended_slice_length_mismatch,
                                item_assignment_out_of_range, sort_between_appends, dict_methods])
def test_in_place_operations_on_outside_containers(fn):
    def reset():
        ITEMS[:] = [3, 1, 2, 5]
        CACHE.clear()
        CACHE.update(a=1, b=2)
        STATE.update(items=ITEMS, cache=CACHE)
    run_sequence(fn, reset, x_arg, calls=3)


@pytest.mark.parametrize("fn", [list_imul_and_dict_ior, local_alias_in_place, in_place_with_other_iterables,
                                deletions, slice_assignments,
                                sort_between_appends, dict_methods])
def test_in_place_operations_capture_without_a_break(fn):
    def reset():
        ITEMS[:] = [3, 1, 2, 5]
        CACHE.clear()
        CACHE.update(a=1, b=2)
        STATE.update(items=ITEMS, cache=CACHE)
    run_sequence(fn, reset, x_arg, calls=2, fullgraph=True)


# ---- interleaving with breaks, exceptions, loops, nested calls and aliases ----------------------------
def appends_around_a_break(x):
    ITEMS.append(x.sum())
    CACHE["before"] = len(ITEMS)
    print("break here")
    ITEMS.append(2)
    ITEMS.sort(key=lambda v: float(v))
    CACHE["after"] = ITEMS[0]
    return x + 1


def appends_in_a_loop_with_breaks(x):
    for i in range(3):
        ITEMS.append(x.sum() + i)
        print(len(ITEMS))
        ITEMS.insert(0, i)
    return x + len(ITEMS)


def mutations_then_caught_exception(x):
    try:
        ITEMS.append(x)
        CACHE["tried"] = 1
        ITEMS.append(ITEMS[100])
    except IndexError:
        ITEMS.append(-1)
        CACHE["caught"] = 1
    return x + len(ITEMS)


def mutations_then_raise(x):
    ITEMS.append(1)
    CACHE["z"] = 1
    SEEN.add(42)
    raise KeyError("k")


def _helper(lst, d, v):
    lst.append(v)
    lst.insert(0, v)
    d[v] = len(lst)


def nested_helpers(x):
    _helper(ITEMS, CACHE, 1)
    _helper(ITEMS, CACHE, 2)
    return x + len(ITEMS)


class Logger:
    def __init__(self, log):
        self.log = log

    def add(self, v):
        self.log.append(v)
        return len(self.log)


def method_through_attribute_alias(x):
    logger = Logger(ITEMS)
    n = logger.add(x.sum())
    ITEMS.append(n)
    logger.log.append(3)
    return x + n + len(ITEMS)


def attribute_stores(x):
    obj = STATE["obj"]
    setattr(obj, "a" + str(len(ITEMS)), 5)
    obj.lst.append(obj.b)
    obj.b = 7
    ITEMS.append(obj.b)
    return x + obj.b


@pytest.mark.parametrize("fn", [appends_around_a_break, appends_in_a_loop_with_breaks, mutations_then_caught_exception,
                                mutations_then_raise, nested_helpers, method_through_attribute_alias,
                                attribute_stores])
def test_interleaved_mutations(fn):
    class Obj:
        pass

    def reset():
        ITEMS[:] = [3, 1]
        CACHE.clear()
        CACHE.update(a=1)
        SEEN.clear()
        SEEN.add(1)
        obj = Obj()
        obj.b = 1
        obj.lst = ITEMS  # the same list through an attribute and a global
        STATE.update(items=ITEMS, cache=CACHE, seen=SEEN, obj=obj)
    run_sequence(fn, reset, x_arg, calls=3)


def aliased_arguments(x, a, holder):
    a.append(1)
    holder.items.append(2)
    holder.items.sort()
    return x + len(a)


def test_list_held_by_an_argument_and_an_attribute():
    def make(i):
        bag = Bag()
        return (torch.randn(2), bag.items if i != 1 else [5], bag)
    run_sequence(aliased_arguments, lambda: None, make, calls=4)


DQ = collections.deque()
OD = collections.OrderedDict()
DD = collections.defaultdict(list)
CTR = collections.Counter()


def library_containers(x):
    DQ.append(3)
    DQ.appendleft(0)
    DQ.pop()
    OD["c"] = 3
    OD.move_to_end("a")
    DD["b"].append(2)
    DD["a"].append(len(DQ))
    CTR["a"] += 1
    CTR.update("aab")
    return x + len(DQ) + len(OD) + CTR["a"]


def test_library_containers_from_outside():
    def reset():
        DQ.clear()
        DQ.extend([1, 2])
        OD.clear()
        OD.update(a=1, b=2)
        DD.clear()
        DD["a"].append(1)
        CTR.clear()
        CTR["a"] = 1
        STATE.update(dq=DQ, od=OD, dd=DD, ctr=CTR)
    run_sequence(library_containers, reset, x_arg, calls=3)


class Plain:
    pass


def delete_attributes(x, obj):
    obj.a = x.sum()
    y = x + 1
    del obj.b
    y = y * 2
    if hasattr(obj, "b"):
        return y
    name = "c" + str(y.shape[0])
    setattr(obj, name, 3)
    return y + obj.a


def delete_missing_attribute(x, obj):
    obj.a = 1
    del obj.missing
    return x


def test_del_attribute_breaks_and_captures_around_it():
    def make(i):
        obj = Plain()
        obj.b = i
        return (torch.randn(2), obj)
    backend = run_sequence(delete_attributes, lambda: None, make, calls=3)
    assert backend.graph_count == 2  # before and after the deletion, not an eager frame
    run_sequence(delete_missing_attribute, lambda: None, make, calls=2)


def loop_over_log_with_break(x):
    for v in ITEMS:
        print(v)
        if len(ITEMS) < 5:
            ITEMS.append(v + 1)
        x = x + v
    return x


def test_loop_over_an_outside_list_that_grows_across_breaks():
    def reset():
        ITEMS[:] = [1, 2]
        STATE["items"] = ITEMS
    run_sequence(loop_over_log_with_break, reset, x_arg, calls=3)


def make_closure_log():
    acc = []

    def fn(x):
        acc.append(x.sum())
        acc.extend([1])
        return x * 2
    return fn, acc


def test_closure_list_appended_to_compiles_once():
    fn, acc = make_closure_log()
    eager = [fn(torch.full((2,), float(i))) for i in range(6)]
    fn2, acc2 = make_closure_log()
    backend = CountingBackend()
    compiled = framejit.compile(fn2, backend=backend, fullgraph=True)
    for i in range(6):
        assert_same(compiled(torch.full((2,), float(i))), eager[i])
    assert backend.graph_count == 1
    same(snapshot(acc2), snapshot(acc))


class Recorder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.log = []
        self.seen = set()

    def forward(self, x):
        y = self.lin(x)
        self.log.append(y.detach().sum())
        self.seen.add("forward")
        return y


def test_module_attribute_log_compiles_once():
    torch.manual_seed(0)
    eager_mod = Recorder()
    compiled_mod = Recorder()
    compiled_mod.load_state_dict(eager_mod.state_dict())
    backend = CountingBackend()
    compiled = framejit.compile(compiled_mod, backend=backend, fullgraph=True)
    for i in range(5):
        x = torch.randn(2, 3)
        assert_same(compiled(x), eager_mod(x))
    assert backend.graph_count == 1
    assert len(compiled_mod.log) == 5 and compiled_mod.seen == eager_mod.seen
    for a, b in zip(compiled_mod.log, eager_mod.log):
        torch.testing.assert_close(a, b)


def append_to_argument_and_return_it(x, out):
    out.append(x * 2)
    return out


def test_list_argument_returned_is_the_same_object():
    backend = CountingBackend()
    compiled = framejit.compile(append_to_argument_and_return_it, backend=backend, fullgraph=True)
    out = []
    for i in range(4):
        result = compiled(torch.ones(1) * i, out)
        assert result is out and len(out) == i + 1
        torch.testing.assert_close(out[-1], torch.ones(1) * i * 2)
    assert backend.graph_count == 1


def mark_seen(x):
    SEEN.add("called")
    if "stop" in SEEN:
        return x - 1
    SEEN.discard("tmp")
    return x + 1


def test_set_read_by_membership_ignores_other_elements_added_between_calls():
    changes = [None, "other", "other", "stop", None]

    def args_for(i):
        if changes[i] == "other":
            SEEN.add(f"other{i}")
        elif changes[i] == "stop":
            SEEN.add("stop")
        return x_arg(i)

    def reset():
        SEEN.clear()
        SEEN.update({"tmp", 3})
        STATE["seen"] = SEEN
    backend = run_sequence(mark_seen, reset, args_for, calls=len(changes), fullgraph=True)
    assert backend.graph_count == 2  # the first call, and "stop" appearing


class Item:
    def __init__(self, v):
        self.v = v


def sort_objects_by_key(x):
    ITEMS.append(Item(int(x.shape[0])))
    ITEMS.sort(key=lambda o: -o.v)
    ITEMS.sort(key=lambda o: o.v % 2, reverse=True)
    return x + ITEMS[0].v


def sort_key_sees_an_empty_list(x):
    ITEMS.sort(key=lambda o: len(ITEMS) + o.v)
    return x + ITEMS[0].v


def sort_key_raises(x):
    ITEMS.append(Item(0))
    ITEMS.sort(key=lambda o: 1 // (o.v - 3))
    return x


@pytest.mark.parametrize("fn", [sort_objects_by_key, sort_key_sees_an_empty_list, sort_key_raises])
def test_sort_with_a_key_function(fn):
    def reset():
        ITEMS[:] = [Item(3), Item(1), Item(2), Item(5)]
        STATE["items"] = ITEMS

    def args_for(i):
        return (torch.randn(2 + i % 2),)
    run_sequence(fn, reset, args_for, calls=3, fullgraph=fn is sort_objects_by_key)  # traced without a break
