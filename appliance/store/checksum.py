"""The one checksum every stored blob carries.

BLAKE2b with a 16-byte digest, personalised per table (``tag``) so that a row copied into another
table does not verify, over length-prefixed fields so that moving bytes between fields does not
verify either. The key columns (log index, part name, invocation) are part of the fields: a row
that swapped places with another fails too.
"""

from __future__ import annotations

import hashlib

CHECKSUM_BYTES = 16

Field = bytes | str | int | None


def _encode(field: Field) -> bytes:
    if field is None:
        return b"n"
    if isinstance(field, bool):  # bool is an int; keep it distinct and explicit
        return b"b1" if field else b"b0"
    if isinstance(field, int):
        text = str(field).encode("ascii")
        return b"i" + len(text).to_bytes(4, "big") + text
    if isinstance(field, str):
        data = field.encode("utf-8")
        return b"s" + len(data).to_bytes(8, "big") + data
    if isinstance(field, bytes | bytearray | memoryview):
        data = bytes(field)
        return b"x" + len(data).to_bytes(8, "big") + data
    raise TypeError(f"cannot checksum a {type(field).__name__}")


def checksum(tag: bytes, *fields: Field) -> bytes:
    """Checksum of ``fields`` in the table named by ``tag`` (at most 16 bytes)."""
    digest = hashlib.blake2b(digest_size=CHECKSUM_BYTES, person=tag)
    for field in fields:
        digest.update(_encode(field))
    return digest.digest()


def matches(stored: object, tag: bytes, *fields: Field) -> bool:
    return isinstance(stored, bytes) and stored == checksum(tag, *fields)
