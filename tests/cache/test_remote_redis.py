"""The Redis tier of the persistent cache (framejit/cache/remote.py), against a real redis-server.

Two "machines" are two processes (forked children of a program server that imported torch, importing
framejit from a snapshot: NOTE [Programs in forked children] in tests/helpers.py) with separate cache
directories sharing one Redis; `python -m framejit` runs the same way. The second machine starts
warm (zero traces, zero backend compiles, identical results). Faults (the server killed mid-run or
restarted, a 1 s stall by CLIENT PAUSE, a key holding the wrong type) leave the program correct with one
`cache` log line, and refused values (unsigned, forged, another key, truncated, oversized, foreign
version, copied under another key) are counted, logged and never loaded.
"""
from __future__ import annotations

import json
import os
import pathlib
import pickle
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import warnings

import pytest
import torch

import framejit
from framejit import config
from framejit.cache import Store, cache_key, counters, entry_format, remote
from tests.helpers import run_program

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
SECRET = "test-signing-key-0123456789"
OTHER_SECRET = "another-signing-key-9876543210"


class RedisServer:
    """A private redis-server on a free loopback port, data in a temp dir, no persistence."""

    def __init__(self, workdir: pathlib.Path):
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen([REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                                      str(self.workdir), "--save", "", "--appendonly", "no"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if self.client().ping():
                    return
            except Exception:
                time.sleep(0.02)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def client(self):
        import redis
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory) -> str:
    """A copy of framejit for the child processes: the two "machines" must run the same framejit, and
    in a shared checkout a source file may change between two processes (its digest is in every key)."""
    root = tmp_path_factory.mktemp("framejit_install")
    shutil.copytree(os.path.join(REPO, "framejit"), root / "framejit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return str(root)


@pytest.fixture
def server(tmp_path):
    srv = RedisServer(tmp_path / "redis")
    yield srv
    srv.stop()


@pytest.fixture
def remote_config(server, monkeypatch, tmp_path):
    """This process uses the cache at tmp_path/local with the test server as its remote tier."""
    monkeypatch.setattr(config, "cache_enabled", True)
    monkeypatch.setattr(config, "cache_dir", str(tmp_path / "local"))
    monkeypatch.setattr(config, "remote_cache", server.url)
    monkeypatch.setenv("FRAMEJIT_CACHE_KEY", SECRET)
    monkeypatch.setattr(remote, "_tiers", {})
    counters.reset()
    yield server
    counters.reset()


@pytest.fixture
def cache_log(caplog):
    framejit.logs.set_logs("cache")
    caplog.set_level("INFO", logger="framejit.cache")
    yield lambda: [r.getMessage() for r in caplog.records if r.name == "framejit.cache"]
    framejit.logs.set_logs(config.logs)


# ---- two processes ---------------------------------------------------------------------------------
PROGRAM = textwrap.dedent('''
    import json, os, signal, sys, time
    import torch
    import framejit
    from framejit.cache import counters

    def helper(x):
        return x.cos() * 2.0

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.relu(self.lin(x)) + helper(x)

    def f(x, y):
        return (x * y).sin() + helper(x)

    torch.manual_seed(0)
    net = Net()
    compiled_net = framejit.compile(net, backend="eager")
    compiled_f = framejit.compile(f, backend="eager")
    x = torch.arange(8, dtype=torch.float32).reshape(2, 4) / 8 + float(sys.argv[1])
    out = [compiled_net(x).tolist()]
    if len(sys.argv) > 2:  # a pid: the shared server dies between two compiled calls
        os.kill(int(sys.argv[2]), signal.SIGKILL)
        time.sleep(0.2)
    out.append(compiled_f(x, x).tolist())
    x3 = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 8  # a new shape: one more trace
    out.append(compiled_f(x3, x3).tolist())
    ref = [net(x).tolist(), f(x, x).tolist(), f(x3, x3).tolist()]
    stats = framejit.stats()
    print(json.dumps({"out": out, "ref": ref, "traced": stats["frames_traced"], "loaded": stats["frames_loaded"],
                      "backend_compiles": stats["backend_compiles"], "counters": counters.as_dict()}))
''')


# `python -m framejit ARGS...` as a script (a program server runs scripts)
_CLI = "import runpy\nrunpy.run_module('framejit', run_name='__main__', alter_sys=True)\n"


def _run_child(tmp_path, snapshot, script_name: str, text: str, argv, env: dict) -> tuple[int, str, str]:
    """Runs a script in a new process that imports framejit from `snapshot` (a forked child of a program
    server, NOTE [Programs in forked children] in tests/helpers.py); (rc, stdout, stderr)."""
    script = tmp_path / script_name
    script.write_text(text)
    return run_program(tmp_path, script, *argv, env=env, pythonpath=snapshot)


def run_machine(tmp_path, local_dir, server, snapshot, *, key=SECRET, env=None, shift=0.0, kill=None, cli=None):
    """The program (or, with `cli`, `python -m framejit *cli`) on a "machine" whose cache is `local_dir`;
    `kill`: a pid the program kills between its two compiled calls."""
    (tmp_path / "prog.py").write_text(PROGRAM)
    full_env = dict(os.environ, FRAMEJIT_CACHE_DIR=str(local_dir), FRAMEJIT_CACHE="1",
                    FRAMEJIT_LOGS="cache", FRAMEJIT_REMOTE_CACHE=server.url, FRAMEJIT_CACHE_KEY=key)
    full_env.update(env or {})
    if cli:
        rc, stdout, stderr = _run_child(tmp_path, snapshot, "cli.py", _CLI, cli, full_env)
    else:
        argv = (shift,) if kill is None else (shift, kill)
        rc, stdout, stderr = run_program(tmp_path, tmp_path / "prog.py", *argv, env=full_env, pythonpath=snapshot)
    assert rc == 0, stdout + stderr
    assert "Traceback" not in stderr, stderr
    data = json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])
    data["stdout"] = stdout
    assert data["out"] == data["ref"]  # bit-identical to eager (eager backend), whatever the cache did
    data["log"] = stderr
    return data


