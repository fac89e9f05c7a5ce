"""The strip above the composer: the open conversation's documents as chips, the reading
of them as it goes (with Cancel), and the files that could not be read.

It only shows what it is given (the collections, the core's indexing ``Progress``);
its requests go out as signals, and the chat decides what they do.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.ui import icons
from app.ui.flow_layout import FlowLayout

if TYPE_CHECKING:
    from app.core.documents.index import Collection
    from app.core.documents.shelf import Progress

CHIP_NAME_WIDTH = 220  # pixels: a longer name is elided, its whole path in the tooltip
ICON_SIZE = 14


class DocumentChip(QFrame):
    """One file or folder of the conversation, with a close button to take it out."""

    detach_requested = Signal(int)
    """The user wants this collection (its id) out of the conversation."""

    def __init__(self, collection: Collection, color: QColor,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("documentChip")
        self.collection = collection
        name = collection.path.name or str(collection.path)
        kind = "Folder" if collection.folder else "File"
        self.setAccessibleName(f"{kind} {name}")
        self.setToolTip(str(collection.path))
        self.icon = QLabel(self)
        self.icon.setObjectName("documentChipIcon")
        self.name = QLabel(self)
        self.name.setObjectName("documentChipName")
        self.name.setText(self.name.fontMetrics().elidedText(
            name, Qt.TextElideMode.ElideMiddle, CHIP_NAME_WIDTH))
        self.close_button = QToolButton(self)
        self.close_button.setObjectName("chipClose")
        self.close_button.setAccessibleName(f"Remove {name} from this conversation")
        self.close_button.setToolTip(f"Remove {name} from this conversation")
        self.close_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.close_button.clicked.connect(lambda: self.detach_requested.emit(collection.id))
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 2, 2, 2)
        row.setSpacing(5)
        row.addWidget(self.icon)
        row.addWidget(self.name)
        row.addWidget(self.close_button)
        self.apply_icons(color)

    @property
    def text(self) -> str:
        return self.collection.path.name or str(self.collection.path)

    def apply_icons(self, color: QColor) -> None:
        glyph = "folder" if self.collection.folder else "file"
        self.icon.setPixmap(icons.glyph(glyph, color, ICON_SIZE).pixmap(ICON_SIZE, ICON_SIZE))
        self.close_button.setIcon(icons.glyph("close", color, 12))


class DocumentStrip(QFrame):
    """Chips, the progress of the reading, and the files that could not be read; hidden
    while the conversation has no documents and nothing is being read."""

    detach_requested = Signal(int)
    """The user took a collection (its id) out of the conversation."""
    cancel_requested = Signal()
    """The user wants the reading under way to stop (what is read is kept)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("documentStrip")
        self.setAccessibleName("Documents in this conversation")
        self._color = self.palette().color(self.palette().ColorRole.WindowText)
        self.chips: list[DocumentChip] = []
        self._chip_area = QWidget(self)
        self._chip_area.setObjectName("documentChips")
        self._flow = FlowLayout(self._chip_area)

        self.progress_row = QWidget(self)
        self.progress_label = QLabel(self.progress_row)
        self.progress_label.setObjectName("statusText")
        self.progress_bar = QProgressBar(self.progress_row)
        self.progress_bar.setObjectName("documentsProgress")
        self.progress_bar.setAccessibleName("Reading the documents")
        self.progress_bar.setTextVisible(False)
        self.progress_bar.setFixedSize(140, 6)
        self.cancel_button = QPushButton("Cancel", self.progress_row)
        self.cancel_button.setObjectName("cancelReadingButton")
        self.cancel_button.setAccessibleName("Stop reading the documents")
        self.cancel_button.setToolTip("Stop reading; what is read so far is kept")
        self.cancel_button.clicked.connect(self.cancel_requested)
        row = QHBoxLayout(self.progress_row)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(8)
        row.addWidget(self.progress_label)
        row.addWidget(self.progress_bar)
        row.addWidget(self.cancel_button)
        row.addStretch(1)

        # "2 files could not be read": the sentences in its tooltip, and below on a click.
        self.problems_button = QToolButton(self)
        self.problems_button.setObjectName("documentProblems")
        self.problems_button.setAccessibleName("Files that could not be read")
        self.problems_button.setCheckable(True)
        self.problems_button.setAutoRaise(True)
        self.problems_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.problems_button.toggled.connect(self._on_problems_toggled)
        self.problem_list = QLabel(self)
        self.problem_list.setObjectName("documentProblemList")
        self.problem_list.setWordWrap(True)
        self.problem_list.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.problem_list.setTextFormat(Qt.TextFormat.PlainText)

        column = QVBoxLayout(self)
        column.setContentsMargins(4, 0, 4, 2)
        column.setSpacing(4)
        column.addWidget(self._chip_area)
        column.addWidget(self.progress_row)
        column.addWidget(self.problems_button, 0, Qt.AlignmentFlag.AlignLeft)
        column.addWidget(self.problem_list)
        self._problems: tuple[str, ...] = ()
        self._active = False
        for widget in (self._chip_area, self.progress_row, self.problems_button,
                       self.problem_list, self):
            widget.hide()

    # What the chat shows -------------------------------------------------------------

    def show_attached(self, collections: Sequence[Collection]) -> None:
        """The open conversation's files and folders, in the order they came."""
        if [c.id for c in collections] == [chip.collection.id for chip in self.chips] and \
                [c.path for c in collections] == [chip.collection.path for chip in self.chips]:
            return
        for chip in self.chips:
            self._flow.removeWidget(chip)
            chip.deleteLater()
        self.chips = []
        for collection in collections:
            chip = DocumentChip(collection, self._color, self._chip_area)
            chip.detach_requested.connect(self.detach_requested)
            self._flow.addWidget(chip)
            self.chips.append(chip)
        self._chip_area.setVisible(bool(self.chips))
        self._show_problems()
        self._update_visible()

    def show_progress(self, progress: Progress, waiting: str = "") -> None:
        """The reading under way (``progress.active``), or, before it starts, the name of
        what ``waiting`` to be read."""
        self._active = progress.active or bool(waiting)
        if progress.active:
            name = Path(progress.path).name or progress.path
            files = "file" if progress.total == 1 else "files"
            counted = f"{progress.done} / {progress.total} {files}"
            if progress.paused:
                text = f"Paused while the reply is written ({name}: {counted})"
            else:
                text = f"Reading {name}: {counted}"
            if progress.queued:
                text += f" · {progress.queued} more waiting"
            self.progress_label.setText(text)
            self.progress_label.setToolTip(f"Now reading {progress.current}"
                                           if progress.current else "")
            self.progress_bar.setRange(0, max(1, progress.total))
            self.progress_bar.setValue(progress.done)
            self.progress_bar.setAccessibleDescription(text)
            self.progress_bar.show()
        elif waiting:
            self.progress_label.setText(f"Waiting to read {waiting}…")
            self.progress_label.setToolTip("")
            self.progress_bar.hide()
        self.progress_row.setVisible(self._active)
        if progress.problems != self._problems:
            self._problems = progress.problems
            self._show_problems()
        self._update_visible()

    def apply_icons(self, color: QColor) -> None:
        self._color = color
        for chip in self.chips:
            chip.apply_icons(color)

    # Inside -----------------------------------------------------------------------------

    def _show_problems(self) -> None:
        # Only beside the conversation's documents: a new chat starts clean.
        problems = self._problems if self.chips else ()
        count = len(problems)
        self.problems_button.setText(f"⚠ {count} {'file' if count == 1 else 'files'} could "
                                     "not be read")
        self.problems_button.setToolTip("\n".join(problems))
        self.problems_button.setAccessibleName(self.problems_button.text().lstrip("⚠ ")
                                               if problems else "Files that could not be read")
        self.problems_button.setVisible(bool(problems))
        self.problem_list.setText("\n".join(f"• {p}" for p in problems))
        self.problem_list.setVisible(bool(problems) and self.problems_button.isChecked())

    def _on_problems_toggled(self, shown: bool) -> None:
        self.problem_list.setVisible(shown and bool(self.problem_list.text()))

    def _update_visible(self) -> None:
        self.setVisible(bool(self.chips) or self._active)
