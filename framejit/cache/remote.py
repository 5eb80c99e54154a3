"""The remote tier of the persistent cache: entries shared by many machines through a Redis server.

Role: `Store.get` asks the remote tier when the local directory has no usable entry (and fills the
local directory with what it gets); `Store.put` writes to both. A fresh machine with an empty cache
directory therefore starts warm from Redis: its frame cache loads compiled frames without tracing and
its backends load their artifacts without compiling. Also the operations behind
`framejit cache ls|stats|clear|verify --remote`.

Configuration (read when the tier is built, see `default_remote`):
- FRAMEJIT_REMOTE_CACHE (config.remote_cache): redis://[user:password@]host:port/db, or rediss://
  for TLS (redis-py's query options such as ?ssl_ca_certs=... pass through);
- the signing key: FRAMEJIT_CACHE_KEY (the key itself, at least 16 characters) or
  FRAMEJIT_CACHE_KEY_FILE (config.cache_key_file; a file only its owner can read). The key is read from
  the environment when needed and never stored in config;
- FRAMEJIT_REMOTE_CACHE_TIMEOUT_MS (config.remote_cache_timeout_ms, default 250): the bound on one
  Redis call, connecting included; FRAMEJIT_REMOTE_CACHE_MAX_MB (default 64): the largest value read
  or written.

Invariants:
- The data path (`get`, `put`) never raises and never blocks longer than the timeout: any fault
  (refused, timed out, reset, a server restarting or out of memory, a reply of the wrong shape) turns
  the tier off for `_RETRY_S` seconds with one `cache` log line; the store then works local-only.
- Nothing from Redis is handed to the caller unless it is signed with our key (NOTE [Remote entry
  signing]), parses as a complete entry, claims the key it is stored under and was written by this
  exact runtime. Anything else is refused: counted (`counters.remote_rejected`), logged, never loaded.
- Without a key, or without the `redis` client, the tier is off and says so once (a warning and a
  `cache` log line): a shared store is never trusted unsigned.

Main names: `RemoteTier`, `default_remote()`, `RemoteUnavailable` (raised by the admin operations only).
"""
from __future__ import annotations

import hashlib
import hmac
import io
import os
import re
import struct
import threading
import time
import warnings

from .. import config, logs
from . import entry_format, keys
from .common import counters

PREFIX = "framejit:v1:"  # the Redis keys: PREFIX + the 64-digit store key
_MAGIC = b"FJREMOTE1\n"
_FIXED = struct.Struct(">8sQ32s")  # key id, entry length, HMAC-SHA256
_HEAD = len(_MAGIC) + _FIXED.size
_RETRY_S = 30.0
_LS_HEADER_BYTES = 64 * 1024
_MIN_KEY_CHARS = 16

# NOTE [Remote entry signing]
# A frame-cache entry holds code framejit executes (guard source, pickled graphs, backend artifacts), so a
# value read from a shared Redis is trusted only if it was written by a holder of the signing key:
#     MAGIC (10 bytes) | key id (8) | entry length (8, big endian) | HMAC-SHA256 (32) | entry
# where entry is the local entry file's bytes (NOTE [Entry file format]: its own header names the store
# key and the runtime versions, and its digest covers everything), and the HMAC covers MAGIC, key id,
# length, the Redis key name and the entry. Binding the Redis key name means a validly signed entry
# copied under another key is refused too. The key id (an HMAC of a fixed label, which reveals nothing of
# the key) and the length are outside the MAC only to name the reason of a refusal: "signed with another
# key" and "truncated" are more useful in a log than "bad signature". The check order is size (before
# the value is even read whole: GETRANGE), magic, length, key id, HMAC, entry format, key, versions.


class RemoteUnavailable(Exception):
    """The Redis server cannot be used (admin operations; the data path degrades instead)."""


class Refused(Exception):
    """A value read from Redis is not a trusted entry; str(exc) says why."""


def redact(url: str) -> str:
    """The URL with its password replaced, for messages."""
    return re.sub(r"(://[^:@/]*:)[^@/]*@", r"\1***@", url)


def key_id(secret: bytes) -> bytes:
    return hmac.new(secret, b"framejit cache key id", hashlib.sha256).digest()[:8]


def sign(secret: bytes, redis_key: str, entry: bytes) -> bytes:
    kid = key_id(secret)
    length = len(entry).to_bytes(8, "big")
    mac = hmac.new(secret, _MAGIC + kid + length + redis_key.encode() + b"\0" + entry, hashlib.sha256).digest()
    return _MAGIC + _FIXED.pack(kid, len(entry), mac) + entry