def remote_keys_by_function(server) -> dict[str, str]:
    """{function name in the entry's meta: Redis key} of the frame entries in the server."""
    tier = remote.RemoteTier(server.url, SECRET.encode(), 5.0, 1 << 26)
    return {info.meta.get("function"): info.path for info in tier.ls()}


def test_second_machine_starts_warm_from_redis(tmp_path, server, snapshot):
    first = run_machine(tmp_path, tmp_path / "machine_a", server, snapshot)
    assert first["traced"] == 3 and first["backend_compiles"] == 3 and first["loaded"] == 0
    assert first["counters"]["remote_writes"] >= 2
    assert set(remote_keys_by_function(server)) == {"f", "module_call"}
    second = run_machine(tmp_path, tmp_path / "machine_b", server, snapshot)  # empty local directory
    assert second["traced"] == 0 and second["backend_compiles"] == 0
    assert second["loaded"] == 3 and second["counters"]["remote_hits"] == 2
    assert second["out"] == first["out"]
    # what came from Redis now sits in machine b's directory too
    assert {info.meta.get("function") for info in Store(tmp_path / "machine_b").ls()} == {"f", "module_call"}
    # Redis loses everything; `framejit warm --remote` on machine b (warm locally) fills it again
    server.client().flushall()
    script = tmp_path / "prog.py"
    warm = run_machine(tmp_path, tmp_path / "machine_b", server, snapshot,
                       cli=["warm", "--remote", str(script), "--", "0.0"])
    assert warm["traced"] == 0 and server.client().dbsize() == 2
    assert "remote: 2 entries written" in warm["stdout"]
    third = run_machine(tmp_path, tmp_path / "machine_c", server, snapshot)
    assert third["traced"] == 0 and third["backend_compiles"] == 0 and third["out"] == first["out"]


