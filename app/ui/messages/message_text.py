"""A message's text as a widget: rendered, selectable, sized to its content."""

from __future__ import annotations

import math

from PySide6.QtCore import QSize, Qt, QUrl
from PySide6.QtGui import QResizeEvent, QWheelEvent
from PySide6.QtWidgets import QFrame, QSizePolicy, QTextBrowser, QWidget


class MessageText(QTextBrowser):
    """A message's rendered text: selectable, sized to its content, inert.

    Nothing is ever loaded (``loadResource`` answers nothing) and links are only
    reported through ``anchorClicked``; the message decides what they do.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.setUndoRedoEnabled(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.viewport().setAutoFillBackground(False)
        self.setAutoFillBackground(False)
        self.document().setDocumentMargin(0)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
        self.document().documentLayout().documentSizeChanged.connect(self.updateGeometry)

    def loadResource(self, kind: int, name: QUrl | str) -> object:
        return None

    def lay_out(self, width: int) -> None:
        """Lay the text out for ``width``; a no-op when it already is.

        QTextDocument.setTextWidth lays the whole document out again even for the
        same width, and width probes are frequent, so every caller comes here.
        """
        document = self.document()
        if document.textWidth() != width:
            document.setTextWidth(width)

    def hasHeightForWidth(self) -> bool:
        return True

    def heightForWidth(self, width: int) -> int:
        self.lay_out(width)
        return math.ceil(self.document().size().height())

    def sizeHint(self) -> QSize:
        # The height at the current text width: no layout at a guessed width.
        return QSize(self.width(), math.ceil(self.document().size().height()))

    def minimumSizeHint(self) -> QSize:
        return QSize(0, 0)

    def resizeEvent(self, event: QResizeEvent) -> None:
        if self.document().textWidth() == event.size().width():
            # Already laid out for this width (heightForWidth did it): QTextEdit would
            # lay it all out again for a width change, so tell it only the height did.
            event = QResizeEvent(event.size(), QSize(event.size().width(),
                                                     event.oldSize().height()))
        super().resizeEvent(event)

    def wheelEvent(self, event: QWheelEvent) -> None:
        event.ignore()  # the transcript scrolls, never the message inside it
