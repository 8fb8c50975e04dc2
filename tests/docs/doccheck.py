"""The docs check: what the Markdown pages under docs/ claim, in a form tests can verify.

Theory of operation. A page is split into code blocks (fenced with three backticks, or indented by
four spaces after a blank line) and prose. From the blocks we take:

- **command lines**: every shell line that runs the appliance (``appliance …``, ``python -m
  appliance …``, ``python appliance.pyz …``), after ``$`` prompts, ``cd … &&`` prefixes, ``VAR=x``
  assignments, comments and line continuations are removed. Synopsis lines are understood:
  ``[--opt X]`` groups are optional (the line must parse without them and with them) and
  upper-case placeholders (``ID``, ``DATA_DIR``, ``FILE|-``) and shell variables (``"$OCC"``)
  stand for a value;
- **JSON examples**: fenced ``json`` blocks holding one object, or one object per line. A line
  ``<!-- docs-check: invalid -->`` right before a block says the example is *meant* to be refused.

From the prose (and the blocks' surroundings) we take every relative Markdown link, so that a test
can prove that its file exists and that its ``#anchor`` names a heading of that file.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from appliance.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
INVALID_MARKER = "<!-- docs-check: invalid -->"

_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
_PROGRAM = re.compile(
    r"^(?:\S*python[0-9.]*\s+-m\s+appliance|\S*python[0-9.]*\s+\S*appliance\.pyz|"
    r"\./appliance\.pyz|\S*dist/appliance\.pyz|(?:\S*/)?appliance)(?=\s|$)"
)
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*\s+")
_SEPARATOR = re.compile(r"\s*(?:&&|\|\||;|\s\|\s)\s*")
_OPTIONAL = re.compile(r"\[([^\[\]]*)\]")
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(?:\|[A-Z0-9_-]+|\|-)*$")
_LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
SHELL_LANGUAGES = frozenset({"", "sh", "shell", "bash", "console"})  # "text" is output


@dataclass(frozen=True)
class Block:
    """One code block: its language ('' when none or indented), first line number, lines."""

    page: Path
    language: str
    line: int
    lines: tuple[str, ...]
    marked_invalid: bool


@dataclass(frozen=True)
class Command:
    """One appliance command line found in a page, as argument lists to parse."""

    page: Path
    line: int
    text: str
    variants: tuple[tuple[str, ...], ...]  # minimal form first, then with every optional group


@dataclass(frozen=True)
class Link:
    page: Path
    line: int
    target: str


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def blocks(page: Path, text: str | None = None) -> list[Block]:
    """Fenced and indented code blocks of a page, in order."""
    lines = (page.read_text(encoding="utf-8") if text is None else text).splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = _FENCE.match(line)
        marked = index > 0 and lines[index - 1].strip() == INVALID_MARKER
        if fence:
            indent, marker, language = fence.groups()
            body: list[str] = []
            index += 1
            while index < len(lines) and not lines[index].strip().startswith(marker):
                body.append(lines[index][len(indent) :] if lines[index].startswith(indent) else "")
                index += 1
            found.append(Block(page, language.lower(), index - len(body) + 1, tuple(body), marked))
            index += 1
            continue
        previous_blank = index == 0 or not lines[index - 1].strip()
        indented = line.startswith("    ") and bool(line.strip())
        if indented and previous_blank and not _in_list(lines, index):
            start = index
            body = []
            while index < len(lines) and (
                lines[index].startswith("    ") or not lines[index].strip()
            ):
                body.append(lines[index][4:])
                index += 1
            while body and not body[-1].strip():
                body.pop()
            found.append(Block(page, "", start + 1, tuple(body), marked))
            continue
        index += 1
    return found


def _in_list(lines: list[str], index: int) -> bool:
    """An indented paragraph that continues a list item is not a code block."""
    back = index - 1
    while back >= 0 and not lines[back].strip():
        back -= 1
    return back >= 0 and bool(re.match(r"^\s*(?:[-*+]|\d+[.)])\s", lines[back]))


def _logical_lines(block: Block) -> Iterator[tuple[int, str]]:
    """Lines with backslash continuations joined, with their first line number."""
    pending = ""
    start = block.line
    for offset, raw in enumerate(block.lines):
        if not pending:
            start = block.line + offset
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        yield start, pending + raw
        pending = ""
    if pending:
        yield start, pending


def _program_arguments(segment: str) -> str | None:
    """The argument text after the appliance program in one shell segment, or None."""
    segment = segment.strip()
    if segment.startswith("$ "):
        segment = segment[2:].lstrip()
    while _ASSIGNMENT.match(segment):
        segment = _ASSIGNMENT.sub("", segment, count=1)
    match = _PROGRAM.match(segment)
    if match is None:
        return None
    return segment[match.end() :].strip()


@functools.cache
def placeholders() -> frozenset[str]:
    """Every metavar of the real parser (``ID``, ``DATA_DIR``, ``FILE|-``, ``N`` …)."""
    found: set[str] = set()
    pending = [build_parser()]
    while pending:
        parser = pending.pop()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending.extend(action.choices.values())
                continue
            if isinstance(action.metavar, str):
                found.add(action.metavar)
            elif not action.option_strings or action.nargs != 0:
                found.add(action.dest.upper())
    return frozenset(word for word in found if _PLACEHOLDER.match(word))


_SHELL_VARIABLE = re.compile(r"^\$\{?[A-Z_][A-Z0-9_]*\}?$")


def _words(text: str) -> tuple[str, ...]:
    """Shell words; a placeholder of the parser, or a shell variable (``$OCC``), stands for a
    value ("1" fits every type)."""
    names = placeholders()
    return tuple(
        "1" if word in names or _SHELL_VARIABLE.match(word) else word
        for word in shlex.split(text, comments=True)
    )


def commands(page: Path, text: str | None = None) -> list[Command]:
    """Every appliance command line in the shell code blocks of a page."""
    found: list[Command] = []
    for block in blocks(page, text):
        if block.language not in SHELL_LANGUAGES:
            continue
        for number, line in _logical_lines(block):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            for segment in _SEPARATOR.split(_strip_comment(stripped)):
                arguments = _program_arguments(segment)
                if arguments is None:
                    continue
                minimal = _OPTIONAL.sub(" ", arguments)
                full = _OPTIONAL.sub(lambda m: " " + m.group(1) + " ", arguments)
                variants = (_words(minimal),) + ((_words(full),) if full != minimal else ())
                found.append(Command(page, number, segment.strip(), variants))
    return found


def _strip_comment(line: str) -> str:
    """The line without a trailing shell comment (a '#' that starts a word, outside quotes)."""
    quote = ""
    for position, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (position == 0 or line[position - 1].isspace()):
            return line[:position]
    return line


def json_examples(page: Path, text: str | None = None) -> list[tuple[Block, list[object]]]:
    """Each fenced json block that decodes: as one document, or as one document per line."""
    found: list[tuple[Block, list[object]]] = []
    for block in blocks(page, text):
        if block.language not in ("json", "jsonl"):
            continue
        body = "\n".join(block.lines)
        try:
            found.append((block, [json.loads(body)]))
            continue
        except ValueError:
            pass
        documents: list[object] = []
        for line in block.lines:
            if not line.strip():
                continue
            try:
                documents.append(json.loads(line))
            except ValueError:
                documents = []
                break
        if documents:
            found.append((block, documents))
    return found


def links(page: Path, text: str | None = None) -> list[Link]:
    """Relative links of a page (outside code blocks and inline code)."""
    lines = (page.read_text(encoding="utf-8") if text is None else text).splitlines()
    in_code = {
        block.line + offset
        for block in blocks(page, "\n".join(lines))
        for offset in range(-1, len(block.lines) + 1)
    }
    found: list[Link] = []
    for number, line in enumerate(lines, start=1):
        if number in in_code:
            continue
        prose = re.sub(r"`[^`]*`", "", line)
        for match in _LINK.finditer(prose):
            target = match.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, …
                continue
            found.append(Link(page, number, target))
    return found


def anchors(page: Path) -> set[str]:
    """GitHub-style anchors of every heading of a page (duplicates get -1, -2, …)."""
    seen: dict[str, int] = {}
    result: set[str] = set()
    in_fence = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        match = None if in_fence else _HEADING.match(line)
        if match is None:
            continue
        slug = slugify(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def slugify(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def resolve(link: Link) -> tuple[Path, str]:
    """The file a link points to and its anchor ('' when none)."""
    target, _, anchor = link.target.partition("#")
    path = link.page if not target else (link.page.parent / target).resolve()
    return path, anchor
