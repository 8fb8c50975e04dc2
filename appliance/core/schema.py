"""A small declarative validation layer for JSON documents (definitions, limits, configs).

Theory of operation: every field's rule is stated once, as a ``Rule`` object placed in an ``Obj``
table; validating a document walks the table once and collects *every* problem with its JSON
path (``policy.retry.max_retries: must be an integer from 0 to 100, got 101``) instead of
stopping at the first. A rule returns the parsed value, or ``INVALID`` after recording why; an
object whose field is invalid is itself invalid, so cross-field checks and constructors only ever
see well-typed values. Unknown fields are rejected at every nesting level because ``Obj`` knows
its whole table.

Deliberately strict, because a permissive config fails open: JSON booleans are not integers
(``True`` is an ``int`` in Python), floats are not integers even when whole (``5.0``), strings are
measured in UTF-8 bytes, and a string that cannot be encoded as UTF-8 (a lone surrogate) is
refused. Values are echoed in messages only when short and never for fields marked ``secret``
(source code), so an error message is always safe to log.

This module is pure: no I/O, no clock; the policy core uses it too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

ROOT_PATH: Final = ""
ROOT_LABEL: Final = "$"
SHOWN_CHARS_MAX: Final = 40
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Invalid:
    """Marker for "this value failed; the reason is already recorded"."""

    _instance: _Invalid | None = None

    def __new__(cls) -> _Invalid:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "INVALID"

    def __bool__(self) -> bool:
        return False


INVALID: Final = _Invalid()


class Problems:
    """Every ``(path, message)`` found while validating one document, in document order."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> _Invalid:
        self.items.append((path or ROOT_LABEL, message))
        return INVALID

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)


def join(path: str, key: str) -> str:
    """The JSON path of ``key`` inside the object at ``path``."""
    label = key if _IDENTIFIER.fullmatch(key) else json.dumps(_clip(key), ensure_ascii=False)
    if not _IDENTIFIER.fullmatch(key):
        return f"{path}[{label}]" if path else f"[{label}]"
    return f"{path}.{label}" if path else label


def index(path: str, i: int) -> str:
    return f"{path or ROOT_LABEL}[{i}]"


