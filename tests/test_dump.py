"""FRAMEJIT_DUMP (framejit/dump.py): which files an entry dump holds, that the readable pseudo-source
means what the transformed bytecode means (executed side by side on random inputs), determinism,
stale-file removal, and that dumping never raises."""
from __future__ import annotations

import ast
import logging
import operator
import os
import re

import pytest
import torch

import framejit
from framejit import config, dump, logs


def f(x, y, n):
    z = x + y * 2
    return {"a": z.relu(), "b": (z, x.shape[0] + n)}, [y], z[1:]


def straight(x, y):
    a, b = x.sin(), y.cos()
    c = torch.cat([a, b])[1:-1]
    d = {"sum": c.sum(), "k": 2}
    return (a * b - 1, d, -c, c[::2])


def looping(x):
    for _ in range(2):
        x = x + 1
    return x


def _compiled_entry(fn, *args):
    hook = framejit.compile(fn)
    hook(*args)
    return hook, hook.entries[0]


def _dump(hook, entry, index=0, backend_outputs=None):
    code = hook.fn.__code__
    outputs = backend_outputs if backend_outputs is not None else [repr(g.forward) for g in entry.graphs]
    return dump.dump_entry(code.co_qualname, code.co_filename, code.co_firstlineno, index, entry.guard.source,
                           entry.fn.__code__, entry.graphs, outputs, code)


def _read_all(directory):
    return {name: open(os.path.join(directory, name), encoding="utf-8").read()
            for name in sorted(os.listdir(directory))}


def _args(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(5, generator=g), torch.randn(5, generator=g)


@pytest.fixture
def dump_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "dump_dir", str(tmp_path / "dumps"))
    return tmp_path / "dumps"


@pytest.fixture
def fallback_logs():
    logs.set_logs("eager_fallback")
    yield
    logs.set_logs("")


def test_entry_directory_holds_every_artifact(dump_dir):
    hook, entry = _compiled_entry(f, *_args(0), 3)
    directory = _dump(hook, entry, index=0)
    assert directory == str(dump_dir / f"f_{f.__code__.co_firstlineno}" / "entry_0")
    files = _read_all(directory)
    assert sorted(files) == ["backend_0.txt", "graph_0.py", "graph_0.txt", "guards.py", "original_bytecode.txt",
                             "transformed.py", "transformed_bytecode.txt"]
    for name, text in files.items():
        assert text.startswith(f"# framejit dump: f ({__file__}:{f.__code__.co_firstlineno}), entry 0"), name
        assert not re.search(r"0x[0-9a-fA-F]{6,}", text), name
    ast.parse(files["guards.py"])  # the guard function is real Python
    assert "x.shape == (5,)" in files["guards.py"] and "def ___guard_f_0(x, y, n):" in files["guards.py"]
    ast.parse(files["graph_0.py"])
    assert entry.graphs[0].code.strip() in files["graph_0.py"]
    assert "placeholder" in files["graph_0.txt"] and "call_method" in files["graph_0.txt"]
    assert "LOAD_METHOD" in files["original_bytecode.txt"] or "LOAD_ATTR" in files["original_bytecode.txt"]
    assert "___graph_out" in files["transformed_bytecode.txt"]
    assert "<bound method forward of GraphModule()>" in files["backend_0.txt"]
    transformed = files["transformed.py"]
    ast.parse(transformed)
    assert "def f(x, y, n):" in transformed and "___graph_out = graph_0(x, y)" in transformed


def test_nested_function_names_are_sanitized(dump_dir):
    def inner(x):
        return x.cos()

    hook, entry = _compiled_entry(inner, torch.randn(2))
    directory = _dump(hook, entry, index=2)
    expected = f"test_nested_function_names_are_sanitized_locals_inner_{inner.__code__.co_firstlineno}"
    assert directory == str(dump_dir / expected / "entry_2")


