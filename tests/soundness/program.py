"""Soundness-fuzzer programs: building blocks, their composition into one program, and its source.

A `Block` is one realistic piece of user code together with the state it reads and the ways that state
changes between calls: module-level setup (classes, config objects, modules, globals), parameters and
per-call arguments of the compiled function `f`, lines of `f`'s body (which update the running tensor
`out` and may append Python values to `aux`), mutations run between calls, and expressions whose values
are compared after every call (the state `f` may have mutated). Block factories live in
`blocks_python.py`, `blocks_torch.py`, `blocks_protocol.py` and `blocks_more.py`; each takes a `random.Random` and a unique number `n` that
replaces every `$` in the block's code, so two blocks of one family never share names.

`Program` is a list of blocks plus a schedule: which mutation runs before which call. `render()` gives
one self-contained Python module (`f`, `make_args(i)`, `state()`), so a difference is reproduced by the
source alone (see runner.reproducer).

# NOTE [Mutation scopes]
A mutation of the program's own objects (an attribute, a global of the program, `f.__kwdefaults__`) has
scope "ns": it runs in the eager namespace and again in the compiled namespace (each has its own copy
of every object). A mutation of process-wide state (grad mode, default dtype, global module hooks,
monkeypatched torch functions) has scope "global": it runs once, before both calls, in a scratch
namespace `G` kept for the whole program, and the block's `teardown` restores it at the end.
"""
from __future__ import annotations

import dataclasses
import random
import textwrap


@dataclasses.dataclass(frozen=True)
class Mutation:
    code: str
    scope: str = "ns"          # "ns" or "global", see NOTE [Mutation scopes]


@dataclasses.dataclass(frozen=True)
class Block:
    family: str
    setup: str = ""                       # module-level code
    params: tuple[str, ...] = ()          # positional parameters of f, passed by make_args
    args: tuple[str, ...] = ()            # one expression per parameter; `i` is the call index, `g` a Generator
    kwonly: tuple[str, ...] = ()          # keyword-only parameters with defaults, e.g. "alpha$=1.0"
    body: str = ""                        # lines of f's body
    mutations: tuple[Mutation, ...] = ()
    state: tuple[str, ...] = ()           # expressions compared after each call
    teardown: str = ""                    # global-scope cleanup, run once at the end
    tiny: bool = True                     # cheap enough for the triton backend's programs

    def numbered(self, n: int) -> "Block":
        sub = lambda s: s.replace("$", str(n))  # noqa: E731
        return Block(self.family, sub(self.setup), tuple(map(sub, self.params)), tuple(map(sub, self.args)),
                     tuple(map(sub, self.kwonly)), sub(self.body),
                     tuple(Mutation(sub(m.code), m.scope) for m in self.mutations),
                     tuple(map(sub, self.state)), sub(self.teardown), self.tiny)


@dataclasses.dataclass(frozen=True)
class Step:
    """Before call `call`, run mutation `mutation` of block `block` (None: just call again)."""
    block: int | None
    mutation: int | None


# How a block's body is placed in f (NOTE [Placement]).
WRAPS = ("plain", "plain", "helper", "try", "loop", "method")
# Statements that end the graph, put after a block (NOTE [Placement]).
BREAKS = ("", "", "", "print('step', tuple(out.shape))", "_ = out.sum().item()",
          "if out.sum() > 0:\n    out = out + 0.0")


@dataclasses.dataclass(frozen=True)
class Program:
    seed: int
    blocks: tuple[Block, ...]
    steps: tuple[Step, ...]               # one per call after the first
    wraps: tuple[str, ...] = ()           # one per block, from WRAPS
    breaks: tuple[str, ...] = ()          # one per block, from BREAKS

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(sorted({b.family for b in self.blocks}))

    def mutation(self, step: Step) -> Mutation | None:
        return None if step.block is None else self.blocks[step.block].mutations[step.mutation]

    def without_block(self, index: int) -> "Program":
        drop = lambda t: t[:index] + t[index + 1:]  # noqa: E731
        steps = tuple(s if s.block is None or s.block < index else Step(s.block - 1, s.mutation)
                      for s in self.steps if s.block != index)
        return Program(self.seed, drop(self.blocks), steps, drop(self.wraps), drop(self.breaks))

    def without_step(self, index: int) -> "Program":
        return dataclasses.replace(self, steps=self.steps[:index] + self.steps[index + 1:])

    def plainer(self, index: int) -> "Program | None":
        """The program with block `index` placed plainly and without a break after it (None: already)."""
        if self.wraps[index] == "plain" and not self.breaks[index]:
            return None
        return dataclasses.replace(self, wraps=self.wraps[:index] + ("plain",) + self.wraps[index + 1:],
                                   breaks=self.breaks[:index] + ("",) + self.breaks[index + 1:])