def unsign(secret: bytes, redis_key: str, value: bytes) -> bytes:
    """The signed entry bytes of `value`, or raise Refused with the reason."""
    if not isinstance(value, (bytes, bytearray)):
        raise Refused(f"not a byte string ({type(value).__name__})")
    value = bytes(value)
    if not value.startswith(_MAGIC):
        raise Refused("unsigned (no framejit signature header)")
    if len(value) < _HEAD:
        raise Refused(f"truncated: {len(value)} bytes, shorter than the signature header")
    kid, length, mac = _FIXED.unpack_from(value, len(_MAGIC))
    entry = value[_HEAD:]
    if len(entry) != length:
        raise Refused(f"truncated or padded: {len(entry)} entry bytes, the header says {length}")
    if not hmac.compare_digest(kid, key_id(secret)):
        raise Refused(f"signed with another key (key id {kid.hex()}, ours is {key_id(secret).hex()})")
    expected = hmac.new(secret, value[: len(_MAGIC) + 16] + redis_key.encode() + b"\0" + entry,
                        hashlib.sha256).digest()
    if not hmac.compare_digest(mac, expected):
        raise Refused("bad signature (forged, modified, or copied from another key)")
    return entry


def check_entry(key: str, entry: bytes, versions: bool = True):
    """(Header, files) of signed entry bytes stored under `key`; raise Refused if it is not ours to load.
    `versions` False (verify): one Redis legitimately holds entries of several runtimes, under other keys."""
    try:
        header, files = entry_format.decode(entry)
    except entry_format.CorruptEntry as exc:
        raise Refused(str(exc)) from None
    if header.key != key:
        raise Refused(f"stored under the wrong key (the entry says {header.key[:16]})")
    current = keys.runtime_versions() if versions else header.versions
    if header.versions != current:
        raise Refused(f"foreign version: written by {header.versions}, this is {current}")
    return header, files


def read_secret() -> tuple[bytes | None, str | None]:
    """(key, None) or (None, why there is no usable key)."""
    text = os.environ.get("FRAMEJIT_CACHE_KEY")
    if text:
        if len(text) < _MIN_KEY_CHARS:
            return None, f"FRAMEJIT_CACHE_KEY is shorter than {_MIN_KEY_CHARS} characters"
        return text.encode(), None
    path = config.cache_key_file
    if not path:
        return None, "no signing key (set FRAMEJIT_CACHE_KEY or FRAMEJIT_CACHE_KEY_FILE)"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.geteuid() or st.st_mode & 0o077:
                return None, f"key file {path} must be owned by this user and private (chmod 600)"
            secret = f.read().strip()
    except OSError as exc:
        return None, f"cannot read key file {path}: {exc.strerror}"
    if len(secret) < _MIN_KEY_CHARS:
        return None, f"key file {path} holds fewer than {_MIN_KEY_CHARS} bytes"
    return secret, None


