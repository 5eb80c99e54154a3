"""Warm starts for frames that call id() (issue 16; NOTE [Ids as keys inside the trace] in capture/process_ids.py).

The `kernels` hub layers on most transformers 5.x attention and norm classes fill a dict made in the call with
`funcs[id(fn)] = ...` and look it up with `funcs.get(id(self))`. Such entries were kept in memory only ("the
trace read id() of an object"), so every warm process traced those forwards again. Now an entry whose ids
stay keys of the trace's own dicts is persisted: a warm process traces nothing and its values are
eager's. Entries that use the number itself (hex(id(m)), id() % n, a returned dict keyed by ids, an id stored
into a global dict, looked up in one, ordered, or put in a set, whose elements frozenset(), hash() and str() fold
whole) are still kept in memory only: the warm process traces them
again and answers with its own process's ids, as eager does (compared in that process).
"""
from __future__ import annotations

import textwrap

from tests.helpers import run_cache_program

MOD = textwrap.dedent('''
    import torch

    class Active:  # kernels' CompileableContextVar while compiling
        def __init__(self):
            self.global_var = None

        def get(self):
            return self.global_var

        def set(self, value):
            previous, self.global_var = self.global_var, value
            return previous

        def reset(self, token):
            self.global_var = token

    class Scale(torch.nn.Module):
        def forward(self, x):
            funcs = ACTIVE.get()
            if funcs is not None and (k := funcs.get(id(self))) is not None:
                return x * k
            return x + 1

    SCALE = Scale()
    OTHER = Scale()
    ACTIVE = Active()
    REGISTRY = {}

    class Block(torch.nn.Module):
        def __init__(self, fns):
            super().__init__()
            self.fns = fns
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):  # the kernels hub pattern: a dict made here, keyed by ids, set and reset
            funcs = dict(ACTIVE.get() or {})
            for i, fn in enumerate(self.fns):
                funcs[id(fn)] = i + 2
            seen = {id(OTHER): True}
            token = ACTIVE.set(funcs)
            try:
                y = SCALE(self.lin(x)) + OTHER(x)
            finally:
                ACTIVE.reset(token)
            return y * (2 if id(OTHER) in seen else 3) + (4 if id(SCALE) in seen else 5)

    def hex_id(x):
        return x + 1, hex(id(SCALE))

    def id_mod(x):
        return x * (id(SCALE) % 7)

    def returned(x):
        return {id(SCALE): 1, id(OTHER): 2}, x + 1

    def stored(x):
        REGISTRY[id(SCALE)] = 5
        return x - 1

    def looked_up(x):
        return x * REGISTRY.get(id(OTHER), 3)

    def ordered(x):
        return x * (1 if id(SCALE) < id(OTHER) else 2)

    def in_a_set(x):
        return x * (2 if id(SCALE) in {id(OTHER)} else 3)

    def frozen_hash(x):  # review revE E4: the set's elements folded whole
        return x * (hash(frozenset({id(SCALE)})) % 7)

    def iterated(x):
        d = {id(SCALE): 1, id(OTHER): 2}
        return x + 1, [k == id(OTHER) for k in d], list(d) == sorted(d)
''')

PROGRAM = textwrap.dedent('''
    import json, torch, framejit
    import id_mod as m

    torch.manual_seed(0)
    block = m.Block([m.SCALE])
    ok = True

    def same(a, b):
        if isinstance(a, torch.Tensor):
            return torch.allclose(a, b)
        if isinstance(a, (tuple, list)):
            return len(a) == len(b) and all(same(p, q) for p, q in zip(a, b))
        if isinstance(a, dict):
            return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
        return a == b

    for fn in (block, m.hex_id, m.id_mod, m.returned, m.stored, m.looked_up, m.ordered, m.iterated,
               m.in_a_set, m.frozen_hash):
        compiled = framejit.compile(fn, backend="eager")
        for size in (3, 5):
            x = torch.randn(size, 4)
            m.REGISTRY.clear()
            want = fn(x)
            m.REGISTRY.clear()
            got = compiled(x)
            ok = ok and same(want, got)
            if fn is m.stored:
                ok = ok and m.REGISTRY == {id(m.SCALE): 5}
    s = framejit.stats()
    names = sorted({f["function"] for f in s["frames"] if f["cache"] != "hit"})
    print(json.dumps({"ok": ok, "traced": s["frames_traced"], "loaded": s["frames_loaded"],
                      "eager": s["eager_frames"], "traced_names": names}))
''')

KEPT_IN_MEMORY = ["frozen_hash", "hex_id", "id_mod", "in_a_set", "iterated", "looked_up", "ordered", "returned",
                  "stored"]


def test_ids_kept_as_keys_start_warm(tmp_path):
    (tmp_path / "id_mod.py").write_text(MOD)
    cold = run_cache_program(tmp_path, "ids.py", PROGRAM)
    warm = run_cache_program(tmp_path, "ids.py", PROGRAM)
    assert cold["ok"] and cold["eager"] == 0 and cold["traced"] > 0, cold
    assert warm["ok"] and warm["eager"] == 0, warm
    # Block.forward (and Scale.forward inlined in it) loads; each function using the number is traced again
    assert warm["traced_names"] == KEPT_IN_MEMORY, warm
    assert warm["loaded"] >= 1, warm
