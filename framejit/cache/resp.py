"""A minimal Redis client (RESP2 over one TCP connection) for the remote tier's data path.

Role: `RemoteTier.get` and `RemoteTier.put` (remote.py) need three things from Redis: a bounded read of
one value (MULTI; STRLEN; GETRANGE 0 max; EXEC), a SET (optionally NX), and a connection set up with
AUTH and SELECT. This module does exactly that with the standard library.

NOTE [Why not redis-py on the data path]
Importing redis-py (8.x) imports its asyncio and cluster clients with it: 0.27-0.38 s measured on this
2-core machine after `import torch`, inside a warm process's first call (the frame cache asks the
remote tier on the first miss of the local directory), and the objects it allocates made the garbage
collection that follows the restore (NOTE [No GC while restoring] in capture/hook.py) cost another
0.2-0.3 s: together more than the rest of a remote-warm start of the zoo's mlp. redis-py stays for
what is not on a program's path: the admin operations (`framejit cache ... --remote`: SCAN, INFO,
DELETE, pipelines), TLS (`rediss://`) and URLs with query options (`?ssl_ca_certs=...`), which
`Connection.from_url` declines so that the tier uses redis-py for them.

Invariants: every socket operation is bounded by the timeout given (connecting included); any
failure raises (OSError, ConnectionError when the server closes the connection, `RespError` for an
error reply, `ProtocolError` for a malformed or oversized reply) and leaves the connection closed, never half-read; callers (remote.py) turn every exception
into a fault of the tier. Replies are never larger than `max_reply` bytes per bulk string.
"""
from __future__ import annotations

import socket
import urllib.parse


class RespError(Exception):
    """An error reply from the server (`-ERR ...`, `-WRONGTYPE ...`)."""


class ProtocolError(Exception):
    """A reply that is not RESP2 as expected (truncated, malformed or larger than allowed)."""


class Connection:
    """One connection to a Redis server, opened on first use and reopened after a failure."""

    def __init__(self, host: str, port: int, username: str | None, password: str | None, db: int,
                 timeout_s: float, max_reply: int) -> None:
        self.address = (host, port)
        self.username, self.password, self.db = username, password, db
        self.timeout_s = timeout_s
        self.max_reply = max_reply
        self._sock: socket.socket | None = None
        self._file = None

    @classmethod
    def from_url(cls, url: str, timeout_s: float, max_reply: int) -> "Connection | None":
        """A connection for `redis://[user:password@]host:port/db`; None for URLs redis-py must handle
        (rediss://, query options, unix sockets)."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "redis" or parts.query or parts.fragment or not parts.hostname:
            return None
        path = parts.path.strip("/")
        if path and not path.isdigit():
            return None
        unquote = urllib.parse.unquote
        return cls(parts.hostname, parts.port or 6379, unquote(parts.username) if parts.username else None,
                   unquote(parts.password) if parts.password is not None else None, int(path or 0),
                   timeout_s, max_reply)

    # -- commands --------------------------------------------------------------------------------------
    def get_bounded(self, name: str, limit: int) -> tuple[int, bytes]:
        """(STRLEN name, GETRANGE name 0 limit) read atomically; a missing key gives (0, b"")."""
        replies = self.call([b"MULTI"], [b"STRLEN", name], [b"GETRANGE", name, b"0", str(limit)], [b"EXEC"])
        executed = replies[-1]
        if not isinstance(executed, list) or len(executed) != 2:
            raise ProtocolError(f"unexpected EXEC reply {type(executed).__name__}")
        for reply in executed:
            if isinstance(reply, RespError):
                raise reply
        return executed[0], executed[1]

    def set(self, name: str, value: bytes, nx: bool = False) -> bool:
        """SET name value [NX]; whether the server stored it."""
        (reply,) = self.call([b"SET", name, value, *([b"NX"] if nx else [])])
        return reply is not None

    def call(self, *commands: list) -> list:
        """Send the commands in one write and read one reply each; an error reply raises."""
        try:
            if self._sock is None:
                self._connect()
            replies = self._round_trip(commands)
        except BaseException:
            self.close()
            raise
        for reply in replies:
            if isinstance(reply, RespError):
                raise reply
        return replies

    def close(self) -> None:
        sock, file, self._sock, self._file = self._sock, self._file, None, None
        for closable in (file, sock):
            if closable is not None:
                try:
                    closable.close()
                except OSError:
                    pass

    # -- wire ------------------------------------------------------------------------------------------
    def _connect(self) -> None:
        sock = socket.create_connection(self.address, timeout=self.timeout_s)
        sock.settimeout(self.timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock, self._file = sock, sock.makefile("rb")
        setup = []
        if self.password is not None:
            setup.append([b"AUTH", *([self.username] if self.username else []), self.password])
        if self.db:
            setup.append([b"SELECT", str(self.db)])
        setup.append([b"CLIENT", b"SETNAME", b"framejit"])
        for reply in self._round_trip(setup):
            if isinstance(reply, RespError):
                raise reply

    def _round_trip(self, commands) -> list:
        self._sock.sendall(b"".join(_encode(command) for command in commands))
        return [self._read() for _ in commands]

    def _read(self):
        line = self._file.readline(65536)
        if not line:
            raise ConnectionError("connection closed by the server")
        if not line.endswith(b"\r\n"):
            raise ProtocolError("reply line cut short or too long")
        kind, body = line[:1], line[1:-2]
        if kind == b"+":
            return body
        if kind == b"-":
            return RespError(body.decode("utf-8", "replace"))
        if kind == b":":
            return int(body)
        if kind == b"$":
            size = int(body)
            if size < 0:
                return None
            if size > self.max_reply:
                raise ProtocolError(f"a reply of {size} bytes, more than the {self.max_reply} allowed")
            data = self._file.read(size + 2)
            if len(data) != size + 2:
                raise ConnectionError("connection closed by the server in a reply")
            if not data.endswith(b"\r\n"):
                raise ProtocolError("malformed bulk reply")
            return data[:-2]
        if kind == b"*":
            count = int(body)
            if count > 1024:
                raise ProtocolError(f"an array reply of {count} elements")
            return None if count < 0 else [self._read() for _ in range(count)]
        raise ProtocolError(f"unknown reply type {kind!r}")


def _encode(command) -> bytes:
    parts = [b"*%d\r\n" % len(command)]
    for arg in command:
        data = arg if isinstance(arg, (bytes, bytearray)) else str(arg).encode()
        parts.append(b"$%d\r\n" % len(data))
        parts.append(data)
        parts.append(b"\r\n")
    return b"".join(parts)


__all__ = ["Connection", "ProtocolError", "RespError"]
