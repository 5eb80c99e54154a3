"""The on-disk format of one cache entry: a single file with a header, the payload and a checksum.

Role: turn (key, files, meta) into bytes and back, and say precisely why a file is not a valid entry.
The store (store.py) decides what to do about a bad entry; this module only parses.

# NOTE [Entry file format]
# One entry is one file, so that publishing it is a single atomic `os.replace` and a reader that
# opened it keeps a complete snapshot even if another process replaces or deletes it meanwhile. A
# directory per entry would need a remove-then-rename to rebuild a bad entry, during which readers see
# half a directory. Layout:
#     MAGIC (8 bytes)  header length (4 bytes, big endian)  header (UTF-8 JSON)
#     payload (the files' bytes, concatenated in header order)  sha256 of everything before (32 bytes)
# The header holds FORMAT, the key, the runtime versions that wrote it, the creation time, the
# caller's meta and the list of [file name, size]. The trailing digest covers header and payload, so a
# truncated file, random bytes or a flipped bit are all detected; `read_header` reads only the header
# (for `cache ls`) and checks its shape but not the digest.

Main names: `encode(...) -> bytes`, `decode(data) -> (Header, files)`, `read_header(fileobj)`,
`CorruptEntry` (its message is the reason, for logs and `cache verify`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from typing import BinaryIO

MAGIC = b"FJCACHE\n"
FORMAT = 1
_LEN = struct.Struct(">I")
_DIGEST_SIZE = 32
_MAX_HEADER = 16 * 1024 * 1024


class CorruptEntry(Exception):
    """The bytes are not a valid entry; str(exc) says why."""


@dataclasses.dataclass(frozen=True)
class Header:
    key: str
    versions: dict
    created: float
    meta: dict
    file_sizes: tuple  # ((name, size), ...) in payload order

    @property
    def payload_size(self) -> int:
        return sum(size for _, size in self.file_sizes)


def encode(key: str, files: dict[str, bytes], meta: dict, versions: dict, created: float) -> bytes:
    header = {
        "format": FORMAT,
        "key": key,
        "versions": versions,
        "created": created,
        "meta": meta,
        "files": [[name, len(data)] for name, data in files.items()],
    }
    header_bytes = json.dumps(header, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")
    body = b"".join([MAGIC, _LEN.pack(len(header_bytes)), header_bytes, *files.values()])
    return body + hashlib.sha256(body).digest()


def _parse_header(header_bytes: bytes) -> Header:
    try:
        raw = json.loads(header_bytes.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptEntry(f"unreadable header ({exc.__class__.__name__})") from None
    if not isinstance(raw, dict):
        raise CorruptEntry("header is not an object")
    if raw.get("format") != FORMAT:
        raise CorruptEntry(f"unknown entry format {raw.get('format')!r} (this framejit reads {FORMAT})")
    try:
        files = tuple((str(name), int(size)) for name, size in raw["files"])
        header = Header(str(raw["key"]), dict(raw["versions"]), float(raw["created"]), dict(raw["meta"]), files)
    except (KeyError, TypeError, ValueError):
        raise CorruptEntry("header is missing fields or has fields of the wrong type") from None
    if any(size < 0 for _, size in files):
        raise CorruptEntry("header lists a negative file size")
    return header


def _split_prefix(prefix: bytes) -> int:
    if len(prefix) < len(MAGIC) + _LEN.size:
        raise CorruptEntry(f"truncated: {len(prefix)} bytes, shorter than the fixed prefix")
    if prefix[: len(MAGIC)] != MAGIC:
        raise CorruptEntry("not a framejit cache entry (bad magic bytes)")
    (header_len,) = _LEN.unpack_from(prefix, len(MAGIC))
    if header_len > _MAX_HEADER:
        raise CorruptEntry(f"implausible header length {header_len}")
    return header_len


def decode(data: bytes) -> tuple[Header, dict[str, bytes]]:
    """Parse and check a whole entry; raises CorruptEntry with the reason."""
    header_len = _split_prefix(data)
    start = len(MAGIC) + _LEN.size
    if len(data) < start + header_len + _DIGEST_SIZE:
        raise CorruptEntry(f"truncated: {len(data)} bytes, the header alone needs {start + header_len}")
    body, digest = data[:-_DIGEST_SIZE], data[-_DIGEST_SIZE:]
    if hashlib.sha256(body).digest() != digest:
        raise CorruptEntry("checksum mismatch (truncated or modified)")
    header = _parse_header(body[start : start + header_len])
    offset = start + header_len
    if offset + header.payload_size != len(body):
        raise CorruptEntry("payload size does not match the header")
    files: dict[str, bytes] = {}
    for name, size in header.file_sizes:
        files[name] = body[offset : offset + size]
        offset += size
    return header, files


def read_header(stream: BinaryIO) -> Header:
    """Read only the header from the start of `stream` (the digest is not checked)."""
    prefix = stream.read(len(MAGIC) + _LEN.size)
    header_len = _split_prefix(prefix)
    header_bytes = stream.read(header_len)
    if len(header_bytes) != header_len:
        raise CorruptEntry("truncated inside the header")
    return _parse_header(header_bytes)
