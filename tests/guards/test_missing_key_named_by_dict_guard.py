"""NOTE [Missing keys named by their dict's guard] (guards/codegen.py; hhuntD MED-5 log, helper hfixDyn2): a guard
reading `kw['m']` that runs before the check of `kw`'s keys raises KeyError when the key is gone; the recompile log
named only that guard (`INSTANCE_ATTR_ABSENT on L['kw']['m'] ... (the check raised KeyError: 'm')`, as in gpt2
generate()'s `attention_mask`); now the failing check of the dict itself, then the raising one."""
from __future__ import annotations

import logging

import torch

import framejit


def uses_optional_mask(x, **kw):
    m = kw.get("m")
    if m is not None:
        return x + m.view(-1).sum()
    return x * 2


def test_recompile_log_names_the_dict_check(caplog):
    compiled = framejit.compile(uses_optional_mask, backend="eager")
    framejit.set_logs("recompiles")
    try:
        with caplog.at_level(logging.DEBUG, logger="framejit"):
            for kwargs in ({"m": torch.ones(3), "k": 1}, {"k": 1}):
                x = torch.ones(2)
                assert torch.equal(compiled(x, **kwargs), uses_optional_mask(x, **kwargs))
    finally:
        framejit.set_logs("")
    text = "\n".join(r.getMessage() for r in caplog.records if "recompiling" in r.getMessage())
    assert "recompiling uses_optional_mask" in text and "on L['kw']: expected 'm' present, got {'k': 1} (checked before " \
        "it: INSTANCE_ATTR_ABSENT on L['kw']['m'], the check raised KeyError: 'm')" in text
