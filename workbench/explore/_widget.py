"""The :class:`Explorer` base class (imports anywidget; see :mod:`workbench.explore._base`)."""

from __future__ import annotations

from typing import Any

import anywidget


class Explorer(anywidget.AnyWidget):
    """An anywidget whose output bundle also carries its static HTML twin and a short text."""

    def static_html(self) -> str:
        """The twin: plain HTML (no script) of what the widget shows first."""
        raise NotImplementedError

    def describe(self) -> str:
        """The ``text/plain`` line."""
        return type(self).__name__

    def __repr__(self) -> str:
        return self.describe()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        out = super()._repr_mimebundle_(**kwargs)
        data, meta = out if isinstance(out, tuple) else (out, {})
        data = dict(data or {})
        data["text/plain"] = self.describe()
        data["text/html"] = self.static_html()
        return data, meta
