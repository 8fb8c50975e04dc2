"""Field rules and strict JSON decoding shared by the runner and worker configs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final

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


def read_json_file(path: str | Path, bytes_max: int) -> Any:
    try:
        with open(path, "rb") as handle:
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
