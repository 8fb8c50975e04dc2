"""Field rules and strict JSON decoding shared by the runner and worker configs."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO, Final

from appliance.core.binding import HEAP_MB_RANGE, TIMEOUT_SECONDS_RANGE
from appliance.core.errors import InvalidConfig
from appliance.core.schema import Text, show

ENV_NAME_PATTERN: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENV_NAME_BYTES_MAX: Final = 128
IDENT_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
IDENT_BYTES_MAX: Final = 128
DATA_DIR_BYTES_MAX: Final = 4096
# The grant's engine limits are one rule wherever they are checked (the config's ``remote``, the
# worker's wire parser and the committed binding), so the core binding owns the ranges.
TIMEOUT_SECONDS_MAX: Final = TIMEOUT_SECONDS_RANGE[1]
HEAP_MB_MIN: Final = HEAP_MB_RANGE[0]
HEAP_MB_MAX: Final = HEAP_MB_RANGE[1]

ENV_NAME: Final = Text(
    ENV_NAME_BYTES_MAX, 1, ENV_NAME_PATTERN, "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
)
IDENT: Final = Text(
    IDENT_BYTES_MAX,
    1,
    IDENT_PATTERN,
    "1 to 128 characters of A-Z a-z 0-9 _ . - starting with a letter or digit",
)
DATA_DIR: Final = Text(DATA_DIR_BYTES_MAX, 1, re.compile(r"[^\x00]+"), "a path without NUL bytes")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {show(key)}")
        out[key] = value
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_json(text: str) -> Any:
    """Decode JSON strictly: duplicate keys, NaN and Infinity are refused (InvalidConfig)."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys, parse_constant=_no_constants)
    except json.JSONDecodeError as err:
        raise InvalidConfig([("$", f"is not valid JSON: {err}")]) from None
    except (ValueError, RecursionError) as err:
        raise InvalidConfig([("$", f"is not acceptable JSON: {err}")]) from None


_KINDS: Final = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a file")


def _open_regular(path: str | Path) -> BinaryIO:
    """Open ``path`` for reading only if it is a regular file, without ever blocking in
    ``open()``: ``O_NONBLOCK`` makes opening a FIFO with no writer return at once (it then fails
    the check), where a plain open would wait for a writer forever."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InvalidConfig(
                [("$", f"{path} is not a regular file ({_kind(mode)}); a config is read from one")]
            )
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_json_file(path: str | Path, bytes_max: int, *, regular_only: bool = False) -> Any:
    """The JSON document in ``path``, at most ``bytes_max`` bytes. With ``regular_only`` (the
    runner's and the worker's configs) anything but a regular file is refused, without blocking:
    a FIFO or a device would hold the reading thread until someone writes to it."""
    try:
        handle = _open_regular(path) if regular_only else open(path, "rb")  # noqa: SIM115
        with handle:
            data = handle.read(bytes_max + 1)
    except OSError as err:
        raise InvalidConfig([("$", f"cannot read {path}: {err.strerror or err}")]) from None
    if len(data) > bytes_max:
        raise InvalidConfig([("$", f"{path} is larger than {bytes_max} bytes")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InvalidConfig(
            [("$", f"{path} is not UTF-8: {err.reason} at byte {err.start}")]
        ) from None
    return decode_json(text)
