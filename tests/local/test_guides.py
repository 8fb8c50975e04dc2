"""The guide's examples run, and the three languages stay in step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDES = Path(__file__).resolve().parents[2] / "docs" / "local"
LANGUAGES = ("en", "pt", "fr")
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def blocks(language: str) -> list[str]:
    return BLOCK.findall((GUIDES / f"guide.{language}.md").read_text(encoding="utf-8"))


def headings(language: str) -> list[str]:
    text = (GUIDES / f"guide.{language}.md").read_text(encoding="utf-8")
    return [line.split(" ", 2)[1] for line in text.splitlines() if line.startswith("## ")]


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_python_block_of_the_guide_runs(language):
    code = blocks(language)
    assert len(code) >= 6
    namespace: dict = {"__name__": f"guide_{language}"}
    for number, block in enumerate(code, 1):
        exec(compile(block, f"guide.{language}.md block {number}", "exec"), namespace)


@pytest.mark.parametrize("language", ["pt", "fr"])
def test_translations_keep_the_same_sections_and_examples(language):
    assert blocks(language) == blocks("en")
    assert headings(language) == headings("en")
