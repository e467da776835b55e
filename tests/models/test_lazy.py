"""LazySubject: nothing loads until asked, one load however often asked, freed on exit."""

from __future__ import annotations

import contextlib

import pytest

from workbench.models import LazySubject


def counting_loader(events: list[str]):
    @contextlib.contextmanager
    def loaded():
        events.append("load")
        model = object()
        try:
            yield model
        finally:
            events.append("free")

    return loaded


def test_loads_on_first_use_once_and_frees_on_exit():
    events: list[str] = []
    with LazySubject(counting_loader(events)) as lazy:
        assert events == [] and not lazy.loaded  # a fully cached study never loads
        first = lazy.get()
        assert lazy.get() is first and events == ["load"] and lazy.loaded
    assert events == ["load", "free"] and not lazy.loaded
    lazy.get()  # asked again after the block: loads anew, and close frees it
    lazy.close()
    assert events == ["load", "free", "load", "free"]


def test_an_error_in_the_block_still_frees_the_model_and_an_unused_one_never_loads():
    events: list[str] = []
    with pytest.raises(RuntimeError, match="boom"), LazySubject(counting_loader(events)) as lazy:
        lazy.get()
        raise RuntimeError("boom")
    assert events == ["load", "free"]
    with LazySubject(counting_loader(events)):
        pass
    assert events == ["load", "free"]