def _clip(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS_MAX else text[: SHOWN_CHARS_MAX - 1] + "…"


def show(value: object) -> str:
    """A short, log-safe rendering of a JSON value for an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _clip(repr(value))
    if isinstance(value, str):
        return json.dumps(_clip(value), ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def utf8_length(text: str) -> int | None:
    """Length in UTF-8 bytes, or None when the text holds a lone surrogate."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None


@runtime_checkable
class Rule(Protocol):
    def check(self, value: object, path: str, problems: Problems) -> Any:
        """Return the parsed value, or record problems and return ``INVALID``."""
        ...  # pragma: no cover - protocol


@dataclass(frozen=True)
class Integer:
    """A JSON integer (not a boolean, not a float) in ``[minimum, maximum]``."""

    minimum: int
    maximum: int
    bound_note: str = ""  # names where a bound comes from, e.g. "(limits.outstanding)"

    def check(self, value: object, path: str, problems: Problems) -> Any:
        # bool is a subclass of int in Python; JSON true is not a number.
        is_number = isinstance(value, int) and not isinstance(value, bool)
        if is_number and self.minimum <= value <= self.maximum:  # type: ignore[operator]
            return value
        note = f" {self.bound_note}" if self.bound_note else ""
        return problems.add(
            path,
            f"must be an integer from {self.minimum} to {self.maximum}{note}, got {show(value)}",
        )


@dataclass(frozen=True)
class Text:
    """A string measured in UTF-8 bytes, optionally matching a pattern."""

    max_bytes: int
    min_bytes: int = 0
    pattern: re.Pattern[str] | None = None
    pattern_says: str = ""  # what the pattern means, in words
    secret: bool = False  # never echo the value (source code)

    def check(self, value: object, path: str, problems: Problems) -> Any:
        if not isinstance(value, str):
            return problems.add(path, f"must be a string, got {show(value)}")
        size = utf8_length(value)
        if size is None:
            return problems.add(path, "must be valid Unicode text (it holds a lone surrogate)")
        if size > self.max_bytes:
            return problems.add(
                path, f"must be at most {self.max_bytes} UTF-8 bytes, got {size} bytes"
            )
        if size < self.min_bytes:
            return problems.add(
                path,
                "must not be empty"
                if self.min_bytes == 1
                else f"must be at least {self.min_bytes} UTF-8 bytes, got {size}",
            )
        if self.pattern is not None and not self.pattern.fullmatch(value):
            shown = "the value" if self.secret else show(value)
            return problems.add(path, f"must be {self.pattern_says}, got {shown}")
        return value


@dataclass(frozen=True)
class Choice:
    """One of a fixed set of JSON strings, mapped to Python values."""

    options: Mapping[str, Any]

    def check(self, value: object, path: str, problems: Problems) -> Any:
        if isinstance(value, str) and value in self.options:
            return self.options[value]
        listed = ", ".join(json.dumps(o) for o in self.options)
        return problems.add(path, f"must be one of {listed}, got {show(value)}")


@dataclass(frozen=True)
class Custom:
    """A rule given as a function that parses or records problems (addresses, URLs, dates)."""

    parse: Callable[[object, str, Problems], Any]

    def check(self, value: object, path: str, problems: Problems) -> Any:
        return self.parse(value, path, problems)


@dataclass(frozen=True)
class ListOf:
    """A JSON array whose items follow one rule; ``unique`` maps an item to its identity."""

    item: Rule
    min_items: int = 0
    max_items: int = 1024
    bound_note: str = ""  # names where the bound comes from, e.g. "(limits.schedules)"
    unique: Callable[[Any], object] | None = None
    unique_says: str = "a duplicate of"

    def check(self, value: object, path: str, problems: Problems) -> Any:
        if not isinstance(value, list):
            return problems.add(path, f"must be a list, got {show(value)}")
        before = len(problems)
        if not self.min_items <= len(value) <= self.max_items:
            note = f" {self.bound_note}" if self.bound_note else ""
            problems.add(
                path,
                f"must hold from {self.min_items} to {self.max_items} items{note}, "
                f"got {len(value)}",
            )
        # Items are checked even when the count is wrong: every problem is reported.
        parsed = [self.item.check(v, index(path, i), problems) for i, v in enumerate(value)]
        if len(problems) > before:
            return INVALID
        if self.unique is not None and not _report_duplicates(
            parsed, self.unique, self.unique_says, path, problems
        ):
            return INVALID
        return tuple(parsed)


def _report_duplicates(
    items: list[Any], key: Callable[[Any], object], says: str, path: str, problems: Problems
) -> bool:
    first_seen: dict[object, int] = {}
    ok = True
    for i, item in enumerate(items):
        k = key(item)
        if k in first_seen:
            problems.add(index(path, i), f"is {says} item {first_seen[k]}")
            ok = False
        else:
            first_seen[k] = i
    return ok


_MISSING: Final = object()


@dataclass(frozen=True)
class Field:
    """One member of an ``Obj``: its rule, whether it is required, its default, its meaning.

    ``rule`` may be a function of the already parsed earlier fields (declaration order), for a
    rule that depends on a sibling, e.g. initial schedules checked against the configured limits.
    """

    rule: Rule | Callable[[Mapping[str, Any]], Rule]
    required: bool = True
    default: Any = None
    doc: str = ""

    def rule_given(self, earlier: Mapping[str, Any]) -> Rule:
        """The rule to apply, resolved against the earlier fields when it depends on them."""
        # A rule has ``check``; a dependent rule is a plain function. (Not isinstance against
        # the runtime-checkable Protocol: that walks the protocol's attributes on every call,
        # and this runs for every field of every exec a worker parses.)
        if hasattr(self.rule, "check"):
            return self.rule
        return self.rule(earlier)


@dataclass(frozen=True)
class CrossCheck:
    """A rule between sibling fields; it runs when every field it ``needs`` parsed.

    ``run(values, path, problems)`` records its own problems (naming the field to change).
    """

    needs: tuple[str, ...]
    run: Callable[[Mapping[str, Any], str, Problems], None]


def check_not_above(
    values: Mapping[str, Any], path: str, problems: Problems, name: str, bound: str
) -> None:
    """Record a problem at ``name`` (the field to change) when it exceeds its sibling ``bound``."""
    if values[name] > values[bound]:
        problems.add(
            join(path, name), f"must not exceed {bound} ({values[bound]}), got {values[name]}"
        )


def not_above(name: str, bound: str) -> CrossCheck:
    """The cross-check ``name <= bound`` between two sibling integer fields."""

    def run(values: Mapping[str, Any], path: str, problems: Problems) -> None:
        check_not_above(values, path, problems, name, bound)

    return CrossCheck((bound, name), run)


@dataclass(frozen=True)
class Obj:
    """A JSON object with a closed set of fields, an optional constructor and cross-checks.

    Each of ``checks`` runs when the fields it needs parsed, so a cross-field problem is reported
    alongside unrelated field problems. ``build`` turns the parsed fields (missing optional ones
    filled with defaults) into the result, only when nothing at all was wrong.
    """

    fields: Mapping[str, Field]
    build: Callable[..., Any] = dict
    checks: tuple[CrossCheck, ...] = ()

    def check(self, value: object, path: str, problems: Problems) -> Any:
        if not isinstance(value, dict):
            return problems.add(path, f"must be an object, got {show(value)}")
        before = len(problems)
        for key in value:
            if key not in self.fields:
                problems.add(join(path, str(key)), "unknown field")
        parsed: dict[str, Any] = {}
        for name, field in self.fields.items():
            here = join(path, name)
            if name not in value:
                if field.required:
                    problems.add(here, "is required")
                    parsed[name] = INVALID
                else:
                    parsed[name] = field.default
                continue
            parsed[name] = field.rule_given(parsed).check(value[name], here, problems)
        for cross_check in self.checks:
            if all(parsed[name] is not INVALID for name in cross_check.needs):
                cross_check.run(parsed, path, problems)
        if len(problems) > before:
            return INVALID
        return self.build(**parsed)


def validate(rule: Rule, value: object, path: str = ROOT_PATH) -> tuple[Any, list[tuple[str, str]]]:
    """Run ``rule`` over a whole document; return (parsed value or INVALID, problems)."""
    problems = Problems()
    parsed = rule.check(value, path, problems)
    return parsed, problems.items


def field_paths(rule: Rule, path: str = ROOT_PATH) -> Iterable[str]:
    """Every field path a rule table declares (for documentation tests)."""
    if isinstance(rule, Obj):
        for name, field in rule.fields.items():
            here = join(path, name)
            yield here
            if isinstance(field.rule, Rule):
                yield from field_paths(field.rule, here)
    elif isinstance(rule, ListOf):
        yield from field_paths(rule.item, f"{path}[]")
