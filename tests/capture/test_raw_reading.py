"""normalize.py's readers of raw instructions (NOTE [Reading raw instructions]): calls, keyword names,
method loads and stack effects of code as the running CPython spells it (3.11's PRECALL and LOAD_METHOD,
3.12's KW_NAMES, 3.13's CALL_KW), read the same on every supported version."""
from __future__ import annotations

import dis

import bytecode

from framejit.capture import normalize


def target(*args, **kwargs):
    return args, kwargs


def sample(o, a, b):
    return target(a, o.x, key=o.m(b), other=len(a))


def _items():
    return list(bytecode.Bytecode.from_code(sample.__code__))


def test_calls_are_read_with_their_argument_counts_and_keyword_names():
    items = _items()
    calls = [(p, normalize.raw_call(items, p)) for p in range(len(items))]
    calls = [(p, group) for p, group in calls if group is not None]
    # o.m(b), len(a), then target(...), in the order they run
    assert [(n, names) for _, (_, n, names) in calls] == [(1, ()), (1, ()), (4, ("key", "other"))]
    # target's call starts right after the last instruction of len(a)'s call: its last argument
    (_, _), (len_position, _), (_, (target_start, _, _)) = calls
    assert target_start == len_position + 1


def test_stack_effects_account_for_every_value():
    """Walking the straight-line body with the effects leaves the returned value alone on the stack."""
    depth = 0
    for item in _items():
        if not isinstance(item, bytecode.Instr) or item.name in ("RESUME", "RETURN_VALUE"):
            continue
        pops, pushes = normalize.raw_stack_effect(item)
        assert depth >= pops, item
        depth += pushes - pops
    assert depth == 1


def test_method_loads_and_the_nulls_loads_push():
    assert [normalize.raw_method_name(i) for i in _items() if isinstance(i, bytecode.Instr)
            and normalize.raw_method_name(i)] == ["m"]
    with_null = [i.argval for i in dis.get_instructions(sample) if normalize.raw_load_pushes_null(i.opname, i.arg)]
    assert with_null == ["target", "m", "len"]  # o.x is a plain attribute load
