"""Headless Debian Chromium driven by Playwright (its own browser download is never used)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("MADBENCH_TEST_ARTIFACTS", ROOT / "tests" / "artifacts"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-breakpad", "--disable-crash-reporter"]

requires_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="browser test: Debian's chromium is not installed (apt-get install chromium; .ci/run does)")


def open_page(playwright, user_data_dir: Path, viewport=(1300, 1800)):
    """A fresh-profile Chromium page; returns (context, page, console errors list). Chromium keeps its crash
    database under $XDG_CONFIG_HOME and dconf's under $XDG_CACHE_HOME whatever its profile: both, and its $HOME,
    are a folder beside the profile, so the user's home is left as it was."""
    home = user_data_dir.parent / f"{user_data_dir.name}-home"
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "XDG_CACHE_HOME": str(home / ".cache")}
    context = playwright.chromium.launch_persistent_context(
        str(user_data_dir), executable_path=CHROMIUM, headless=True, args=FLAGS, env=env,
        viewport={"width": viewport[0], "height": viewport[1]})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    return context, page, errors
