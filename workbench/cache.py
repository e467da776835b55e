"""A keyed cache of study units: one JSON file per unit, so a rerun redoes only what is missing.

Studies compute in units (a checkpoint, a layer, a seed, a trained toy). Each unit's result is a
frozen dataclass whose ``to_dict()`` is JSON-ready and whose ``from_dict()`` rebuilds it: that pair
is also the cache format. :class:`UnitCache` stores ``<root>/<key>/<unit>.json`` atomically, where
``key`` hashes the config fields that change the numbers (see
:meth:`workbench.analyses.base.StudyConfig.key`). A unit whose file is missing, unreadable or
from another format version is computed again; an interrupted run leaves only complete files.

Trained artifacts (the embedded tiny-lm, the studies' toys) have one cache too: :func:`trained`
keeps each in ``<root>/<name>-<key>``, where ``key`` is :func:`recipe_key` of the whole recipe
(every hyperparameter, a digest of the training data, the recipe's version), trains it on first use
under a file lock (two processes asking at once train it once) into a temporary folder renamed into
place when complete, and writes the recipe beside it as ``recipe.json``. A changed recipe gets a
new folder; it is never served an older artifact.

Example::

    cache = UnitCache(cache_dir, config.key("checkpoints"))
    result = cache.get("step-200", lambda: measure(...), CheckpointResult.from_dict)

    folder = trained(home / "toys", "decoder", {"steps": 500, "seed": 0, "version": 2},
                     lambda out: train_decoder(out))
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from workbench.arrays import plain
from workbench.files import atomic_dir, atomic_write_json

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


RECIPE_FILE = "recipe.json"
"""The recipe a trained artifact's folder was built from (written last: its presence marks the
folder complete)."""


def recipe_key(recipe: Mapping[str, Any]) -> str:
    """16 hex characters of the SHA-256 of ``recipe`` as canonical JSON (sorted keys)."""
    blob = json.dumps(plain(dict(recipe)), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def data_digest(*parts: str | bytes) -> str:
    """16 hex characters of the SHA-256 of the training data, for a recipe's ``data`` entry."""
    h = hashlib.sha256()
    for part in parts:
        chunk = part.encode() if isinstance(part, str) else part
        h.update(len(chunk).to_bytes(8, "little"))
        h.update(chunk)
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def trained_folder(root: str | os.PathLike[str], name: str, recipe: Mapping[str, Any]) -> Path:
    """Where :func:`trained` keeps the artifact of ``recipe`` (whether or not it exists yet)."""
    return Path(root) / f"{_SAFE.sub('_', name)}-{recipe_key(recipe)}"


def trained(
    root: str | os.PathLike[str],
    name: str,
    recipe: Mapping[str, Any],
    train: Callable[[Path], Any],
) -> Path:
    """The folder of the artifact ``recipe`` describes, trained by ``train(folder)`` on first use.

    Args:
        root: The cache folder the artifact lives in (created when needed).
        name: A readable prefix of the folder name (``<name>-<recipe_key(recipe)>``).
        recipe: Everything the artifact depends on (JSON-ready): its config, a
            :func:`data_digest` of the data, a version bumped when the training code changes.
        train: Writes the artifact into the folder it is given (a temporary one, renamed into
            place only when ``train`` returns).

    Returns:
        The artifact's folder, holding what ``train`` wrote and ``recipe.json``.
    """
    folder = trained_folder(root, name, recipe)
    if (folder / RECIPE_FILE).is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder.parent / f".{folder.name}.lock"):
        if (folder / RECIPE_FILE).is_file():  # trained by another process while we waited
            return folder
        log.info("training %s into %s (first use)", name, folder)
        with atomic_dir(folder) as tmp:
            train(tmp)
            atomic_write_json(tmp / RECIPE_FILE, plain(dict(recipe)))
    return folder
