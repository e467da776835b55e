"""One lazy model holder: load on first use, free when the block ends.

A study whose every unit is cached must not load its model at all, and one that loads it must
free it when done. :class:`LazySubject` wraps the study's ``collect.loaded(...)`` context
manager (``collect`` stays the only place that loads): nothing happens until :meth:`get`, the
first call enters the context (loads), later calls return the same subject, and leaving the
``with`` block (or :meth:`close`) exits it, which frees the model.

Example::

    with LazySubject(lambda: collect.loaded(config)) as lazy:
        geometry = cache.get("geometry", lambda: compute.geometry(lazy.get(), texts))
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any


class LazySubject(AbstractContextManager):
    """A model loaded on the first :meth:`get` and freed on exit.

    Args:
        load: A zero-argument function returning a context manager that loads the model on
            entry, yields it, and frees it on exit (a study's ``collect.loaded``).
    """

    def __init__(self, load: Callable[[], AbstractContextManager[Any]]) -> None:
        self._load = load
        self._stack: contextlib.ExitStack | None = None
        self._subject: Any = None

    @property
    def loaded(self) -> bool:
        """Whether the model has been loaded (and not yet freed)."""
        return self._stack is not None

    def get(self) -> Any:
        """The model, loading it on the first call."""
        if self._stack is None:
            stack = contextlib.ExitStack()
            self._subject = stack.enter_context(self._load())
            self._stack = stack
        return self._subject

    def close(self) -> None:
        """Frees the model if it was loaded; :meth:`get` would load it again."""
        stack, self._stack, self._subject = self._stack, None, None
        if stack is not None:
            stack.close()

    def __exit__(self, *exc: object) -> None:
        self.close()
