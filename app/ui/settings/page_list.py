"""Pages beside a list of their names, as desktop settings show them: choosing a name,
with the mouse or the arrow keys, shows its page. The list holds as many pages as come,
where tabs would run out of width; a page taller than the window scrolls."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QScrollArea,
    QSizePolicy,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

NAME_PADDING = 32  # beside the longest name, so that it never reads as cut off
ROW_PADDING = 10  # above and below a name: rows easy to hit, and to tell apart


class PageList(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.names = _NameList(self)
        self.names.setObjectName("settingsPages")
        self.names.setAccessibleName("Settings pages")
        self.stack = QStackedWidget(self)
        self.stack.setObjectName("settingsStack")
        self.names.currentRowChanged.connect(self.stack.setCurrentIndex)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.names)
        row.addWidget(self.stack, 1)

    def add_page(self, name: str, page: QWidget) -> None:
        """Put ``page`` last, under ``name``; the first page added shows first."""
        self.stack.addWidget(_PageScroll(page, self.stack))
        item = QListWidgetItem(name)
        item.setSizeHint(QSize(0, self.names.fontMetrics().height() + ROW_PADDING))
        self.names.addItem(item)
        if self.names.currentRow() < 0:
            self.names.setCurrentRow(0)

    def pages(self) -> list[tuple[str, QWidget]]:
        """Each page with its name, in the order of the list."""
        return [(self.names.item(row).text(), self.page_at(row))
                for row in range(self.names.count())]

    def page_at(self, row: int) -> QWidget:
        scroll = self.stack.widget(row)
        assert isinstance(scroll, _PageScroll)
        return scroll.page

    def show_page(self, page: QWidget) -> None:
        """Choose ``page`` in the list, which shows it."""
        rows = [row for row, (_name, shown) in enumerate(self.pages()) if shown is page]
        if not rows:
            raise ValueError(f"not a page here: {page.objectName() or page!r}")
        self.names.setCurrentRow(rows[0])

    def current_page(self) -> QWidget:
        return self.page_at(self.stack.currentIndex())


class _NameList(QListWidget):
    """As wide as the longest name and no wider: the pages take the rest."""

    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Expanding)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSpacing(2)

    def sizeHint(self) -> QSize:
        metrics = self.fontMetrics()
        longest = max((metrics.horizontalAdvance(self.item(row).text())
                       for row in range(self.count())), default=0)
        width = longest + 2 * (self.frameWidth() + self.spacing()) + NAME_PADDING
        return QSize(width, super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:
        return QSize(self.sizeHint().width(), super().minimumSizeHint().height())


class _PageScroll(QScrollArea):
    """Holds a page: scrolls it up and down where it is taller than the dialog, and is
    never narrower than the page needs. A page keeps its rows together at the top unless
    it expands (its vertical size policy says so): then it fills the height."""

    def __init__(self, page: QWidget, parent: QWidget) -> None:
        super().__init__(parent)
        self.page = page
        self.setObjectName("settingsPageScroll")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # Tab goes from the list to the page
        holder = QWidget(self)
        column = QVBoxLayout(holder)
        column.setContentsMargins(0, 0, 0, 0)
        fills = bool(page.sizePolicy().expandingDirections() & Qt.Orientation.Vertical)
        column.addWidget(page, 1 if fills else 0)
        if not fills:
            column.addStretch(1)
        self.setWidget(holder)

    def minimumSizeHint(self) -> QSize:
        bar = self.verticalScrollBar().sizeHint().width()
        return QSize(self.page.minimumSizeHint().width() + bar,
                     super().minimumSizeHint().height())
