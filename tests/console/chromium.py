"""Debian's headless Chromium for the console's browser tests (driven by Playwright)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WAIT_MS = 30_000


def chromium_missing() -> bool:
    return shutil.which(CHROMIUM) is None


def require_chromium() -> None:
    """Skip without Chromium, except in CI, where its absence is a failure."""
    if chromium_missing():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing: .ci/run installs chromium and chromium-driver")
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium chromium-driver)")


@contextmanager
def browser_context(profile: Path, wait_ms: int = WAIT_MS, **options: Any) -> Iterator[Any]:
    """A fresh persistent context (its own --user-data-dir) of headless Chromium."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as driver:
        context = driver.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS, **options
        )
        context.set_default_timeout(wait_ms)
        try:
            yield context
        finally:
            context.close()