def test_same_function_dumped_twice_gives_identical_files(dump_dir, monkeypatch):
    hook, entry = _compiled_entry(f, *_args(0), 3)
    first = _read_all(_dump(hook, entry))
    framejit.reset()  # a new entry: new guard function (process-wide counter), new graph module objects
    hook2, entry2 = _compiled_entry(f, *_args(1), 3)
    assert entry2 is not entry and entry2.guard.source != entry.guard.source  # the raw names differ
    monkeypatch.setattr(config, "dump_dir", str(dump_dir) + "_second")
    second = _read_all(_dump(hook2, entry2))
    assert first == second
    assert _read_all(_dump(hook2, entry2)) == second  # rewriting in place changes nothing


def test_stale_files_of_an_earlier_dump_are_removed(dump_dir):
    hook, entry = _compiled_entry(f, *_args(0), 3)
    code = hook.fn.__code__
    gm = entry.graphs[0]
    args = (code.co_qualname, code.co_filename, code.co_firstlineno, 0, entry.guard.source, entry.fn.__code__)
    directory = dump.dump_entry(*args, [gm, gm], ["first", "second"], code)
    assert {"graph_1.py", "graph_1.txt", "backend_1.txt"} <= set(os.listdir(directory))
    dump.dump_entry(*args, [gm], ["only"], code)
    assert not {"graph_1.py", "graph_1.txt", "backend_1.txt"} & set(os.listdir(directory))
    assert "only" in _read_all(directory)["backend_0.txt"]


def test_disabled_without_dump_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "dump_dir", None)
    monkeypatch.chdir(tmp_path)
    hook, entry = _compiled_entry(f, *_args(0), 3)
    assert _dump(hook, entry) is None
    assert os.listdir(tmp_path) == []


def test_io_error_is_logged_never_raised(tmp_path, monkeypatch, fallback_logs, caplog):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    hook, entry = _compiled_entry(f, *_args(0), 3)
    monkeypatch.setattr(config, "dump_dir", str(blocker))  # after compiling: the hook itself dumps too
    with caplog.at_level(logging.INFO, logger="framejit"):
        assert _dump(hook, entry) is None
    records = [r for r in caplog.records if r.name == "framejit.eager_fallback"]
    assert len(records) == 1 and "FRAMEJIT_DUMP" in records[0].getMessage()
    assert str(blocker) in records[0].getMessage()


def test_addresses_are_stripped_from_reprs(dump_dir):
    hook, entry = _compiled_entry(f, *_args(0), 3)
    directory = _dump(hook, entry, backend_outputs=[f"compiled {looping!r} from {object()!r}"])
    text = _read_all(directory)["backend_0.txt"]
    assert "compiled <function looping> from <object object>" in text
    assert dump.strip_addresses("id 0x7f3a2b1c0d9e, small 0xff") == "id 0x..., small 0xff"


# ---- the pseudo-source means what the bytecode means -----------------------------------------------
def _exec_pseudo_source(code, graphs, f_globals):
    printer = dump.PseudoSource(code, graphs)
    source = printer.render()
    namespace = dict(f_globals, operator=operator)
    namespace.update({name: obj for name, obj in printer.const_names.values()})
    exec(compile(source, "<pseudo-source>", "exec"), namespace)
    return namespace[code.co_name], source


@pytest.mark.parametrize("fn,extra", [(f, (3,)), (straight, ())], ids=["f", "straight"])
def test_transformed_pseudo_source_computes_what_the_entry_computes(fn, extra):
    hook, entry = _compiled_entry(fn, *_args(0), *extra)
    rendered, source = _exec_pseudo_source(entry.fn.__code__, entry.graphs, fn.__globals__)
    assert "graph_0(" in source
    for seed in (1, 2):  # differential: eager, compiled and the rendered pseudo-source agree
        args = (*_args(seed), *extra)
        expected = fn(*args)
        torch.testing.assert_close(rendered(*args), expected, rtol=0, atol=0)
        torch.testing.assert_close(hook(*args), expected, rtol=0, atol=0)


