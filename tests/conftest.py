"""Session-wide test settings: the persistent cache lives in a temporary directory, never in the user's
~/.cache, and is off unless a test turns it on (tests of the cache run their processes with
FRAMEJIT_CACHE=1, or enable it with monkeypatch); every test starts with framejit's compiled state
forgotten."""
from __future__ import annotations

import atexit
import gc
import logging
import os
import shutil
import sys
import tempfile

import pytest

_CACHE_DIR = tempfile.mkdtemp(prefix="framejit-test-cache-")
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)   # each run left one behind in /tmp
os.environ["FRAMEJIT_CACHE_DIR"] = _CACHE_DIR
# NOTE [One intra-op thread]: the suites of several Pythons run in parallel on a 2-core machine; torch's
# (and through it ORT's) second intra-op thread only adds CPU time there (waiting and waking workers of
# tiny ops): measured 44.5 s -> 32.2 s CPU on training and triton-model tests. Set before torch is
# imported, for this process and every child; an explicit OMP_NUM_THREADS wins. Tests that change the
# thread count still do (from 1).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import framejit  # noqa: E402  (after the environment is set)

framejit.config.cache_dir = _CACHE_DIR
framejit.config.cache_enabled = False


# NOTE [Validation restored after stock torch.compile]: the first stock torch.compile of a process (the
# reference in many tests) turns torch.distributions' argument validation off for good
# (`Distribution.set_default_validate_args(False)` in its one-time torch patches), so a later test that
# relies on eager's validation error saw none (test_realmodel_more, once a new file compiled with stock
# first). Every test's setting is put back after it.
@pytest.fixture(autouse=True)
def _fresh_framejit():
    import torch.distributions
    validate = torch.distributions.Distribution._validate_args
    framejit.reset()
    yield
    torch.distributions.Distribution.set_default_validate_args(validate)


# NOTE [Imports frozen out of the collector]: once every test module is imported, the heap holds ~400,000
# objects of torch, transformers, onnx, triton... that live as long as the process. Each full collection
# of the cyclic garbage collector walked all of them (~0.35 s each, ~15% of the CPU time of a compile-heavy
# test file), so they are moved to the permanent generation (gc.freeze) once, after collection. Objects
# that tests make are collected as before. They are unfrozen when the session ends, so that the interpreter's
# shutdown frees them as usual (frozen, triton's nanobind reported them as leaked at exit).
#
# NOTE [Fewer full collections]: with the imports frozen, a full collection still walks what tests made and
# the modules they import first (transformers and its model modules, onnxscript: ~130,000 objects), and
# it ran after every 10 younger collections. The session runs one after 100 (gc.set_threshold(700, 10,
# 100); the first two are CPython's defaults): cyclic garbage that reached the oldest generation waits
# longer, everything else is collected as before. Six HF catalog models (bert, gpt2, t5, vit, llama,
# whisper: stock reference + framejit compile, one process, loaded): 10 full collections -> 1, GC 4.53 s
# -> 2.12 s, CPU 54.3 s -> 51.0 s.
#
# NOTE [Unfrozen at exit]: the imports are unfrozen when the interpreter exits (atexit), not when the session
# finishes: pytest's unraisable-exception plugin runs two full collections after the session (to report
# exceptions raised in __del__ of the tests' garbage), and unfrozen they walked every imported object again
# (~0.3 s each with torch alone, more with transformers loaded). Frozen, they walk what tests made, where such
# garbage is, as every collection during the session did.
def pytest_collection_finish(session):
    gc.collect()
    gc.freeze()
    gc.set_threshold(700, 10, 100)
    atexit.register(gc.unfreeze)


# NOTE [Collections of a test's own objects]: a test that checks an object died (a weak reference, a traceback's
# frame) calls gc.collect(), and a full collection walks every object the session made and kept since the
# imports were frozen (modules imported by tests, their globals, compiled state: ~500,000 objects by
# tests/soundness, 0.5-3 s per collection on the loaded CI machine; test_caught_exception_frames's six took
# 12-23 s). Such a test takes the `own_objects` fixture: what exists when it starts is frozen too, so its
# collections walk only the objects made since, which are all the objects its checks are about (an object made
# before it starts cannot become part of its garbage). Garbage made before it started and not yet collected
# stays until the interpreter exits (NOTE [Unfrozen at exit]), as it did when no later full collection came.
@pytest.fixture
def own_objects():
    gc.freeze()
    yield


# NOTE [No pytest handlers on torch's trace log]: pytest attaches its capture handlers (caplog's, the report's,
# the live/file log's) to every logger that does not propagate, including torch's structured-trace logger
# `torch.__trace`, and torch's `trace_structured` builds its payload whenever that logger has any handler:
# every fake-tensor conversion and ShapeEnv symbol then captured and symbolized a Python stack (~2% of the CPU
# time of compile-heavy test files), only for pytest to capture records with an empty message. pytest's
# handlers are taken off that logger before each test phase (and the test loop) runs; torch's own handlers
# (TORCH_TRACE) and the logger's settings are left as they are, and every other logger is captured as before.
_TRACE_LOG = logging.getLogger("torch.__trace")