def _indent(code: str, prefix: str = "    ") -> str:
    return textwrap.indent(textwrap.dedent(code).strip("\n"), prefix) + "\n" if code.strip() else ""


# NOTE [Placement]
# A block's body runs where user code would have it: inline in f ("plain"), in a module-level helper
# function called with the block's parameters ("helper", inlined by the tracer), under
# `try/except (AttributeError, NameError, KeyError)` that records the exception ("try": deleted
# attributes and globals are then handled, not fatal), in a two-iteration loop ("loop") or in a method of
# a small stateful object ("method"). A statement that ends the graph (print, .item(), a data-dependent
# branch) may follow a block, so later blocks' reads happen in resume functions and their guards.

def _placed(block: Block, wrap: str, n: int) -> tuple[str, str]:
    """(module-level code, lines of f) for a block's body under `wrap`."""
    body = textwrap.dedent(block.body).strip("\n")
    if not body.strip():
        return "", ""
    names = [p for p in block.params] + [k.split("=")[0] for k in block.kwonly]
    if wrap in ("helper", "method"):
        sig = ", ".join(["out", "aux"] + names)
        args = ", ".join(["out", "aux"] + names)
        if wrap == "helper":
            code = f"def _step{n}({sig}):\n{_indent(body)}    return out\n"
            return code, f"out = _step{n}({args})\n"
        code = (f"class _Stage{n}:\n    def __init__(self):\n        self.gain = 1.0\n"
                f"    def run(self, {sig}):\n        out = out * self.gain\n{_indent(body, '        ')}"
                f"        return out\n_stage{n} = _Stage{n}()\n")
        return code, f"out = _stage{n}.run({args})\n"
    if wrap == "try":
        return "", (f"try:\n{_indent(body)}except (AttributeError, NameError, KeyError) as e:\n"
                    f"    aux.append(type(e).__name__)\n")
    if wrap == "loop":
        return "", f"for _rep in range(2):\n{_indent(body)}"
    return "", body + "\n"


def render(program: Program) -> str:
    """The program as one Python module defining f, make_args(i) and state()."""
    blocks = program.blocks
    wraps = program.wraps or ("plain",) * len(blocks)
    breaks = program.breaks or ("",) * len(blocks)
    src = "import math\nimport types\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
    src += "torch.manual_seed(0)\n"
    lines = ""
    for n, (b, wrap, brk) in enumerate(zip(blocks, wraps, breaks)):
        if b.setup.strip():
            src += f"# --- {b.family}\n" + textwrap.dedent(b.setup).strip("\n") + "\n"
        helper, inline = _placed(b, wrap, n)
        src += helper
        lines += _indent(inline) + (_indent(brk) if brk else "")
    params = ["x"] + [p for b in blocks for p in b.params]
    kwonly = [k for b in blocks for k in b.kwonly]
    sig = ", ".join(params + (["*"] + kwonly if kwonly else []))
    src += f"\n\ndef f({sig}):\n    aux = []\n    out = x * 1.0\n" + lines
    src += "    return out, aux\n\n\n"
    src += "def make_args(i):\n    g = torch.Generator().manual_seed(100 + i)\n"
    src += "    x = torch.randn(2, 4, generator=g)\n"
    for b in blocks:
        for p, a in zip(b.params, b.args):
            src += f"    {p} = {a}\n"
    src += f"    return ({', '.join(params)},)\n\n\n"
    state = [s for b in blocks for s in b.state]
    src += "def state():\n    return [" + ", ".join(state) + "]\n"
    return src


def generate(seed: int, factories: list, *, max_blocks: int = 4, tiny: bool = False) -> Program:
    """A program of 1..max_blocks blocks drawn from `factories`, with a random mutation schedule.

    The first block comes from factory `seed % len(factories)`, so consecutive seeds cover every family."""
    rng = random.Random(seed)
    count = rng.randint(1, max_blocks)
    blocks = []
    for n in range(count):
        for attempt in range(20):
            factory = factories[seed % len(factories)] if n == 0 and attempt == 0 else rng.choice(factories)
            block = factory(rng).numbered(n)
            if block.tiny or not tiny:
                blocks.append(block)
                break
    wraps = tuple(rng.choice(WRAPS) for _ in blocks)
    breaks = tuple(rng.choice(BREAKS) for _ in blocks)
    steps = [Step(None, None)]
    pending = [Step(b, m) for b, block in enumerate(blocks) for m in range(len(block.mutations))]
    rng.shuffle(pending)
    for step in pending[: 2 + rng.randint(0, 3)]:
        steps.append(step)
        if rng.random() < 0.25 and len(steps) < 6:
            steps.append(Step(None, None))
    return Program(seed, tuple(blocks), tuple(steps), wraps, breaks)
