"""The fuzzer's entry points: the block catalogue, program generation per seed and backend (excluded
families filtered out, tiny programs for triton), and a campaign over a range of seeds."""
from __future__ import annotations

import contextlib
import dataclasses
import tempfile

from . import blocks_dunders, blocks_more, blocks_outside, blocks_protocol, blocks_python, blocks_torch
from .excluded import is_excluded
from .program import Program, generate
from .runner import Difference, run_program

ALL_FACTORIES = (blocks_python.FACTORIES + blocks_torch.FACTORIES + blocks_protocol.FACTORIES
                 + blocks_more.FACTORIES + blocks_outside.FACTORIES + blocks_dunders.FACTORIES)


def family_of(factory) -> str:
    import random
    return factory(random.Random(0)).family


def factories_for(backend: str, *, all_families: bool = False, only: set[str] | None = None) -> list:
    chosen = []
    for factory in ALL_FACTORIES:
        family = family_of(factory)
        if only is not None and family not in only:
            continue
        if all_families or not is_excluded(family, backend):
            chosen.append(factory)
    return chosen


def program_for(seed: int, backend: str, factories: list, max_blocks: int | None = None) -> Program:
    tiny = backend == "triton"
    return generate(seed, factories, max_blocks=max_blocks or (2 if tiny else 4), tiny=tiny)


@dataclasses.dataclass
class Campaign:
    backend: str
    programs: int = 0
    differences: list[Difference] = dataclasses.field(default_factory=list)
    counters: dict = dataclasses.field(default_factory=dict)   # framejit.stats() summed over programs


def campaign(backend, seeds, *, all_families: bool = False, only: set[str] | None = None,
             compile_fn=None, warm: bool = False, max_blocks: int | None = None) -> Campaign:
    """Run the programs of `seeds`; `warm` runs each against a persistent cache filled by a first copy
    (a temporary cache directory for the campaign, see NOTE [Warm runs] in runner.py)."""
    name = backend if isinstance(backend, str) else "eager"
    factories = factories_for(name, all_families=all_families, only=only)
    result = Campaign(name)
    with persistent_cache(warm):
        for seed in seeds:
            result.programs += 1
            found = run_program(program_for(seed, name, factories, max_blocks), backend, compile_fn=compile_fn,
                                counters=result.counters, warm=warm)
            if found is not None:
                result.differences.append(found)
    return result


@contextlib.contextmanager
def persistent_cache(enabled: bool):
    """framejit's persistent cache on, in a temporary directory, while the block runs (if `enabled`)."""
    import framejit
    saved = framejit.config.cache_enabled, framejit.config.cache_dir
    if enabled:
        framejit.config.cache_enabled, framejit.config.cache_dir = True, tempfile.mkdtemp(prefix="framejit-warm-")
    try:
        yield
    finally:
        framejit.config.cache_enabled, framejit.config.cache_dir = saved