def connect(url: str, timeout_s: float):
    """A redis-py client for `url` with bounded timeouts and no retries (raises ImportError, ValueError)."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    if not url.startswith(("redis://", "rediss://")):
        raise ValueError("expected redis://[user:password@]host:port/db or rediss://...")
    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                retry=Retry(NoBackoff(), 0), retry_on_timeout=False, health_check_interval=0,
                                client_name="framejit")


class _RedisPyData:
    """The data path through redis-py, for URLs resp.Connection declines (TLS, query options)."""

    def __init__(self, client) -> None:
        self.client = client

    def get_bounded(self, name: str, limit: int) -> tuple[int, bytes]:
        pipe = self.client.pipeline(transaction=True)
        pipe.strlen(name)
        pipe.getrange(name, 0, limit)
        size, value = pipe.execute()
        return size, value

    def set(self, name: str, value: bytes, nx: bool = False) -> bool:
        return bool(self.client.set(name, value, nx=nx))

    def close(self) -> None:
        self.client.close()


class RemoteTier:
    """One Redis server as a cache tier. `secret` None: admin listing and clearing only."""

    def __init__(self, url: str, secret: bytes | None, timeout_s: float, max_bytes: int):
        self.url = url
        self.display = redact(url)
        self.secret = secret
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.publish_local_hits = False  # `framejit warm --remote`: copy local hits up (SET NX)
        self._client = None  # redis-py, for the admin operations
        self._data = None  # resp.Connection or _RedisPyData (NOTE [Why not redis-py on the data path])
        self._down_until = 0.0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RemoteTier({self.display!r})"

    def _redis(self):
        if self._client is None:
            self._client = connect(self.url, self.timeout_s)
        return self._client

    def _data_path(self):
        if self._data is None:
            from .resp import Connection
            self._data = Connection.from_url(self.url, self.timeout_s, self.max_bytes + 1) or \
                _RedisPyData(connect(self.url, self.timeout_s))
        return self._data

    # -- faults ------------------------------------------------------------------------------------
    def available(self) -> bool:
        return time.monotonic() >= self._down_until

    def _fault(self, what: str, exc: BaseException) -> None:
        with self._lock:
            if not self.available():
                return
            self._down_until = time.monotonic() + _RETRY_S
        counters.remote_errors += 1
        logs.log("cache", "remote cache %s unavailable (%s: %s: %s); local-only for %.0f s", self.display, what,
                 type(exc).__name__, exc, _RETRY_S)
        for client in (self._client, self._data):  # fresh connections after the pause
            if client is not None:
                try:
                    client.close()
                except Exception:
                    pass
        self._client = self._data = None

    # -- data path ---------------------------------------------------------------------------------
    def get(self, key: str) -> tuple[bytes, object, dict] | None:
        """(entry bytes, header, files) for `key`, or None (missing, refused, or the tier is down)."""
        if self.secret is None or not self.available():
            return None
        redis_key = PREFIX + key
        try:
            size, value = self._data_path().get_bounded(redis_key, self.max_bytes)  # at most max_bytes + 1 bytes
            if not isinstance(size, int) or not isinstance(value, (bytes, bytearray)):
                raise TypeError(f"unexpected reply types {type(size).__name__}, {type(value).__name__}")
        except Exception as exc:  # NOTE: every fault, including the client's own bugs, stays here
            self._fault("get", exc)
            return None
        if size == 0:
            counters.remote_misses += 1
            logs.log("cache", "remote miss %s", key[:16])
            return None
        try:
            if size > self.max_bytes:
                raise Refused(f"oversized: {size} bytes, the limit is {self.max_bytes}")
            entry = unsign(self.secret, redis_key, value)
            header, files = check_entry(key, entry)
        except Refused as exc:
            counters.remote_rejected += 1
            counters.remote_misses += 1
            logs.log("cache", "remote entry %s refused: %s", key[:16], exc)
            return None
        counters.remote_hits += 1
        logs.log("cache", "remote hit %s (%s, %d bytes)", key[:16], header.meta.get("backend", "-"), len(entry))
        return entry, header, files

    def put(self, key: str, entry: bytes, only_if_absent: bool = False) -> bool:
        """Store signed `entry` bytes under `key`; returns whether Redis took it."""
        if self.secret is None or not self.available():
            return False
        redis_key = PREFIX + key
        value = sign(self.secret, redis_key, entry)
        if len(value) > self.max_bytes:
            logs.log("cache", "remote: not writing %s: %d bytes, the limit is %d", key[:16], len(value), self.max_bytes)
            return False
        try:
            done = self._data_path().set(redis_key, value, nx=only_if_absent)
        except Exception as exc:
            self._fault("put", exc)
            return False
        if done:
            counters.remote_writes += 1
            logs.log("cache", "remote wrote %s (%d bytes)", key[:16], len(value))
        return bool(done)

    # -- admin (`framejit cache ... --remote`); these raise RemoteUnavailable -------------------------
    def _admin(self, fn):
        try:
            return fn(self._redis())
        except RemoteUnavailable:
            raise
        except ImportError:
            raise RemoteUnavailable("the redis client is not installed (pip install redis)") from None
        except Exception as exc:
            raise RemoteUnavailable(f"{self.display}: {type(exc).__name__}: {exc}") from None

    def _keys(self, client) -> list[str]:
        return sorted(k.decode() if isinstance(k, bytes) else k
                      for k in client.scan_iter(match=PREFIX + "*", count=1000)
                      if keys.is_valid_key((k.decode() if isinstance(k, bytes) else k)[len(PREFIX):]))

    def ls(self) -> list:
        """Every entry as an EntryInfo (path = the Redis key), most recently used first."""
        from .admin import EntryInfo

        def run(client):
            names = self._keys(client)
            pipe = client.pipeline(transaction=False)
            for name in names:  # OBJECT IDLETIME first: the other two count as uses
                pipe.object("idletime", name)
                pipe.strlen(name)
                pipe.getrange(name, 0, _LS_HEADER_BYTES)
            replies = pipe.execute(raise_on_error=False) if names else []
            now, infos = time.time(), []
            for i, name in enumerate(names):
                idle, size, head = replies[3 * i: 3 * i + 3]
                if not isinstance(size, int) or size == 0:
                    continue  # removed meanwhile
                idle = idle if isinstance(idle, int) else 0
                base = dict(key=name[len(PREFIX):], path=name, size=size, last_used=now - idle, hits=0)
                try:
                    if not isinstance(head, bytes) or not head.startswith(_MAGIC):
                        raise entry_format.CorruptEntry("unsigned (no framejit signature header)")
                    header = entry_format.read_header(io.BytesIO(head[_HEAD:]))
                except entry_format.CorruptEntry as exc:
                    infos.append(EntryInfo(**base, problem=str(exc)))
                    continue
                infos.append(EntryInfo(**base, created=header.created, meta=header.meta, versions=header.versions))
            return sorted(infos, key=lambda info: (-info.last_used, info.key))

        return self._admin(run)

    def stats(self) -> dict:
        infos = self.ls()
        info = self._admin(lambda client: {**client.info("memory"), **client.info("stats")})
        by_backend: dict[str, dict[str, int]] = {}
        for entry in infos:
            row = by_backend.setdefault(entry.backend or "-", {"entries": 0, "bytes": 0})
            row["entries"] += 1
            row["bytes"] += entry.size
        return {
            "root": self.display,
            "entries": len(infos),
            "bytes": sum(entry.size for entry in infos),
            "used_memory": info.get("used_memory"),
            "maxmemory": info.get("maxmemory"),
            "maxmemory_policy": info.get("maxmemory_policy"),
            "evicted_keys": info.get("evicted_keys"),
            "keyspace_hits": info.get("keyspace_hits"),
            "keyspace_misses": info.get("keyspace_misses"),
            "by_backend": by_backend,
        }

    def clear(self, older_than_s: float | None = None, backend: str | None = None) -> int:
        """Delete matching entries (all when no filter is given); returns how many."""
        if older_than_s is None and backend is None:
            return self._admin(lambda client: sum(client.delete(name) for name in self._keys(client)))
        cutoff = time.time() - older_than_s if older_than_s is not None else None
        doomed = [info.path for info in self.ls()
                  if (cutoff is None or info.last_used <= cutoff) and (backend is None or info.backend == backend)]
        return self._admin(lambda client: sum(client.delete(name) for name in doomed))

    def verify(self) -> tuple[int, list[str]]:
        """(entries checked, problems): every value's signature, format, key and versions."""
        if self.secret is None:
            raise RemoteUnavailable("verify needs the signing key (FRAMEJIT_CACHE_KEY or FRAMEJIT_CACHE_KEY_FILE)")

        def run(client):
            names, problems = self._keys(client), []
            for name in names:
                value = client.get(name)
                if value is None:
                    continue
                try:
                    if len(value) > self.max_bytes:
                        raise Refused(f"oversized: {len(value)} bytes, the limit is {self.max_bytes}")
                    check_entry(name[len(PREFIX):], unsign(self.secret, name, value), versions=False)
                except Refused as exc:
                    problems.append(f"{name}: {exc}")
            return len(names), problems

        return self._admin(run)


