"""The scrolling column of messages, with widgets only near what is on screen.

Qt's cost of showing a widget and of laying out a column grows with the number of
widgets, and every built message relays its text out when the window is resized, so
the column keeps rows only for the messages within a few screens of the view:

- Opening a conversation builds its newest messages. Older ones are built one per
  event-loop turn while the view is near the top, and the message at the top of the
  view keeps its place on screen as they appear above it.
- Rows far from the view are released; a spacer of the same height takes their place,
  so the scroll bar keeps its length, and scrolling back builds them again. Only
  messages never built yet take no space: they are reached by scrolling to the top.
- While the view is at the bottom it stays there as content grows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QEvent, QObject, QPoint, Qt, QTimer
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.core.reply.replies import ReplyStats, ToolRun
from app.ui.messages.message_widget import MessageWidget

COLUMN_WIDTH = 860  # the widest the column grows: lines stay readable
MARGINS = (20, 20, 20, 28)  # left, top, right, bottom
SPACING = 22  # between messages
INITIAL_ROWS = 8  # built when a conversation opens
BUILD_AHEAD = 2.0  # screens: messages this close to the view are built
BUILT_SCREENS = 4.0  # screens: rows further than this from the view are released
BOTTOM_SLACK = 8  # pixels from the bottom that still count as "at the bottom"


@dataclass(eq=False)
class Entry:
    """One message of the column, built into a row or not."""

    role: str
    text: str
    model: str = ""
    stats: ReplyStats | None = None
    note: str = ""  # why the message ended early, shown under it
    thinking: str = ""  # a reply's thought, folded above it
    calls: list[ToolRun] = field(default_factory=list)  # a reply's calls, under its text
    sources: Sequence[Mapping[str, Any]] = ()  # the documents a reply was given
    height: int = 0  # of its row when it was last released
    row: MessageWidget | None = None


Build = Callable[[Entry, int, QWidget], MessageWidget]  # entry, width, parent


class MessageColumn(QScrollArea):
    """The messages of one conversation, built into rows near the view only."""

    def __init__(self, build: Build, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._build = build
        self.entries: list[Entry] = []
        self._lo = self._hi = 0  # entries[lo:hi] have rows
        self._fresh = 0  # entries[:fresh] were never built and take no space
        self.pinned: MessageWidget | None = None  # never released (the streaming reply)
        self._pinned = True  # at the bottom: stay there as content grows
        # Otherwise the first row in view and its offset from the view's top: it keeps
        # its place on screen whatever changes above it (rows built, released, resized).
        self._anchor: tuple[MessageWidget, int] | None = None
        self._restoring = False

        self._column = QWidget()
        self._column.setObjectName("transcriptColumn")
        self._column.setMaximumWidth(COLUMN_WIDTH)
        self._column.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self._list = QVBoxLayout(self._column)
        self._list.setContentsMargins(*MARGINS)
        self._list.setSpacing(SPACING)
        self._top = self._spacer()
        self._bottom = self._spacer()
        self._list.addWidget(self._top)
        self._list.addWidget(self._bottom)
        self._list.addStretch(1)  # keeps a short conversation at the top
        self._content = content = QWidget()
        content.setObjectName("transcriptContent")
        centre = QHBoxLayout(content)
        centre.setContentsMargins(0, 0, 0, 0)
        centre.addStretch(0)
        centre.addWidget(self._column, 1)
        centre.addStretch(0)

        self.setObjectName("transcriptScroll")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.setWidget(content)
        bar = self.verticalScrollBar()
        bar.setSingleStep(40)
        bar.valueChanged.connect(self._on_scrolled)
        bar.rangeChanged.connect(self._on_range_changed)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(0)
        self._timer.timeout.connect(self._maintain)

    def _spacer(self) -> QWidget:
        spacer = QWidget(self._column)
        spacer.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        spacer.hide()
        return spacer

    # What the transcript asks -------------------------------------------------

    def set_entries(self, entries: list[Entry]) -> None:
        """Show these messages instead; builds the newest few."""
        self._drop_rows()
        self.entries = entries
        self._lo = self._hi = self._fresh = len(entries)
        self._update_spacers()
        for _ in range(min(INITIAL_ROWS, len(entries))):
            self._grow_up()
        self.scroll_to_bottom()
        self.schedule()

    def append(self, entry: Entry) -> MessageWidget:
        """Add a message at the end; the view goes there if it was far above."""
        if self._hi < len(self.entries):
            self._recentre(len(self.entries))
        self.entries.append(entry)
        self._grow_down()
        self.schedule()
        row = entry.row
        assert row is not None
        return row

    def rows(self) -> list[MessageWidget]:
        """The messages built right now, oldest first."""
        return [row for entry in self.entries[self._lo:self._hi] if (row := entry.row)]

    def never_built(self) -> int:
        return self._fresh

    def row_width(self) -> int:
        # Before the first show, guess the usual case: a window wider than the column.
        column = self._column.width() if self._column.isVisible() else COLUMN_WIDTH
        return max(100, column - MARGINS[0] - MARGINS[2])

    def scroll_to_bottom(self) -> None:
        self._pinned = True
        self._anchor = None
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def schedule(self) -> None:
        """Build or release rows for the current view, a row per event-loop turn."""
        if not self._timer.isActive():
            self._timer.start()

    # Building and letting go ------------------------------------------------------

    def _maintain(self) -> None:
        if not self.isVisible() or self._column.width() <= 0:
            return
        if not self._step():
            return
        self._sync_layout()
        self._restore()
        self.schedule()

    def _step(self) -> bool:
        """One change towards rows covering the view and little else."""
        bar = self.verticalScrollBar()
        top, screen = bar.value(), self.viewport().height()
        bottom = top + screen
        rows = self.rows()
        if rows:
            first_y = self._y_of(rows[0])
            last_y = self._y_of(rows[-1]) + rows[-1].height()
        else:
            first_y = last_y = self._y_of(self._bottom)
        far = BUILT_SCREENS * screen
        if rows and self.pinned is None and (first_y > bottom + far or last_y < top - far):
            self._recentre(self._index_at(top))  # the view jumped into a spacer
            self._fill_down_to(bottom)
            return True
        # Letting go first: it is cheap, and it keeps the count of rows down.
        if len(rows) > 1 and rows[0] is not self.pinned \
                and self._y_of(rows[0]) + rows[0].height() < top - far:
            self._release(self._lo)
            self._lo += 1
            self._update_spacers()
            return True
        if len(rows) > 1 and rows[-1] is not self.pinned \
                and last_y - rows[-1].height() > bottom + far:
            self._hi -= 1
            self._release(self._hi)
            self._update_spacers()
            return True
        if self._lo > 0 and first_y > top - BUILD_AHEAD * screen:
            self._grow_up()
            return True
        if self._hi < len(self.entries) and last_y < bottom + BUILD_AHEAD * screen:
            self._grow_down()
            return True
        return False

    def _fill_down_to(self, bottom: int) -> None:
        """Build rows at once until they reach ``bottom``: no blank view after a jump."""
        while self._hi < len(self.entries):
            self._grow_down()
            self._sync_layout()
            row = self.entries[self._hi - 1].row
            if row is not None and self._y_of(row) + row.height() >= bottom:
                return

    def _grow_up(self) -> None:
        self._lo -= 1
        self._fresh = min(self._fresh, self._lo)
        self._make_row(self._lo, 0)
        self._update_spacers()

    def _grow_down(self) -> None:
        self._make_row(self._hi, self._hi - self._lo)
        self._hi += 1
        self._update_spacers()

    def _make_row(self, index: int, position: int) -> None:
        entry = self.entries[index]
        row = self._build(entry, self.row_width(), self._column)
        entry.row = row
        row.installEventFilter(self)  # to see the anchor move
        self._list.insertWidget(1 + position, row)  # after the top spacer
        row.show()

    def _release(self, index: int) -> None:
        entry = self.entries[index]
        row = entry.row
        if row is None:
            return
        entry.height = row.height()
        entry.row = None
        focus = QApplication.focusWidget()
        if focus is not None and row.isAncestorOf(focus):
            # Hiding the focused widget would move focus on, and the scroll area would
            # scroll the newly focused widget into view: the view would jump.
            focus.clearFocus()
        row.hide()
        self._list.removeWidget(row)
        row.deleteLater()

    def _drop_rows(self) -> None:
        for index in range(self._lo, self._hi):
            self._release(index)
        self._lo = self._hi

    def _recentre(self, index: int) -> None:
        """Let every row go and build again from ``index`` down."""
        self._anchor = None  # the spacers keep the view where it is
        self._drop_rows()
        self._lo = self._hi = index
        self._update_spacers()

    def _update_spacers(self) -> None:
        for spacer, entries in ((self._top, self.entries[self._fresh:self._lo]),
                                (self._bottom, self.entries[self._hi:])):
            height = sum(e.height for e in entries) + SPACING * (len(entries) - 1)
            spacer.setFixedHeight(max(height, 0))
            spacer.setVisible(bool(entries))

    def _index_at(self, y: int) -> int:
        """The message at height ``y`` of the content (built messages start at the top)."""
        position = MARGINS[1]
        for index in range(self._fresh, len(self.entries)):
            entry = self.entries[index]
            position += (entry.row.height() if entry.row else entry.height) + SPACING
            if position > y:
                return index
        return len(self.entries) - 1

    # Geometry -------------------------------------------------------------------

    def _find_anchor(self) -> tuple[MessageWidget, int] | None:
        top = self.verticalScrollBar().value()
        for row in self.rows():
            y = self._y_of(row)
            if y + row.height() > top:
                return row, y - top
        return None

    def _restore(self) -> None:
        """Put the view back: at the bottom, or with the anchor where it was."""
        bar = self.verticalScrollBar()
        if self._pinned:
            bar.setValue(bar.maximum())
            return
        if self._anchor is None or self._anchor[0] not in self.rows():
            return
        row, offset = self._anchor
        self._restoring = True  # keep the anchor even if the value is clamped for now
        try:
            bar.setValue(self._y_of(row) - offset)
        finally:
            self._restoring = False

    def _sync_layout(self) -> None:
        # Lay out now, so the view can be put back before anything is painted.
        self._list.activate()
        QApplication.sendEvent(self, QEvent(QEvent.Type.LayoutRequest))

    def _y_of(self, widget: QWidget) -> int:
        return widget.mapTo(self._content, QPoint(0, 0)).y()

    def _on_scrolled(self, value: int) -> None:
        if self._restoring:
            return
        self._pinned = value >= self.verticalScrollBar().maximum() - BOTTOM_SLACK
        self._anchor = None if self._pinned else self._find_anchor()
        self.schedule()

    def _on_range_changed(self, _minimum: int, maximum: int) -> None:
        if self._pinned:
            self.verticalScrollBar().setValue(maximum)
        else:
            # Rows may not have moved yet: put the view back once layout is done.
            QTimer.singleShot(0, self, self._restore)
        self.schedule()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Move and self._anchor is not None \
                and watched is self._anchor[0]:
            self._restore()
        return super().eventFilter(watched, event)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._pinned:
            QTimer.singleShot(0, self, self.scroll_to_bottom)
        self.schedule()
