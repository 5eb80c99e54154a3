"""The remote tier's own Redis client (framejit/cache/resp.py, NOTE [Why not redis-py on the data path])
against a real redis-server with a password, an ACL user and a non-zero database: entries written and
read through it are the ones redis-py sees; a wrong password is a fault of the tier, never an error; the
data path of a process never imports redis-py; URLs it does not handle go to redis-py."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from framejit.cache import Store, cache_key, counters, remote
from framejit.cache.resp import Connection, ProtocolError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
SECRET = b"test-signing-key-0123456789"
PASSWORD = "p@ss word:1"  # characters that must be quoted in a URL


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("redis_auth")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
                             "--save", "", "--appendonly", "no", "--requirepass", PASSWORD,
                             "--user", "cacher", "on", ">cacher-pw", "~framejit:*", "+@all"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis
    admin = redis.Redis(host="127.0.0.1", port=port, password=PASSWORD, db=3, socket_timeout=5)
    deadline = time.monotonic() + 10
    while True:
        try:
            admin.ping()
            break
        except Exception:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.02)
    yield port, admin
    proc.kill()
    proc.wait()


def _url(port: int, auth: str, db: int = 3) -> str:
    return f"redis://{auth}@127.0.0.1:{port}/{db}"


@pytest.fixture(autouse=True)
def _counters():
    counters.reset()
    yield
    counters.reset()


@pytest.mark.parametrize("auth", [":p%40ss%20word%3A1", "cacher:cacher-pw"])
def test_entries_round_trip_with_password_acl_user_and_database(tmp_path, server, auth):
    port, admin = server
    tier = remote.RemoteTier(_url(port, auth), SECRET, 2.0, 1 << 20)
    key = cache_key(kind="test", name=auth)
    assert Store(tmp_path / "a", remote=tier).put(key, {"payload": b"compiled"}, {"backend": "test"})
    assert isinstance(tier._data, Connection)  # our client, not redis-py
    assert admin.exists(remote.PREFIX + key)  # in database 3, where redis-py finds it
    got = Store(tmp_path / "b", remote=tier).get(key)
    assert got is not None and got.files == {"payload": b"compiled"}
    assert counters.remote_hits == 1 and counters.remote_errors == 0
    # SET NX does not overwrite; a missing key is a miss
    assert not tier.put(key, b"other", only_if_absent=True)
    assert Store(tmp_path / "c", remote=tier).get(cache_key(kind="test", name="absent")) is None
    assert counters.remote_misses == 1


def test_wrong_password_is_a_fault_of_the_tier(tmp_path, server):
    port, _ = server
    tier = remote.RemoteTier(_url(port, ":wrong"), SECRET, 2.0, 1 << 20)
    assert Store(tmp_path / "a", remote=tier).get(cache_key(kind="test", name="x")) is None
    assert counters.remote_errors == 1 and not tier.available()


def test_an_oversized_or_malformed_reply_raises_and_closes(server):
    port, admin = server
    admin.set("framejit:big", b"x" * 5000)
    conn = Connection.from_url(_url(port, ":p%40ss%20word%3A1"), 2.0, max_reply=1000)
    with pytest.raises(ProtocolError):
        conn.get_bounded("framejit:big", 4000)
    assert conn._sock is None  # closed, never left half-read
    assert conn.get_bounded("framejit:big", 10) == (5000, b"x" * 11)  # reconnects


@pytest.mark.parametrize("url", ["rediss://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0?ssl_ca_certs=/x",
                                 "unix:///tmp/redis.sock", "redis://127.0.0.1:6379/zero"])
def test_urls_for_redis_py(url):
    assert Connection.from_url(url, 1.0, 100) is None


def test_the_data_path_does_not_import_redis_py(tmp_path, server):
    port, _ = server
    program = textwrap.dedent(f'''
        import sys
        from framejit.cache import Store, cache_key, remote
        tier = remote.RemoteTier({_url(port, ":p%40ss%20word%3A1")!r}, {SECRET!r}, 2.0, 1 << 20)
        key = cache_key(kind="test", name="no-redis-py")
        assert Store({str(tmp_path / "a")!r}, remote=tier).put(key, {{"payload": b"p"}}, {{"backend": "test"}})
        assert Store({str(tmp_path / "b")!r}, remote=tier).get(key).files == {{"payload": b"p"}}
        print("redis" in sys.modules)
    ''')
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=REPO))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
