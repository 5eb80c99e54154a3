"""Compiling each block of a model on its own (PyTorch's regional compilation recipe) shares compiled code
between the blocks of one class (NOTE [Compiled modules of one class share their code] in api.py): each block
still runs with its own parameters and state, equal to eager, and blocks that differ in what the trace
reads get entries of their own."""
from __future__ import annotations

import copy

import torch

import framejit
from tests.helpers import CountingBackend


class Block(torch.nn.Module):
    def __init__(self, width: int = 8, scale: float = 1.0) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(width, width)
        self.scale = scale

    def forward(self, x):
        return torch.relu(self.lin(torch.sin(x))) * self.scale + x


class Indexed(torch.nn.Module):
    """Each block reads a list by its own index: the trace specialises the index (a list subscript)."""
    def __init__(self, idx: int, table: list) -> None:
        super().__init__()
        self.idx = idx
        self.table = table

    def forward(self, x):
        return x * self.table[self.idx]


def _chain(blocks, x):
    for b in blocks:
        x = b(x)
    return x


def test_blocks_compiled_one_by_one_share_one_graph():
    torch.manual_seed(0)
    blocks = [Block() for _ in range(6)]
    be = CountingBackend()
    compiled = [framejit.compile(b, backend=be) for b in blocks]
    for n in (3, 3, 5):
        x = torch.randn(n, 8)
        with torch.no_grad():
            assert torch.allclose(_chain(compiled, x), _chain(blocks, x), atol=1e-6)
    # one trace serves the six blocks (their parameters are graph inputs); the size change adds at most one
    assert be.graph_count <= 2, be.graph_count


def test_each_block_keeps_its_own_state_between_calls():
    torch.manual_seed(1)
    blocks = [Block(scale=float(i + 1)) for i in range(4)]
    be = CountingBackend()
    compiled = [framejit.compile(b, backend=be) for b in blocks]
    x = torch.randn(2, 8)
    with torch.no_grad():
        for step in range(3):
            assert torch.allclose(_chain(compiled, x), _chain(blocks, x), atol=1e-6)
            blocks[step].lin.weight.add_(0.5)  # a change to one block only
            blocks[3 - step].scale = -2.0 * (step + 1)  # a Python attribute of another
            assert torch.allclose(compiled[step](x), blocks[step](x), atol=1e-6)
            assert torch.allclose(compiled[3 - step](x), blocks[3 - step](x), atol=1e-6)


def test_copies_run_with_their_own_parameters():
    torch.manual_seed(2)
    block = Block()
    compiled = framejit.compile(block, backend="eager")
    x = torch.randn(3, 8)
    assert torch.allclose(compiled(x), block(x))
    twin = copy.deepcopy(compiled)
    with torch.no_grad():
        twin.lin.weight.mul_(-1.0)
    assert not torch.allclose(twin(x), compiled(x))
    assert torch.allclose(twin(x), type(block).forward(twin, x))
    assert torch.allclose(compiled(x), block(x))
    loss = twin(x).sum()
    loss.backward()
    assert twin.lin.weight.grad is not None and block.lin.weight.grad is None


def test_blocks_that_need_their_own_entries_keep_their_budget():
    """Twelve blocks that each specialise their index need twelve entries: more than one recompile limit,
    which each of them had when compiled alone; none may run eagerly."""
    table = [float(i) + 0.5 for i in range(12)]
    blocks = [Indexed(i, table) for i in range(12)]
    be = CountingBackend()
    compiled = [framejit.compile(b, backend=be) for b in blocks]
    eager_before = framejit.stats()["eager_frames"]  # a process-wide count: other tests' frames are in it
    for n in (2, 4):
        x = torch.randn(n)
        for b, c in zip(blocks, compiled):
            assert torch.equal(c(x), b(x))
    table[5] = -1.0
    x = torch.randn(3)
    assert all(torch.equal(c(x), b(x)) for b, c in zip(blocks, compiled))
    assert framejit.stats()["eager_frames"] == eager_before, framejit.stats()["eager_frame_reasons"][-3:]


def test_different_compile_arguments_do_not_share():
    blocks = [Block() for _ in range(2)]
    first, second = CountingBackend(), CountingBackend()
    a = framejit.compile(blocks[0], backend=first)
    b = framejit.compile(blocks[1], backend=second)
    x = torch.randn(2, 8)
    with torch.no_grad():
        assert torch.allclose(a(x), blocks[0](x)) and torch.allclose(b(x), blocks[1](x))
    assert first.graph_count == 1 and second.graph_count == 1


def test_reset_forgets_shared_code():
    blocks = [Block() for _ in range(3)]
    be = CountingBackend()
    compiled = [framejit.compile(b, backend=be) for b in blocks]
    x = torch.randn(2, 8)
    with torch.no_grad():
        _chain(compiled, x)
        assert be.graph_count == 1
        framejit.reset()
        again = [framejit.compile(b, backend=be) for b in blocks]
        assert torch.allclose(_chain(again, x), _chain(blocks, x), atol=1e-6)
    assert be.graph_count == 2


class Tagged(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.tag = "t0"

    def forward(self, x):
        y = self.lin(x)
        if self.tag.endswith("7"):
            y = y * 2
        return y + len(self.tag)


def test_a_block_that_always_recompiles_does_not_starve_the_others():
    """Review revN N6: one instance whose trace reads a string that changes on every call used up the
    shared hook's budget, and a steady instance of the class then ran eagerly without ever being traced."""
    noisy, steady = Tagged(), Tagged()
    steady.tag = "steady"  # a value none of the noisy block's entries was traced for
    be = CountingBackend()
    c_noisy, c_steady = framejit.compile(noisy, backend=be), framejit.compile(steady, backend=be)
    with torch.no_grad():
        for i in range(30):
            noisy.tag = "t" * (i % 7 + 1) + str(i)
            x = torch.randn(2, 4)
            assert torch.equal(c_noisy(x), noisy(x))
        before = be.graph_count
        for _ in range(3):
            x = torch.randn(2, 4)
            assert torch.equal(c_steady(x), steady(x))
    assert be.graph_count == before + 1, (before, be.graph_count)


def test_a_dropped_model_of_a_class_made_at_run_time_is_freed(own_objects):
    """Review revN N10: the table of shared hooks kept classes made at run time (and their graphs) alive."""
    import gc
    import weakref

    def make():
        cls = type("Made", (Block,), {})
        m = cls()
        c = framejit.compile(m, backend="eager")
        x = torch.randn(2, 8)
        with torch.no_grad():
            assert torch.allclose(c(x), m(x)) and torch.allclose(c(x), m(x))
        return weakref.ref(cls), weakref.ref(m)

    refs = [make() for _ in range(3)]
    gc.collect()
    assert [r() for pair in refs for r in pair] == [None] * 6


def test_a_storming_block_gets_one_limit_not_the_pool():
    """Review revM F9: the pooled budget let one block that recompiles on every call trace (blocks x limit)
    times; it now stops at one recompile limit, as when compiled alone, and the others still share one entry."""
    from framejit import config
    blocks = [Tagged() for _ in range(6)]
    be = CountingBackend()
    compiled = [framejit.compile(b, backend=be) for b in blocks]
    with torch.no_grad():
        for i in range(40):
            blocks[0].tag = "t" * (i % 7 + 1) + str(i)
            x = torch.randn(2, 4)
            assert torch.equal(_chain(compiled, x), _chain(blocks, x))
    assert be.graph_count <= config.recompile_limit + 2, be.graph_count
