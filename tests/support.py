"""Helpers shared by test modules: the system Chromium, or a skip that CI turns into a failure."""

from __future__ import annotations

import os
import shutil

import pytest

REQUIRE_BROWSER = "WORKBENCH_REQUIRE_BROWSER"
"""Set (as .ci/run does) to make a missing Chromium fail the browser tests instead of skipping."""


def chromium_or_skip() -> str:
    """The system Chromium, or skip the calling test (fail it when $WORKBENCH_REQUIRE_BROWSER)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    message = "needs Chromium (apt-get install chromium) for browser tests and static figures"
    if os.environ.get(REQUIRE_BROWSER):
        pytest.fail(f"{REQUIRE_BROWSER} is set but no Chromium was found: {message}")
    pytest.skip(message)
