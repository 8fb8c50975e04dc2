"""docs/walkthrough.md, executed against a real quickstart (issue 21, Must show).

The page is read block by block, in order: an ``sh`` block runs in bash (cwd: a fresh directory
holding the quickstart's ``./walkthrough`` data dir; the installed ``appliance`` on PATH), the
``text`` block after it must match what it printed (whitespace-insensitive, ``…`` = anything, lines
in order), and a ``terminal`` block is awaited line by line on the quickstart's stdout. Lines marked
``# yours`` (an address, an id, a pid) are replaced by the values of this session, and what a
block exports or sources holds for the later ones (one terminal): ``OCC`` is
taken from the console line that names a dispatched occurrence. The quickstart runs with a 10x
testing clock, so its minutes are six seconds.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.quickstart.session import Quickstart

PAGE = Path(__file__).resolve().parents[2] / "docs" / "walkthrough.md"
TIME_SCALE = "10"
STEP_TIMEOUT_S = 60
_FENCE = re.compile(r"^```(\w*)\s*$")
_YOURS = re.compile(r"^(?:export\s+)?([A-Z_]+)=\S+\s+# yours\b.*$")


def blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced block, in page order."""
    found: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    language = ""
    for line in text.splitlines():
        match = _FENCE.match(line)
        if match and current is None:
            current, language = [], match.group(1)
        elif line.strip() == "```" and current is not None:
            found.append((language, current))
            current = None
        elif current is not None:
            current.append(line)
    return found


def _normal(line: str) -> str:
    return " ".join(line.split())


def _pattern(expected: str) -> re.Pattern[str]:
    text = re.sub(r"\s*…\s*", "…", _normal(expected))
    return re.compile(".*".join(re.escape(part) for part in text.split("…")))


def match_in_order(expected: list[str], output: str) -> None:
    lines = [_normal(line) for line in output.splitlines()]
    at = 0
    for want in expected:
        if _normal(want) in ("", "…"):
            continue
        pattern = _pattern(want)
        while at < len(lines) and not pattern.search(lines[at]):
            at += 1
        assert at < len(lines), f"no line matching {want!r} in order in:\n{output}"
        at += 1


def test_the_page_has_every_kind_of_step() -> None:
    kinds = [language for language, _ in blocks(PAGE.read_text())]
    assert {"sh", "text", "terminal"} <= set(kinds)
    assert kinds.count("terminal") >= 6


@pytest.mark.timeout(300)
def test_the_walkthrough_runs_as_written(tmp_path: Path) -> None:
    page = blocks(PAGE.read_text())
    qs = Quickstart(tmp_path / "walkthrough", "--time-scale", TIME_SCALE)
    known: dict[str, str] = {}
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("APPLIANCE_MANAGEMENT_ADDR", None)
    last_output = ""
    session: list[str] = []
    try:
        for language, lines in page:
            if language == "sh" and any("appliance quickstart" in line for line in lines):
                qs.start()
                qs.expect(lambda line: "Ctrl-C stops both" in line, "the banner")
                banner = "\n".join(qs.stdout_lines)
                management = re.search(r"management:\s+(\S+)", banner)
                worker = re.search(r"\(pid (\d+)\)", banner)
                assert management and worker, banner
                known["APPLIANCE_MANAGEMENT_ADDR"] = management.group(1)
                known["WORKER_PID"] = worker.group(1)
            elif language == "sh":
                script = []
                for line in lines:
                    yours = _YOURS.match(line.strip())
                    if yours:
                        assert yours.group(1) in known, f"no value for {yours.group(1)}"
                    else:
                        script.append(line)
                result = subprocess.run(
                    # One terminal: what earlier blocks exported or sourced still holds.
                    ["bash", "-c", "\n".join([*session, *script])],
                    cwd=tmp_path,
                    env={**env, **known},
                    capture_output=True,
                    text=True,
                    timeout=STEP_TIMEOUT_S,
                    check=False,
                )
                last_output = result.stdout + result.stderr
                assert result.returncode == 0, f"{script}\n{last_output}"
                session += [line for line in script if line.startswith(("export ", ". "))]
            elif language == "text":
                match_in_order(lines, last_output)
            elif language == "terminal":
                if lines[0].startswith("appliance quickstart: stopping"):
                    assert qs.interrupt() == 0, qs.transcript()
                    match_in_order(lines, "\n".join(qs.stdout_lines))
                    continue
                for line in lines:
                    if "OCC" in line and " of schedule " in line:
                        regex = _pattern(line).pattern.replace("OCC", r"(\d+)")
                        found = qs.expect_match(regex, line)
                        known["OCC"] = found.group(1)
                    else:
                        wanted = _pattern(line.replace("OCC", known.get("OCC", "OCC")))
                        qs.expect(lambda text, p=wanted: bool(p.search(_normal(text))), line)
    finally:
        qs.kill()