def _drop_pytest_trace_handlers() -> None:
    for handler in list(_TRACE_LOG.handlers):
        if type(handler).__module__ == "_pytest.logging":
            _TRACE_LOG.removeHandler(handler)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    _drop_pytest_trace_handlers()  # the live and file log handlers, attached for the whole loop


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _drop_pytest_trace_handlers()  # caplog's and the report's, attached for each phase


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    _drop_pytest_trace_handlers()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    _drop_pytest_trace_handlers()


# NOTE [Heavy tests split between interpreters]: `make test` runs the suite on CPython 3.11, 3.12 and 3.13 at once
# on a 2-core machine. Every test of the frontend (capture, guards, the frame cache, soundness: what bytecode and
# interpreter versions change) runs on two of them (NOTE [Frontend tests on two interpreters]). The tests under
# SPLIT_PATHS (real models, the onnxrt and triton backends' lowering and training, distributed, the Redis tier)
# exercise code that does not branch on the interpreter's version; with FRAMEJIT_TEST_SHARD=i/n (set by `make
# test`, one index per interpreter) each of them runs on one interpreter only: sorted by test id, the k-th
# goes to shard k % n (alternating keeps the shards' times close; a digest per test left them 25% apart), so
# together the interpreters run every test. No test under SPLIT_PATHS is collected differently by version.
# NOT_SPLIT runs on every shard: the sm_90 compile check takes the kernels its own process generated, and the
# core frame-cache files check warm starts on every interpreter's bytecode. The fresh-clone CI took 1818 s of the
# 1800 allowed with the rest of tests/cache on every interpreter.
# NOTE [Backend variants split between interpreters]: a frontend test parametrized over backends captures the same
# graphs for each of them; what its onnxrt and triton variants add (lowering, ORT sessions, kernels, their copies
# and strides) does not branch on the interpreter's version, while its eager variant checks the capture itself.
# A test whose parameters name `onnxrt` or `triton` (a `-`-separated part of the id's [...]) is split as the
# heavy tests are; the eager variant runs on every interpreter. So is a test whose name has one as a `_`-separated
# word (test_sgd_step_on_triton, test_onnxrt_sum_of_negative_zeros_is_positive_zero): what it checks is that
# backend's lowering (ORT's float16 rounding, strides of empty outputs, optimizer steps as kernels), and the
# capture of the same programs is checked by the eager tests beside it. These were 370 of the ~4700 tests of each
# shard and a larger share of its time (ORT sessions and interpreted kernels): the fresh-clone CI took 1527-1648 s
# of the 1800 allowed with them on every interpreter.
# Unset (plain `pytest`, `make test311`), everything runs; deselected tests are counted in the summary line.
SPLIT_PATHS = ("tests/models/", "tests/backends/", "tests/distributed/", "tests/training/",
               # the frame cache's cold/warm programs (about 250 s of CPU per interpreter): each starts child
               # processes; what they test (keys, stores, guards restored, entries refused) does not branch on
               # the version. The entries' generated code does: NOT_SPLIT keeps the core cold/warm files on
               # every interpreter.
               "tests/cache/",
               # slow multi-process or multi-backend files whose subject does not branch on the version (the
               # fresh-clone CI took 1900 s of the 1800 allowed with them on every interpreter)
               "tests/capture/test_arithmetic_kernel_checks.py", "tests/soundness/test_redteam22.py",
               "tests/guards/test_guard_facts_h4.py", "tests/guards/test_soundness_facts_cache.py",
               # tests of the core frame-cache files whose subject is the store, the keys or the shards, not
               # the entries' code (NOTE [Most specific prefix]): 8 concurrent warm-up processes and a `framejit
               # cache verify` process, a changed torch version, the cache turned off, truncated entries, another
               # backend's key (a process with onnx and onnxscript); the real collection of two shards
               "tests/cache/test_frame_cache.py::test_eight_concurrent_warmers_leave_a_consistent_cache",
               "tests/cache/test_frame_cache.py::test_torch_version_key_change_is_a_miss",
               "tests/cache/test_frame_cache.py::test_disabled_cache_never_loads",
               "tests/cache/test_frame_cache.py::test_corrupt_entries_are_rebuilt",
               "tests/cache/test_frame_cache.py::test_changes_are_misses[onnxrt_options]",
               "tests/test_shards.py::test_real_collection_splits",
               # an onnxrt program's input versions, cold and warm (two processes with onnx and onnxscript)
               "tests/soundness/test_redteam7.py::test_written_input_versions_from_a_warm_cache",
               # `framejit warm` in a new interpreter (the command's plumbing: the script's argv, exit status,
               # the cache turned on, the summary), every test whose name starts so
               "tests/test_cli.py::test_subprocess_warm_",
               # the fuzzer's checks of itself (planted bugs: a 'compiler' without guards or without side
               # effects, a perturbing backend; a shrunk reproducer run as a script in a new interpreter): what
               # they test is the fuzzer's detection and shrinking; the campaigns of test_fuzzed_programs_match_eager
               # run on every interpreter (NOTE [Fuzzed programs split between interpreters])
               "tests/soundness/test_fuzz.py::test_catches_",
               "tests/soundness/test_fuzz.py::test_a_shrunk_reproducer_runs_standalone")
