"""The sidebar's list: conversations newest first, under day headings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt, Signal
from PySide6.QtWidgets import QWidget

if TYPE_CHECKING:
    from app.core.conversations.store import Conversation

Index = QModelIndex | QPersistentModelIndex

ID_ROLE = Qt.ItemDataRole.UserRole + 1
HEADER_ROLE = Qt.ItemDataRole.UserRole + 2


def day_group(when: datetime, today: date) -> str:
    """The heading a conversation last active at ``when`` goes under."""
    day = when.date()
    if day >= today:
        return "Today"
    if day == today - timedelta(days=1):
        return "Yesterday"
    if day > today - timedelta(days=8):
        return "Previous 7 days"
    if day.year == today.year:
        return day.strftime("%B")
    return day.strftime("%B %Y")


@dataclass(frozen=True)
class _Heading:
    title: str


class ConversationListModel(QAbstractListModel):
    """A thin adapter over a list of conversations; headings are rows too, not selectable."""

    rename_requested = Signal(int, str)
    """The user typed a new title for this conversation."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._rows: list[Conversation | _Heading] = []

    def set_conversations(self, conversations: Sequence[Conversation],
                          today: date | None = None) -> None:
        """Show ``conversations`` (already newest first) grouped by day."""
        today = today or date.today()
        rows: list[Conversation | _Heading] = []
        heading = None
        for conversation in conversations:
            group = day_group(datetime.fromtimestamp(conversation.updated_at), today)
            if group != heading:
                heading = group
                rows.append(_Heading(group))
            rows.append(conversation)
        self.beginResetModel()
        self._rows = rows
        self.endResetModel()

    def conversation_ids(self) -> list[int]:
        return [row.id for row in self._rows if not isinstance(row, _Heading)]

    def headings(self) -> list[str]:
        return [row.title for row in self._rows if isinstance(row, _Heading)]

    def row_of(self, conversation_id: int) -> int:
        for row, item in enumerate(self._rows):
            if not isinstance(item, _Heading) and item.id == conversation_id:
                return row
        return -1

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's signature
        return 0 if parent.isValid() else len(self._rows)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        item = self._rows[index.row()]
        if isinstance(item, _Heading):
            if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.AccessibleTextRole):
                return item.title
            if role == HEADER_ROLE:
                return True
            return None
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole,
                    Qt.ItemDataRole.AccessibleTextRole):
            return item.title
        if role == Qt.ItemDataRole.ToolTipRole:
            return item.title
        if role == ID_ROLE:
            return item.id
        if role == HEADER_ROLE:
            return False
        return None

    def setData(self, index: Index, value: Any, role: int = Qt.ItemDataRole.EditRole) -> bool:
        if role != Qt.ItemDataRole.EditRole or not index.isValid():
            return False
        item = self._rows[index.row()]
        title = str(value).strip()
        if isinstance(item, _Heading) or not title or title == item.title:
            return False
        self.rename_requested.emit(item.id, title)
        return True

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return Qt.ItemFlag.NoItemFlags
        if isinstance(self._rows[index.row()], _Heading):
            return Qt.ItemFlag.NoItemFlags  # keyboard navigation passes over headings
        return (Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
                | Qt.ItemFlag.ItemIsEditable)
