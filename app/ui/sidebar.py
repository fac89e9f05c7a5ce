"""The sidebar: New chat, search, and the conversations grouped by day."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QPoint, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QIcon, QKeySequence, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QMenu,
    QPushButton,
    QStyledItemDelegate,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.conversation_model import HEADER_ROLE, ID_ROLE, ConversationListModel

if TYPE_CHECKING:
    from PySide6.QtGui import QPainter
    from PySide6.QtWidgets import QStyleOptionViewItem

    from app.core.conversations.store import Conversation

SEARCH_DELAY_MS = 150


class _Delegate(QStyledItemDelegate):
    """Day headings as small muted captions; conversations as the style draws them."""

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        if not index.data(HEADER_ROLE):
            super().paint(painter, option, index)
            return
        painter.save()
        font = option.font
        font.setPointSizeF(max(7.0, font.pointSizeF() * 0.85))
        font.setWeight(font.Weight.DemiBold)
        painter.setFont(font)
        painter.setPen(option.palette.color(QPalette.ColorGroup.Disabled,
                                            QPalette.ColorRole.Text))
        rect = option.rect.adjusted(8, 0, -8, -2)
        painter.drawText(rect, Qt.AlignmentFlag.AlignBottom | Qt.AlignmentFlag.AlignLeft,
                         index.data())
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem,
                 index: QModelIndex | QPersistentModelIndex) -> QSize:
        size = super().sizeHint(option, index)
        if index.data(HEADER_ROLE):
            space = 8 if index.row() == 0 else 18  # headings after the first need air
            return QSize(size.width(), option.fontMetrics.height() + space)
        return size


class Sidebar(QFrame):
    new_chat_requested = Signal()
    """The user wants a new, empty chat."""
    conversation_chosen = Signal(int)
    """The user opened this conversation."""
    delete_requested = Signal(int)
    """The user wants this conversation deleted."""
    search_changed = Signal(str)
    """The search text settled on this (empty: show everything)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("sidebar")
        self.setAccessibleName("Conversations")

        self.new_chat_button = QPushButton("New chat", self)
        self.new_chat_button.setObjectName("newChatButton")
        self.new_chat_button.setAccessibleName("New chat")
        self.new_chat_button.setToolTip("New chat (Ctrl+N)")
        self.new_chat_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.new_chat_button.clicked.connect(self.new_chat_requested)
        self._build_search()
        self._build_list()
        brand = self._build_brand()

        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 14, 10, 10)
        layout.setSpacing(8)
        layout.addLayout(brand)
        layout.addWidget(self.new_chat_button)
        layout.addWidget(self.search_box)
        layout.addSpacing(2)
        layout.addWidget(self.list, 1)
        self._quiet = False  # set while the list changes under program control
        self._current_id: int | None = None

    def _build_search(self) -> None:
        """The search box, which tells its text once the typing settles."""
        self.search_box = QLineEdit(self)
        self.search_box.setObjectName("searchBox")
        self.search_box.setAccessibleName("Search conversations")
        self.search_box.setPlaceholderText("Search  (Ctrl+K)")
        self.search_box.setClearButtonEnabled(True)
        self.search_action = self.search_box.addAction(
            QIcon(), QLineEdit.ActionPosition.LeadingPosition)
        self.search_action.setText("Search")
        for button in self.search_box.findChildren(QToolButton):
            # Qt's own buttons in the box (the search icon, Clear) come unnamed.
            action = button.defaultAction()
            name = action.text() if action is not None and action.text() else "Clear search"
            button.setAccessibleName(name)
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(SEARCH_DELAY_MS)
        self._search_timer.timeout.connect(self._on_search_timer_timeout)
        self.search_box.textChanged.connect(self._search_timer.start)

    def _build_list(self) -> None:
        """The conversations under their days, renamed in place, with a context menu."""
        self.model = ConversationListModel(self)
        self.list = QListView(self)
        self.list.setObjectName("conversationList")
        self.list.setAccessibleName("Conversation list")
        self.list.setModel(self.model)
        self.list.setItemDelegate(_Delegate(self.list))
        self.list.setUniformItemSizes(False)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.list.setEditTriggers(QAbstractItemView.EditTrigger.DoubleClicked
                                  | QAbstractItemView.EditTrigger.EditKeyPressed)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._on_context_menu_requested)
        self.list.selectionModel().currentChanged.connect(self._on_current_changed)

    def _build_brand(self) -> QHBoxLayout:
        """The app's logo and name, at the top."""
        self._logo = QLabel(self)
        self._logo.setFixedSize(22, 22)
        brand_name = QLabel("Fireside", self)
        brand_name.setObjectName("brandName")
        brand = QHBoxLayout()
        brand.setContentsMargins(4, 0, 0, 4)
        brand.setSpacing(8)
        brand.addWidget(self._logo)
        brand.addWidget(brand_name, 1)
        return brand

    def add_actions(self) -> None:
        """Keyboard actions of the list (added after the first paint, like the window's)."""
        delete = QAction("Delete", self.list)
        delete.setShortcut(QKeySequence(QKeySequence.StandardKey.Delete))
        delete.setShortcutContext(Qt.ShortcutContext.WidgetShortcut)
        delete.triggered.connect(self._on_delete_triggered)
        self.list.addAction(delete)

    def set_logo(self, icon: QIcon) -> None:
        self._logo.setPixmap(icon.pixmap(22, 22))

    def set_conversations(self, conversations: Sequence[Conversation],
                          current_id: int | None) -> None:
        self._quiet = True
        try:
            self.model.set_conversations(conversations)
            self._select(current_id)
        finally:
            self._quiet = False

    def set_current(self, conversation_id: int | None) -> None:
        """Mark the open conversation without opening it again."""
        self._quiet = True
        try:
            self._select(conversation_id)
        finally:
            self._quiet = False

    def search_text(self) -> str:
        return self.search_box.text()

    def focus_search(self) -> None:
        self.search_box.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.search_box.selectAll()

    def _select(self, conversation_id: int | None) -> None:
        self._current_id = conversation_id
        row = -1 if conversation_id is None else self.model.row_of(conversation_id)
        if row < 0:
            self.list.clearSelection()
            self.list.setCurrentIndex(QModelIndex())
            return
        index = self.model.index(row)
        self.list.setCurrentIndex(index)
        self.list.scrollTo(index)

    def _on_current_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        if self._quiet or not current.isValid():
            return
        conversation_id = current.data(ID_ROLE)
        if conversation_id is not None and conversation_id != self._current_id:
            self._current_id = conversation_id
            self.conversation_chosen.emit(conversation_id)

    def _rename(self, conversation_id: int) -> None:
        row = self.model.row_of(conversation_id)
        if row >= 0:
            self.list.edit(self.model.index(row))

    def _on_search_timer_timeout(self) -> None:
        self.search_changed.emit(self.search_box.text())

    def _on_delete_triggered(self) -> None:
        conversation_id = self.list.currentIndex().data(ID_ROLE)
        if conversation_id is not None:
            self.delete_requested.emit(conversation_id)

    def _on_context_menu_requested(self, pos: QPoint) -> None:
        index = self.list.indexAt(pos)
        conversation_id = index.data(ID_ROLE) if index.isValid() else None
        if conversation_id is None:
            return
        menu = QMenu(self)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        # By id, not by row: the list may be refreshed while the menu is open.
        menu.addAction("Rename", lambda: self._rename(conversation_id))
        menu.addAction("Delete", lambda: self.delete_requested.emit(conversation_id))
        menu.popup(self.list.viewport().mapToGlobal(pos))