NOT_SPLIT = ("tests/backends/test_triton_sm90.py",
             # resume functions, comprehension frames and generated guards written by one process and run by
             # another, on each interpreter's own bytecode
             "tests/cache/test_frame_cache.py", "tests/cache/test_frame_cache_breaks.py")
SHARD_VAR = "FRAMEJIT_TEST_SHARD"


def shard() -> tuple[int, int] | None:
    """(index, count) from FRAMEJIT_TEST_SHARD=index/count, or None when unset."""
    value = os.environ.get(SHARD_VAR, "")
    if not value:
        return None
    try:
        index, count = (int(part) for part in value.split("/"))
    except ValueError:
        index = count = -1
    if not 0 <= index < count:
        raise pytest.UsageError(f"{SHARD_VAR}={value!r}: expected 'index/count' with 0 <= index < count, e.g. 0/2")
    return index, count


SPLIT_BACKENDS = frozenset({"onnxrt", "triton"})


def is_split(nodeid: str) -> bool:
    """Whether the test `nodeid` runs on one shard only (NOTE [Heavy tests split between interpreters], NOTE
    [Backend variants split between interpreters])."""
    # NOTE [Most specific prefix]: an id under both lists (a test named in SPLIT_PATHS inside a NOT_SPLIT file)
    # follows the longer, more specific prefix.
    split = max((len(p) for p in SPLIT_PATHS if nodeid.startswith(p)), default=-1)
    kept = max((len(p) for p in NOT_SPLIT if nodeid.startswith(p)), default=-1)
    if split >= 0 or kept >= 0:
        return split > kept
    name, _, params = nodeid.rpartition("::")[2].partition("[")
    return not SPLIT_BACKENDS.isdisjoint(params.rstrip("]").split("-") + name.split("_"))


def on_every_shard(nodeid: str) -> bool:
    """Whether the test `nodeid` runs on every shard (NOT_SPLIT), not on FRONTEND_SHARDS of them."""
    split = max((len(p) for p in SPLIT_PATHS if nodeid.startswith(p)), default=-1)
    kept = max((len(p) for p in NOT_SPLIT if nodeid.startswith(p)), default=-1)
    return kept > split


# NOTE [Frontend tests on two interpreters]: every other test (the frontend's: capture, guards, soundness, the
# frame cache's entries) runs on FRONTEND_SHARDS of the shards, not on all of them: sorted by test id, the k-th
# runs on shards k % n and (k + 1) % n, so with the three interpreters of `make test` each frontend test runs on
# two of them, each interpreter runs two thirds of the frontend tests, and every pair of interpreters shares a
# third. What a test checks on one version's bytecode (an opcode, a comprehension's frame, a resume function's
# prologue) is checked by many tests, and each interpreter still runs thousands of them. With every frontend test
# on every interpreter (three times the frontend's ~4,700 tests, ~70% of the suite's CPU time), the fresh-clone CI
# took 2361 s of the 1800 allowed on the CI machine. NOT_SPLIT tests and `make test311`-style runs are unchanged.
FRONTEND_SHARDS = 2


def split_tests(nodeids: list[str], index: int, count: int) -> set[str]:
    """The ids among `nodeids` that shard `index` of `count` does not run."""
    split = sorted(n for n in nodeids if is_split(n))
    skipped = {n for k, n in enumerate(split) if k % count != index}
    shared = sorted(n for n in nodeids if not is_split(n) and not on_every_shard(n))
    if FRONTEND_SHARDS < count:
        skipped.update(n for k, n in enumerate(shared) if (index - k) % count >= FRONTEND_SHARDS)
    return skipped


def pytest_collection_modifyitems(config, items):
    which = shard()
    if which is None:
        return
    others = split_tests([item.nodeid for item in items], *which)
    if others:
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in others])
        items[:] = [item for item in items if item.nodeid not in others]


def pytest_report_header(config):
    which = shard()
    return f"{SHARD_VAR}={which[0]}/{which[1]}: NOTE [Heavy tests split between interpreters]" if which else None


def pytest_sessionfinish(session, exitstatus):
    helpers = sys.modules.get("tests.helpers")
    if helpers is not None:
        helpers.close_program_servers()  # NOTE [Programs in forked children]