def breaking(x, n):
    y = x * 2
    print("n is", n)
    return y + n


def test_pseudo_source_of_a_graph_break_entry_runs_the_graph_the_break_and_the_resume(capsys):
    hook, entry = _compiled_entry(breaking, torch.randn(4), 1)
    rendered, source = _exec_pseudo_source(entry.fn.__code__, entry.graphs, breaking.__globals__)
    assert "___print('n is', n)" in source and "compiled <function breaking.<resume" in source
    capsys.readouterr()
    for seed in (1, 2):
        x = torch.randn(4, generator=torch.Generator().manual_seed(seed))
        expected = breaking(x, seed)
        eager_out = capsys.readouterr().out
        torch.testing.assert_close(rendered(x, seed), expected, rtol=0, atol=0)
        assert capsys.readouterr().out == eager_out == f"n is {seed}\n"


def test_user_code_pseudo_source_computes_what_the_function_computes():
    def user(a, /, b, *rest, scale, **kw):
        a.t = b
        p, q = kw["pair"]
        r = operator.neg(a[0, 1:]) * scale + p - q
        return r @ b[::2], not rest, a.t is b, 1 in rest, {"r": r, 2: -1}

    rendered, source = _exec_pseudo_source(user.__code__, [], globals())
    assert "a.t = b" in source and "[::2]" in source
    for seed in (1, 2):
        g = torch.Generator().manual_seed(seed)
        a, b = torch.randn(3, 5, generator=g), torch.randn(8, generator=g)
        pair = (torch.randn(4, generator=g), 0.5)
        expected = user(a.clone(), b, 1, 2, scale=2.0, pair=pair)
        got = rendered(a.clone(), b, 1, 2, scale=2.0, pair=pair)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
        assert got[2] is True


def test_pseudo_source_keeps_the_evaluation_order_of_effects():
    def effects(a):
        first = (a.pop(), (b := a.pop()), b, a.pop())
        a.append(len(a))
        return first, a

    rendered, source = _exec_pseudo_source(effects.__code__, [], globals())
    assert "___t0 = a.pop()" in source
    for n in (5, 8):
        assert rendered(list(range(n))) == effects(list(range(n)))


def test_unrenderable_code_falls_back_to_commented_disassembly(dump_dir):
    source = dump.PseudoSource(looping.__code__).render()
    ast.parse(source)  # still a valid .py file: every line is a comment
    assert all(line.startswith("#") for line in source.splitlines())
    assert "cannot be shown as Python" in source and "FOR_ITER" in source


def test_render_params_covers_every_parameter_kind():
    def sig(a, b=1, /, c=2, *args, d, e=3, **kw):
        pass

    def plain():
        pass

    def star_only(*, k):
        pass

    assert dump.render_params(sig.__code__) == "a, b, /, c, *args, d, e, **kw"
    assert dump.render_params(plain.__code__) == ""
    assert dump.render_params(star_only.__code__) == "*, k"


def test_dump_written_for_every_frame_of_a_breaking_function(tmp_path, monkeypatch):
    """End to end: FRAMEJIT_DUMP writes the frame and its resume function, deterministically named."""
    import torch

    import framejit
    from framejit import config

    monkeypatch.setattr(config, "dump_dir", str(tmp_path))

    def breaking(x, k):
        y = x * k
        print("break here")
        return y + 1

    compiled = framejit.compile(breaking)
    compiled(torch.randn(4), 1)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert any(n.endswith("_locals_breaking_" + n.rsplit("_", 1)[-1]) for n in names), names
    assert any("resume_at" in n for n in names), names
    for directory in tmp_path.iterdir():
        entry = directory / "entry_0"
        assert (entry / "guards.py").exists() and (entry / "transformed.py").exists()
    graph_files = list(tmp_path.glob("*/entry_0/graph_0.py"))
    assert len(graph_files) == 2
    assert any("eager" in p.read_text() for p in tmp_path.glob("*/entry_0/backend_0.txt"))
