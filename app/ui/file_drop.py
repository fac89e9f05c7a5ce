"""Files and folders dragged onto the chat: taken while they hover (a highlight over the
chat says so) and handed on as paths when dropped. Other drags (text) are left to the
widget under them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtCore import QEvent, QMimeData, QObject, Qt, Signal
from PySide6.QtGui import QDragMoveEvent, QDropEvent
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

HINT = "Drop files or folders to bring them into this conversation"


def local_paths(mime: QMimeData | None) -> list[Path]:
    """The local files and folders a drag carries (none for text or web links)."""
    if mime is None or not mime.hasUrls():
        return []
    return [Path(url.toLocalFile()) for url in mime.urls() if url.isLocalFile()]


class FileDrop(QObject):
    """Takes drops of local files on ``area`` and on ``also`` (widgets inside it that
    take drops of their own, like the composer, which would paste the paths as text)."""

    dropped = Signal(list)
    """Local files or folders were dropped: their Paths."""

    def __init__(self, area: QWidget, also: Sequence[QWidget] = ()) -> None:
        super().__init__(area)
        self._area = area
        area.setAcceptDrops(True)
        self.highlight = QFrame(area)
        self.highlight.setObjectName("dropHighlight")
        self.highlight.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        hint = QLabel(HINT, self.highlight)
        hint.setObjectName("dropHint")
        hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        column = QVBoxLayout(self.highlight)
        column.addWidget(hint)
        self.highlight.hide()
        for widget in (area, *also):
            widget.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind in (QEvent.Type.DragEnter, QEvent.Type.DragMove) \
                and isinstance(event, QDragMoveEvent) and local_paths(event.mimeData()):
            event.setDropAction(Qt.DropAction.CopyAction)
            event.accept()
            self._show_highlight(True)
            return True
        if kind == QEvent.Type.DragLeave:
            self._show_highlight(False)
        elif kind == QEvent.Type.Drop and isinstance(event, QDropEvent):
            self._show_highlight(False)
            paths = local_paths(event.mimeData())
            if paths:
                event.setDropAction(Qt.DropAction.CopyAction)
                event.accept()
                self.dropped.emit(paths)
                return True
        return super().eventFilter(watched, event)

    def _show_highlight(self, shown: bool) -> None:
        if shown and not self.highlight.isVisible():
            self.highlight.setGeometry(self._area.rect())
            self.highlight.raise_()
        self.highlight.setVisible(shown)
