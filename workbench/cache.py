"""A keyed cache of study units: one JSON file per unit, so a rerun redoes only what is missing.

Studies compute in units (a checkpoint, a layer, a seed, a trained toy). Each unit's result is a
frozen dataclass whose ``to_dict()`` is JSON-ready and whose ``from_dict()`` rebuilds it: that pair
is also the cache format. :class:`UnitCache` stores ``<root>/<key>/<unit>.json`` atomically, where
``key`` hashes the config fields that change the numbers (see
:meth:`workbench.analyses.base.StudyConfig.key`). A unit whose file is missing, unreadable or
from another format version is computed again; an interrupted run leaves only complete files.

Example::

    cache = UnitCache(cache_dir, config.key("checkpoints"))
    result = cache.get("step-200", lambda: measure(...), CheckpointResult.from_dict)
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from workbench.arrays import plain
from workbench.files import atomic_write_json

log = logging.getLogger(__name__)

_SAFE = re.compile(r"[^A-Za-z0-9_.=-]+")


class Cacheable(Protocol):
    """A result that can be cached: ``to_dict()`` gives JSON-ready data."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        ...


T = TypeVar("T", bound=Cacheable)


class UnitCache:
    """JSON files of computed units under ``root/key/`` (no caching when ``root`` is ``None``).

    Args:
        root: The cache folder (created on the first write), or ``None`` to compute everything.
        key: What the units' numbers depend on, usually a config hash.
    """

    def __init__(self, root: str | os.PathLike[str] | None, key: str) -> None:
        self.folder = None if root is None else Path(root) / key
        self.hits: list[str] = []
        self.misses: list[str] = []

    def path(self, unit: str) -> Path | None:
        """Where ``unit`` is stored (``None`` without a root)."""
        if self.folder is None:
            return None
        return self.folder / f"{_SAFE.sub('_', unit) or '_'}.json"

    def load(self, unit: str) -> dict[str, Any] | None:
        """The stored record of ``unit``, or ``None`` if it is absent or unreadable."""
        path = self.path(unit)
        if path is None or not path.is_file():
            return None
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            log.warning("ignoring unreadable cache file %s", path)
            return None
        return record if isinstance(record, dict) else None

    def save(self, unit: str, record: dict[str, Any]) -> None:
        """Stores ``record`` for ``unit`` atomically (a no-op without a root)."""
        path = self.path(unit)
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, plain(record), indent=None)

    def get(
        self, unit: str, compute: Callable[[], T], from_dict: Callable[[dict[str, Any]], T]
    ) -> T:
        """The cached result of ``unit``, or ``compute()``'s, which is then stored.

        A record that ``from_dict`` cannot read (an older format) is computed again.
        """
        record = self.load(unit)
        if record is not None:
            try:
                result = from_dict(record)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("recomputing %s: cached record unreadable (%s)", unit, exc)
            else:
                self.hits.append(unit)
                return result
        result = compute()
        self.save(unit, result.to_dict())
        self.misses.append(unit)
        return result
