"""Red-team warm starts (issue 12, "nothing wrong is loaded from the cache"; h12warm): a program runs in a cold
process, then, with something changed between the two, in a warm one sharing its cache folder; the warm one must
return what eager returns in it (and, where nothing relevant changed, trace nothing). What was wrong:

- a function bound under the name the entry located it by is another function with the same code (a plugin
  choosing its implementation, `hlp.scale = hlp2.scale`): the identity guard pinned what the name finds now, the
  code hash matched, and the entry computed with the globals of the old function's module (NOTE [Imported by
  their own name] in capture/locators.py);
- resolving a locator imported a module the warm process had not imported (its top-level code ran, printing
  here; eager never imports it) (NOTE [Locators import no user module]);
- `id(OBJ) % 7` folded into the graph: the object's id in the warm process is another number (NOTE [Ids are per
  process] in capture/stdlib.py).

Programs run in forked children of a program server on a copy of framejit (tests/cache/warm_programs.py).
"""
from __future__ import annotations

import textwrap

import pytest

from tests.cache.warm_programs import copy_framejit, run_warm

PRELUDE = textwrap.dedent('''
    import json, os, sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch
    import framejit
    WARM = sys.argv[2] == "warm"

    def check(fn):
        c = framejit.compile(fn, backend=sys.argv[1])
        ok = True
        for s in range(3):
            x = torch.randn(3, 4, generator=torch.Generator().manual_seed(s))
            ok = ok and torch.allclose(c(x), fn(x))
        stats = framejit.stats()
        print(json.dumps({"equal": ok, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"]}))
''')

PROGRAMS = {
    "rebound_function": ('''
import hlp, hlp2
if WARM:
    hlp.scale = hlp2.scale  # the same code, another module's globals
def f(x):
    return hlp.scale(x) + 1
check(f)
''', {"hlp.py": "K = 2\ndef scale(x):\n    return x * K\n", "hlp2.py": "K = 5\ndef scale(x):\n    return x * K\n"}),
    "implementation_chosen_at_import": ('''
import hlp
def f(x):
    return hlp.scale(x) + 1
check(f)
''', {"hlp.py": "import sys\nif sys.argv[2] == 'warm':\n    from impl_fast import scale\nelse:\n    from impl_slow import scale\n",
      "impl_fast.py": "K = 5\ndef scale(x):\n    return x * K\n",
      "impl_slow.py": "print('impl_slow imported')\nK = 2\ndef scale(x):\n    return x * K\n"}),
    "id_of_a_global": ('''
class Obj:
    pass
junk = [Obj() for _ in range(3 if WARM else 40)]  # another address in the warm process
OBJ = Obj()
def f(x):
    return x * (id(OBJ) % 997)
check(f)
''', {}),
}


@pytest.fixture(scope="module")
def install(tmp_path_factory):
    return copy_framejit(tmp_path_factory.mktemp("install"))


def _run(tmp_path, install, name: str, mode: str) -> tuple[dict, str]:
    program, files = PROGRAMS[name]
    for file, text in files.items():
        (tmp_path / file).write_text(text)
    result = run_warm(tmp_path, install, PRELUDE + program, mode, backend="eager")
    out = max(tmp_path.glob("run*.out"), key=lambda p: int(p.stem[3:])).read_text()
    return result, out


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_a_warm_process_whose_bindings_changed_returns_what_eager_returns(tmp_path, install, name):
    cold, _ = _run(tmp_path, install, name, "cold")
    assert cold["equal"] and cold["traced"] >= 1
    warm, out = _run(tmp_path, install, name, "warm")
    assert warm["equal"], warm
    assert warm["traced"] >= 1  # nothing cached fits this process
    assert "impl_slow imported" not in out  # the warm program never imports it


def test_an_unchanged_program_still_starts_warm(tmp_path, install):
    """The twin of the first program with nothing changed: the checks above do not cost its warm start."""
    program, files = PROGRAMS["rebound_function"]
    program = program.replace("if WARM:", "if False:")
    PROGRAMS["_unchanged"] = (program, files)
    try:
        cold, _ = _run(tmp_path, install, "_unchanged", "cold")
        warm, _ = _run(tmp_path, install, "_unchanged", "warm")
    finally:
        del PROGRAMS["_unchanged"]
    assert cold["equal"] and warm["equal"]
    assert (warm["traced"], warm["loaded"]) == (0, 1)


def _helper(x):
    return x + 1


def test_a_code_in_the_given_modules_is_found_without_scanning_every_module(monkeypatch):
    """Issue 16's open item: code_locator listed every module of sys.modules (comparing files) before trying the
    modules it was given, on every save of an entry that pins a code object; now only when they lack it."""
    import sys
    import types

    from framejit.capture import locators

    class Modules(dict):
        def items(self):
            raise AssertionError("every module of sys.modules was scanned")

    monkeypatch.setattr(locators, "sys", types.SimpleNamespace(modules=Modules(sys.modules)))
    assert locators.code_locator(_helper.__code__, [__name__]) == ("code", ("import", __name__, "_helper"))


FROZEN = '''
import gc
from torch import nn
def marked(x):
    return x + 1
torch.compiler.allow_in_graph(marked)  # some function is marked (importing transformers marks four)
def doubled(forward):
    def wrapper(self, x):  # no functools.wraps: found by the class that holds it
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
gc.freeze()  # a server freezes what it imported before forking its workers
check(net)
'''


def test_a_process_that_froze_its_objects_starts_warm(tmp_path, install):
    """Issue 16's open item: after gc.freeze() the garbage collector's scans (get_objects, get_referrers) miss
    every object alive then: the decorated forward (found by its class) and the marked function were not found,
    and the entries were kept in memory only (NOTE [Classes near the function first] in locators.py, NOTE [Marks
    after gc.freeze] in frame_cache.py)."""
    PROGRAMS["_frozen"] = (FROZEN, {})
    try:
        cold, _ = _run(tmp_path, install, "_frozen", "cold")
        warm, _ = _run(tmp_path, install, "_frozen", "warm")
    finally:
        del PROGRAMS["_frozen"]
    assert cold["equal"] and warm["equal"]
    assert cold["traced"] >= 1 and (warm["traced"], warm["loaded"]) == (0, cold["traced"])
