"""Strings that change between calls (NOTE [Strings that change between calls] in capture/changing_strings.py):
a string whose value changed is read (guarded by value) only where its value is used; `float(s)` and `int(s)`
of it are graph inputs, so a loop over rows of strings parsed to numbers compiles twice, not once per value."""
from __future__ import annotations

import csv
import io
import re

import torch

import framejit
from tests.helpers import CountingBackend, assert_same


def weighted_rows(rows, x):
    out = torch.zeros_like(x)
    for name, val in rows:
        out = out + float(val) * x
    return out


def scaled_counts(parts, x):
    out = x
    for p in parts:
        out = out + int(p) * x
    return out


def _act(name, x):
    if name == "relu":
        return torch.relu(x)
    return torch.tanh(x)


def named_layers(spec, x):
    for name, scale in spec:
        x = _act(name, x) * float(scale)
    return x


def parsed_csv(text, x):
    out = torch.zeros_like(x)
    for name, val in csv.reader(io.StringIO(text)):
        out = out + float(val) * x
    return out


def logged_then_parsed(rows, x, log):
    out = x
    for name, val in rows:
        log.append(name)
        out = out * float(val)
    return out


def compared(rows, x):
    out = x
    for val in rows:
        f = float(val)
        out = out + (x if f > 0.5 else -x) * f
    return out


def _run(fn, make_args, calls=10):
    backend = CountingBackend()
    compiled = framejit.compile(fn, backend=backend)
    stats = framejit.stats()
    traced, eager = stats["frames_traced"], stats["eager_frames"]
    for i in range(calls):
        assert_same(compiled(*make_args(i)), fn(*make_args(i)))
    stats = framejit.stats()
    return backend, stats["frames_traced"] - traced, stats["eager_frames"] - eager


X = torch.randn(4)


def test_rows_of_strings_parsed_to_floats_compile_twice():
    # before: one trace per new value until the recompile limit (8 graphs), then the frame ran eagerly
    backend, traced, eager = _run(weighted_rows, lambda i: ([(f"n{j}", f"{i * 0.5 + j}") for j in range(3)], X))
    assert (backend.graph_count, traced, eager) == (2, 2, 0)


def test_strings_parsed_to_ints_compile_twice():
    backend, traced, eager = _run(scaled_counts, lambda i: ([str(i + 2), str(3 * i + 5), " 7 "], X))
    assert (backend.graph_count, traced, eager) == (2, 2, 0)


def test_a_string_that_steers_control_flow_stays_guarded():
    # the names pick the branch: every name is still guarded by value; only the scales are inputs
    backend, traced, eager = _run(named_layers, lambda i: ([("relu", str(1.0 + i)), ("tanh", str(0.5 * i))], X))
    assert (backend.graph_count, traced, eager) == (2, 2, 0)
    names = ["relu", "tanh", "relu", "gelu"]
    backend, _, eager = _run(named_layers, lambda i: ([(names[i % 4], str(i + 1.5))], X), calls=8)
    assert eager == 0 and backend.graph_count >= 3  # one entry per name, each serving all scales


def test_rows_read_by_csv_compile_a_few_times():
    # the reader's rows reach the loop body's resume function as lists of strings that change every call
    backend, traced, eager = _run(parsed_csv, lambda i: ("\n".join(f"n{j},{i * 0.5 + j}" for j in range(3)), X))
    assert eager == 0 and traced <= 8


def test_a_string_that_stops_parsing_raises_as_eager():
    compiled = framejit.compile(logged_then_parsed, backend=CountingBackend())
    for i, bad in enumerate(["1.5", "2.5", "3.5", "oops", "4.5", " 5e-1 ", "nan"]):
        rows = [("a", "0.5"), ("b", bad), ("c", str(i))]
        logs = [], []
        results = []
        for fn, log in zip((logged_then_parsed, compiled), logs):
            try:
                results.append(fn(rows, X, log))
            except ValueError as e:
                results.append(str(e))
        assert logs[0] == logs[1]
        assert type(results[0]) is type(results[1])
        if isinstance(results[0], str):
            assert results[0] == results[1]
        else:
            assert_same(results[1], results[0])


def test_a_parsed_float_compared_is_specialised():
    backend, traced, eager = _run(compared, lambda i: ([str(0.1 * i), "0.75"], X))
    assert eager == 0 and backend.graph_count >= 2


def test_strings_stay_constants_without_the_knob(monkeypatch):
    from framejit import config
    monkeypatch.setattr(config, "dynamic_floats", False)
    backend, traced, eager = _run(weighted_rows, lambda i: ([(f"n{j}", f"{i * 0.5 + j}") for j in range(3)], X))
    assert backend.graph_count == 8 and eager == 1


def summed_numbers(s, x):
    acc = torch.zeros_like(x)
    for m in re.finditer(r"\d+", s):
        acc = acc + int(m.group()) * x
    return acc


def tagged_numbers(s, x):
    acc = x
    for m in re.finditer(r"([a-z])(\d+)(!)?", s):
        acc = acc + int(m.group(2)) * x + (m.end() - m.start())  # positions: int inputs
        if m.group(1) == "a":  # steers control flow: guarded by value
            acc = acc * 2
        if m.group(3):  # an unmatched group is None: the match is read (guarded by identity)
            acc = acc - 1
    return acc


def test_numbers_found_by_a_regex_in_a_changing_string():
    # NOTE [Regular expressions over strings that change often]: before, the string was guarded by value (8
    # traces, then the frame ran eagerly); now, once it changed 4 times, finditer over it runs as Python and the
    # body's int(m.group()) is an int input (NOTE [Matches read where they are used])
    backend, traced, eager = _run(summed_numbers, lambda i: (f"a{i} b{i + 3} c{2 * i + 7}", X), calls=12)
    assert eager == 0 and traced <= 8


def test_regex_groups_by_number_steer_and_feed_as_in_eager():
    _, _, eager = _run(tagged_numbers, lambda i: (f"a{i} b{i + 3}{'!' if i % 3 == 0 else ''} c{2 * i + 7}", X))
    assert eager == 0
