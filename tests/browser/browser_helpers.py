"""Helpers for the browser tests: pages with their errors collected, blank-screenshot check."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image


def open_page(browser, url: str):
    """A page at ``url`` with its console errors and page errors collected."""
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url, wait_until="load")
    return page, errors


def not_blank(png: bytes) -> bool:
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=float)
    return pixels.var() > 10
