"""The line under a reply that was given the user's documents: its sources, numbered as
the reply cites them ("Sources: [1] report.pdf, page 3 · [2] notes.md, lines 10-42"),
each a link that asks for its passage to be shown."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QWidget

LINK_PREFIX = "source:"
# A source's label breaks nowhere inside: the line wraps only between sources.
UNBROKEN = str.maketrans({" ": "\u00a0", "-": "\u2011"})


def describe_source(source: Mapping[str, Any]) -> str:
    """"[1] report.pdf, page 3": the source's number, file name and place in the file."""
    name = Path(str(source.get("path", ""))).name or "document"
    location = str(source.get("location") or "")
    number = source.get("n")
    head = f"[{number}] {name}" if number is not None else name
    return f"{head}, {location}" if location else head


class SourcesLine(QLabel):
    """The sources of a reply as links; hidden while it has none."""

    source_clicked = Signal(object)
    """The user clicked a source: its dict, as the core keeps it."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sourcesLine")
        self.setAccessibleName("Sources")
        self.setWordWrap(True)
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.LinksAccessibleByMouse
                                     | Qt.TextInteractionFlag.LinksAccessibleByKeyboard)
        self.linkActivated.connect(self._on_link_activated)
        self.sources: tuple[Mapping[str, Any], ...] = ()
        self._link_color = ""
        self.hide()

    def set_sources(self, sources: Sequence[Mapping[str, Any]]) -> None:
        self.sources = tuple(sources)
        self._show()

    def set_link_color(self, color: str) -> None:
        if color != self._link_color:
            self._link_color = color
            self._show()

    def labels(self) -> list[str]:
        """Each source as the line shows it, in order."""
        return [describe_source(s) for s in self.sources]

    def _show(self) -> None:
        style = f' style="color: {self._link_color}; text-decoration: none;"' \
            if self._link_color else ""
        links = " · ".join(f'<a href="{LINK_PREFIX}{i}"{style}>'
                           f'{html.escape(label.translate(UNBROKEN))}</a>'
                           for i, label in enumerate(self.labels()))
        self.setText(f"Sources: {links}" if links else "")
        self.setAccessibleDescription(", ".join(self.labels()))
        self.setVisible(bool(self.sources))

    def _on_link_activated(self, link: str) -> None:
        index = link.removeprefix(LINK_PREFIX)
        if index.isdigit() and int(index) < len(self.sources):
            self.source_clicked.emit(self.sources[int(index)])