def test_server_killed_mid_run_degrades_to_local_only(tmp_path, server, snapshot):
    data = run_machine(tmp_path, tmp_path / "machine_a", server, snapshot, kill=server.proc.pid)
    assert data["traced"] == 3
    unavailable = [line for line in data["log"].splitlines() if "unavailable" in line]
    assert len(unavailable) == 1, data["log"]  # one line, though the run asked Redis again afterwards
    assert "ConnectionError" in unavailable[0] and "local-only" in unavailable[0]
    assert data["counters"]["remote_errors"] == 1


def _forged_value(server, redis_key: str, marker: pathlib.Path) -> bytes:
    """A value with our key id and a valid entry (right store key and versions) whose payload would
    create `marker` when unpickled, signed with a key that is not ours."""
    real = server.client().get(redis_key)
    header, _ = entry_format.decode(real[remote._HEAD:])
    evil = pickle.dumps(_Touch(str(marker)))
    entry = entry_format.encode(header.key, {"entries": evil}, header.meta, header.versions, header.created)
    value = remote.sign(OTHER_SECRET.encode(), redis_key, entry)
    return remote._MAGIC + remote.key_id(SECRET.encode()) + value[len(remote._MAGIC) + 8:]


class _Touch:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.path),))


def test_forged_and_truncated_entries_are_refused_and_never_loaded(tmp_path, server, snapshot):
    run_machine(tmp_path, tmp_path / "machine_a", server, snapshot)
    by_function = remote_keys_by_function(server)
    client, marker = server.client(), tmp_path / "forged_entry_was_unpickled"
    client.set(by_function["f"], _forged_value(server, by_function["f"], marker))
    value = client.get(by_function["module_call"])
    client.set(by_function["module_call"], value[: len(value) // 2])
    data = run_machine(tmp_path, tmp_path / "machine_b", server, snapshot)
    assert data["traced"] == 3 and data["loaded"] == 0  # correct results, from fresh traces
    assert not marker.exists()
    # each refused twice: when the frame is loaded, and when its new entry is merged before the write
    assert data["counters"]["remote_rejected"] == 4 and data["counters"]["remote_hits"] == 0
    refused = [line for line in data["log"].splitlines() if "refused" in line]
    assert any("bad signature" in line for line in refused), data["log"]
    assert any("truncated" in line for line in refused), data["log"]


# ---- one process: refusals, faults ------------------------------------------------------------------
def _put_one(tmp_path, name="a") -> tuple[Store, str, bytes]:
    store = framejit.cache.default_store()
    key = cache_key(kind="test", name=name)
    assert store.put(key, {"payload": b"compiled " + name.encode()}, {"backend": "test"})
    return store, key, store.remote.secret


def _machine_b(tmp_path) -> Store:
    return Store(tmp_path / "machine_b", remote=remote.default_remote())


def _resign(entry: bytes, redis_key: str) -> bytes:
    return remote.sign(SECRET.encode(), redis_key, entry)


def _tamper(kind: str, value: bytes, redis_key: str, other_key: str) -> tuple[str, bytes, str]:
    entry = value[remote._HEAD:]
    header, files = entry_format.decode(entry)
    if kind == "unsigned":
        return redis_key, entry, "unsigned"
    if kind == "wrong_key":
        return redis_key, remote.sign(OTHER_SECRET.encode(), redis_key, entry), "signed with another key"
    if kind == "flipped_byte":
        return redis_key, value[:-5] + bytes([value[-5] ^ 1]) + value[-4:], "bad signature"
    if kind == "truncated":
        return redis_key, value[:-10], "truncated"
    if kind == "foreign_version":
        versions = dict(header.versions, torch="1.0.0")
        forged = entry_format.encode(header.key, files, header.meta, versions, header.created)
        return redis_key, _resign(forged, redis_key), "foreign version"
    if kind == "copied_to_another_key":  # a valid value of one key, under another key
        return remote.PREFIX + other_key, value, "bad signature"
    if kind == "resigned_under_another_key":  # signed for the other Redis key, but the entry names the first
        return remote.PREFIX + other_key, _resign(entry, remote.PREFIX + other_key), "wrong key"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["unsigned", "wrong_key", "flipped_byte", "truncated", "foreign_version",
                                  "copied_to_another_key", "resigned_under_another_key"])
def test_bad_values_are_refused_counted_and_logged(tmp_path, remote_config, cache_log, kind):
    _, key, _ = _put_one(tmp_path)
    other = cache_key(kind="test", name="other")
    client = remote_config.client()
    target, value, reason = _tamper(kind, client.get(remote.PREFIX + key), remote.PREFIX + key, other)
    client.set(target, value)
    wanted = target[len(remote.PREFIX):]
    counters.reset()
    machine_b = _machine_b(tmp_path)
    assert machine_b.get(wanted) is None
    assert counters.remote_rejected == 1 and counters.remote_hits == 0 and counters.hits == 0
    assert any("refused" in m and reason in m for m in cache_log()), cache_log()
    assert not os.path.exists(machine_b.entry_path(wanted))  # never written locally either


def test_oversized_values_are_refused_without_reading_them_whole(tmp_path, remote_config, cache_log, monkeypatch):
    _, key, _ = _put_one(tmp_path)
    monkeypatch.setattr(config, "remote_cache_max_mb", 1)
    client = remote_config.client()
    client.append(remote.PREFIX + key, b"x" * (2 * 1024 * 1024))
    tier = remote.default_remote()
    assert tier.max_bytes == 1024 * 1024
    assert Store(tmp_path / "machine_b", remote=tier).get(key) is None
    assert counters.remote_rejected == 1
    assert any("oversized" in m for m in cache_log())


def test_a_valid_entry_is_served_and_filled_locally(tmp_path, remote_config):
    _, key, _ = _put_one(tmp_path)
    counters.reset()
    machine_b = _machine_b(tmp_path)
    entry = machine_b.get(key)
    assert entry is not None and entry.files == {"payload": b"compiled a"}
    assert counters.remote_hits == 1 and counters.hits == 1
    assert Store(tmp_path / "machine_b").get(key).files == entry.files  # now local, no Redis needed


def test_a_stalled_server_costs_one_timeout_then_local_only(tmp_path, remote_config, cache_log):
    store, key, _ = _put_one(tmp_path)
    other = cache_key(kind="test", name="not there")
    remote_config.client().execute_command("CLIENT", "PAUSE", "1000", "ALL")  # a 1 s network stall
    start = time.monotonic()
    assert store.get(other) is None  # asks Redis: times out after config.remote_cache_timeout_ms
    assert store.put(other, {"x": b"1"}, {})  # the local write still happens; Redis is not asked again
    assert store.get(other) is not None
    elapsed = time.monotonic() - start
    assert elapsed < 0.8, elapsed
    lines = [m for m in cache_log() if "unavailable" in m]
    assert len(lines) == 1 and "Timeout" in lines[0] and "local-only" in lines[0], lines
    assert counters.remote_errors == 1


def double_plus(x):
    return (x * 2).sin() + 1


def test_compiled_function_under_a_stall_is_correct(tmp_path, remote_config, cache_log):
    remote_config.client().execute_command("CLIENT", "PAUSE", "1000", "ALL")
    compiled = framejit.compile(double_plus, backend="eager")
    for shape in ((3,), (2, 5)):
        x = torch.randn(shape)
        assert torch.equal(compiled(x), double_plus(x))
    assert framejit.stats()["frames_traced"] >= 1
    assert len([m for m in cache_log() if "unavailable" in m]) == 1


def test_restart_and_garbage_replies_degrade_then_recover(tmp_path, remote_config, cache_log):
    store, key, _ = _put_one(tmp_path)
    tier = store.remote
    remote_config.stop()  # the server dies
    assert _machine_b(tmp_path).get(key) is None  # a miss, not an error
    assert counters.remote_errors == 1
    remote_config.start()  # ... and comes back empty, as after eviction of everything
    tier._down_until = 0.0  # the pause (remote._RETRY_S) is over
    assert _machine_b(tmp_path).get(key) is None and counters.remote_misses == 1
    assert store.put(key, {"payload": b"rebuilt"}, {"backend": "test"}) and counters.remote_writes == 2
    assert Store(tmp_path / "machine_c", remote=tier).get(key).files == {"payload": b"rebuilt"}
    # garbage: the key holds a list; the reply is an error, never an entry
    other = cache_key(kind="test", name="garbage")
    remote_config.client().lpush(remote.PREFIX + other, b"not an entry")
    assert Store(tmp_path / "machine_d", remote=tier).get(other) is None
    assert counters.remote_errors == 2
    assert len([m for m in cache_log() if "unavailable" in m]) == 2


def test_without_a_key_the_remote_tier_is_off_with_one_message(tmp_path, remote_config, monkeypatch, cache_log):
    monkeypatch.delenv("FRAMEJIT_CACHE_KEY")
    monkeypatch.setattr(config, "cache_key_file", None)
    monkeypatch.setattr(remote, "_said", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert remote.default_remote() is None
        assert framejit.cache.default_store().remote is None
    assert len(caught) == 1 and "no signing key" in str(caught[0].message)
    assert "never trusted unsigned" in str(caught[0].message)
    # a key file readable by others is refused; a private one is used
    key_file = tmp_path / "key"
    key_file.write_text(SECRET + "\n")
    key_file.chmod(0o644)
    monkeypatch.setattr(config, "cache_key_file", str(key_file))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert remote.default_remote() is None
    assert "chmod 600" in str(caught[0].message)
    key_file.chmod(0o600)
    remote._tiers.clear()  # the answer is kept per setting; the file's mode is not part of it
    tier = remote.default_remote()
    assert tier is not None and tier.secret == SECRET.encode()


def test_missing_client_turns_the_tier_off(remote_config, monkeypatch):
    monkeypatch.setitem(sys.modules, "redis", None)  # `import redis` raises ImportError
    monkeypatch.setattr(remote, "_said", set())
    with pytest.warns(RuntimeWarning, match="pip install redis"):
        assert remote.default_remote() is None


# ---- command line ----------------------------------------------------------------------------------
def _cli(args, env, snapshot, tmp_path) -> subprocess.CompletedProcess:
    full_env = {**{k: v for k, v in os.environ.items() if not k.startswith("FRAMEJIT_")}, **env}
    rc, stdout, stderr = _run_child(tmp_path, snapshot, "cli.py", _CLI, args, full_env)
    return subprocess.CompletedProcess(args, rc, stdout, stderr)


def test_cli_remote_ls_stats_verify_clear(tmp_path, remote_config, snapshot):
    _, key, _ = _put_one(tmp_path, "a")
    _, bad, _ = _put_one(tmp_path, "b")
    client = remote_config.client()
    value = client.get(remote.PREFIX + bad)
    client.set(remote.PREFIX + bad, value[:-1] + bytes([value[-1] ^ 1]))
    env = {"FRAMEJIT_REMOTE_CACHE": remote_config.url, "FRAMEJIT_CACHE_KEY": SECRET}
    ls = _cli(["cache", "ls", "--remote"], env, snapshot, tmp_path)
    assert ls.returncode == 0 and key[:12] in ls.stdout and bad[:12] in ls.stdout and "2 entries" in ls.stdout
    stats = _cli(["cache", "stats", "--remote"], env, snapshot, tmp_path)
    assert stats.returncode == 0 and "entries" in stats.stdout and " 2" in stats.stdout
    verify = _cli(["cache", "verify", "--remote"], env, snapshot, tmp_path)
    assert verify.returncode == 1 and bad in verify.stdout and key not in verify.stdout
    assert "bad signature" in verify.stdout
    no_key = _cli(["cache", "verify", "--remote"], {"FRAMEJIT_REMOTE_CACHE": remote_config.url}, snapshot,
                  tmp_path)
    assert no_key.returncode == 2 and "no signing key" in no_key.stderr
    clear = _cli(["cache", "clear", "--remote", "--all"], env, snapshot, tmp_path)
    assert clear.returncode == 0 and "removed 2 entries" in clear.stdout
    assert client.dbsize() == 0
    down = _cli(["cache", "ls", "--remote"], {"FRAMEJIT_REMOTE_CACHE": "redis://127.0.0.1:1/0"}, snapshot,
                tmp_path)
    assert down.returncode == 1 and "ConnectionError" in down.stderr