# ---- the process's tier ------------------------------------------------------------------------------
_tiers: dict[tuple, RemoteTier | None] = {}
_said: set[str] = set()


def _off(url: str, why: str) -> None:
    message = f"remote cache {redact(url)} is off: {why}"
    logs.log("cache", "%s", message)
    if message not in _said:
        _said.add(message)
        warnings.warn(f"framejit: {message}", RuntimeWarning, stacklevel=3)


def settings() -> tuple:
    return (config.remote_cache, os.environ.get("FRAMEJIT_CACHE_KEY"), config.cache_key_file,
            config.remote_cache_timeout_ms, config.remote_cache_max_mb)


def default_remote(admin: bool = False) -> RemoteTier | None:
    """The tier config.remote_cache names (one per setting, shared by every Store of the process), or
    None when it is unset or unusable (said once). `admin`: a tier without a key is still returned, for
    listing and clearing."""
    url = config.remote_cache
    if not url:
        return None
    setting = (*settings(), admin)
    if setting in _tiers:
        return _tiers[setting]
    secret, why = read_secret()
    tier = None
    if secret is None and not admin:
        _off(url, why + "; entries from a shared store are never trusted unsigned")
    else:
        if not _client_installed():
            _off(url, "the redis client is not installed (pip install redis)")
        else:
            if not url.startswith(("redis://", "rediss://")):
                _off(url, "expected redis://[user:password@]host:port/db or rediss://...")
            else:
                tier = RemoteTier(url, secret, config.remote_cache_timeout_ms / 1000.0,
                                  config.remote_cache_max_mb * 1024 * 1024)
    _tiers[setting] = tier
    return tier


def _client_installed() -> bool:
    """Whether redis-py can be imported, without importing it (NOTE [Why not redis-py on the data path])."""
    import importlib.util
    try:
        return importlib.util.find_spec("redis") is not None
    except (ImportError, ValueError):
        return False
