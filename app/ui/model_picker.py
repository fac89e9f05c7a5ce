"""The model picker: a combo box over the catalog's entries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QPersistentModelIndex,
    QPointF,
    QSize,
    Qt,
    Signal,
)
from PySide6.QtGui import QPainter, QPalette, QPen
from PySide6.QtWidgets import QComboBox, QSizePolicy, QStyledItemDelegate, QWidget

from app.core.options import LoadOptions

if TYPE_CHECKING:
    from PySide6.QtGui import QPaintEvent
    from PySide6.QtWidgets import QStyleOptionViewItem

    from app.core.llama.offload import Plan
    from app.core.models.catalog import ModelEntry

Index = QModelIndex | QPersistentModelIndex

PATH_ROLE = Qt.ItemDataRole.UserRole + 1
DETAILS_ROLE = Qt.ItemDataRole.UserRole + 2
SOURCE_ROLE = Qt.ItemDataRole.UserRole + 3  # where the model came from: "LM Studio"...


def details(entry: ModelEntry, options: LoadOptions | None = None,
            placement: Plan | None = None) -> str:
    """Size label, quantization, file size and the memory it will take once loaded at
    ``n_ctx`` (None: its default context), on the GPU and in RAM where ``placement``
    puts layers on a GPU — or why the model cannot be used."""
    if entry.error:
        return f"Cannot be used: {entry.error}"
    if entry.architecture == "remote":
        context = f" · {entry.context_length:,}-token context" if entry.context_length else ""
        return f"Runs on the server{context}"
    from app.core.llama import memory  # noqa: PLC0415 - reads headers: not before the first paint

    parts = [d for d in ("Base model" if entry.base_model else None, entry.size_label,
                         entry.quantization) if d]
    if entry.size_bytes:
        parts.append(memory.format_bytes(entry.size_bytes))
    options = options or LoadOptions()
    needed = memory.entry_estimate(entry, options.n_ctx, options.kv_cache)
    if placement is not None and placement.gpu_layers > 0:
        parts.append(placement.summary())
    elif needed is not None:
        parts.append(f"≈ {memory.format_bytes(needed.total)} in memory")
    return " · ".join(parts)


def source_of(entry: ModelEntry) -> str:
    from app.core.models.catalog import source_label  # noqa: PLC0415 - not before the first paint

    return source_label(entry.source)


class _EntryDelegate(QStyledItemDelegate):
    """Two lines per model in the open list: its name (and, on the right, where it came
    from), then its details, muted."""

    def initStyleOption(self, option: QStyleOptionViewItem, index: Index) -> None:
        super().initStyleOption(option, index)
        option.text = ""  # the style draws the row; paint() writes the two lines

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: Index) -> None:
        super().paint(painter, option, index)
        rect = option.rect.adjusted(12, 5, -12, -5)
        enabled = bool(option.state & option.state.State_Enabled)
        group = QPalette.ColorGroup.Normal if enabled else QPalette.ColorGroup.Disabled
        painter.save()
        painter.setPen(option.palette.color(group, QPalette.ColorRole.Text))
        painter.drawText(rect, Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft,
                         index.data(Qt.ItemDataRole.DisplayRole))
        painter.setPen(option.palette.color(QPalette.ColorGroup.Disabled,
                                            QPalette.ColorRole.Text))
        small = painter.font()
        small.setPointSizeF(small.pointSizeF() * 0.9)
        painter.setFont(small)
        painter.drawText(rect, Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignRight,
                         index.data(SOURCE_ROLE) or "")
        painter.drawText(rect, Qt.AlignmentFlag.AlignBottom | Qt.AlignmentFlag.AlignLeft,
                         index.data(DETAILS_ROLE))
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: Index) -> QSize:
        metrics = option.fontMetrics
        name = metrics.horizontalAdvance(index.data(Qt.ItemDataRole.DisplayRole) or "")
        source = metrics.horizontalAdvance(index.data(SOURCE_ROLE) or "")
        width = max(name + source + 24, metrics.horizontalAdvance(index.data(DETAILS_ROLE) or ""))
        return QSize(width + 24, 2 * metrics.height() + 12)


class ModelListModel(QAbstractListModel):
    """A thin adapter over a list of catalog entries; unusable ones are disabled."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._entries: list[ModelEntry] = []
        self._details: list[str] = []

    @property
    def entries(self) -> list[ModelEntry]:
        return list(self._entries)

    def set_entries(self, entries: Sequence[ModelEntry],
                    contexts: Mapping[Path, LoadOptions] | None = None,
                    placements: Mapping[Path, Plan | None] | None = None) -> None:
        """Show these models; ``contexts`` holds how each would load (its context and KV
        cache size its memory), ``placements`` where its layers would go."""
        self.beginResetModel()
        self._entries = list(entries)
        # Worked out once here, not at every paint: the estimate reads the file's header.
        self._details = [details(e, (contexts or {}).get(e.path),
                                 (placements or {}).get(e.path)) for e in self._entries]
        self.endResetModel()

    def row_of(self, path: Path) -> int:
        for row, entry in enumerate(self._entries):
            if path == entry.path or path in entry.shards:
                return row
        return -1

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008 - Qt's signature
        return 0 if parent.isValid() else len(self._entries)

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._entries):
            return None
        entry, about = self._entries[index.row()], self._details[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return entry.name
        if role == DETAILS_ROLE:
            return about
        if role == SOURCE_ROLE:
            return source_of(entry)
        if role == Qt.ItemDataRole.AccessibleTextRole:
            return f"{entry.name}, from {source_of(entry)}, {about}"
        if role == Qt.ItemDataRole.ToolTipRole:
            context = (f"\nContext: {entry.context_length:,} tokens"
                       if entry.context_length else "")
            return f"{entry.name}\n{about}{context}\nFrom {source_of(entry)}: {entry.path}"
        if role == PATH_ROLE:
            return str(entry.path)
        return None

    def flags(self, index: Index) -> Qt.ItemFlag:
        if not index.isValid() or not 0 <= index.row() < len(self._entries):
            return Qt.ItemFlag.NoItemFlags
        if self._entries[index.row()].error:
            return Qt.ItemFlag.NoItemFlags  # shown, but cannot be chosen
        return Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable


class ModelPicker(QComboBox):
    """Lists every model found; choosing one asks for it to be loaded."""

    model_chosen = Signal(object)
    """The user chose the model at this Path."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modelPicker")
        self.setAccessibleName("Model")
        self.setToolTip("Choose the model to chat with (Ctrl+M)")
        self.list_model = ModelListModel(self)
        self.setModel(self.list_model)
        self.setItemDelegate(_EntryDelegate(self))
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(26)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.setPlaceholderText("No model")
        self._current: Path | None = None
        self.activated.connect(self._on_activated)

    def paintEvent(self, event: QPaintEvent) -> None:
        super().paintEvent(event)
        # The stylesheet's flat box has no arrow of its own: draw a chevron.
        group = QPalette.ColorGroup.Active if self.isEnabled() else QPalette.ColorGroup.Disabled
        pen = QPen(self.palette().color(group, QPalette.ColorRole.Text), 1.6)
        pen.setCapStyle(Qt.PenCapStyle.RoundCap)
        pen.setJoinStyle(Qt.PenJoinStyle.RoundJoin)
        x, y = self.width() - 22.0, self.height() / 2 - 2.0
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(pen)
        painter.drawPolyline([QPointF(x, y), QPointF(x + 4.5, y + 4.5), QPointF(x + 9, y)])
        painter.end()

    def set_entries(self, entries: Sequence[ModelEntry],
                    contexts: Mapping[Path, LoadOptions] | None = None,
                    placements: Mapping[Path, Plan | None] | None = None) -> None:
        """Show the chat models of ``entries``: an embedding model is no chat's model."""
        entries = [e for e in entries if not e.embedding]
        model = self.list_model
        model.set_entries(entries, contexts, placements)
        metrics = self.fontMetrics()
        widest = max((max(metrics.horizontalAdvance(e.name) + metrics.horizontalAdvance(
            source_of(e)) + 24, metrics.horizontalAdvance(model.index(row).data(DETAILS_ROLE)))
            for row, e in enumerate(entries)), default=0)
        self.view().setMinimumWidth(widest + 48)
        self.set_current(self._current)

    def current_path(self) -> Path | None:
        """The model shown as current (the loaded one, or the one loading)."""
        return self._current

    def set_current(self, path: Path | None) -> None:
        """Show ``path`` as current without asking for a load."""
        self._current = path
        self.setCurrentIndex(-1 if path is None else self.list_model.row_of(path))

    def _on_activated(self, row: int) -> None:
        path = self.itemData(row, PATH_ROLE)
        if path is None:
            return
        chosen = Path(path)
        if chosen != self._current:
            self._current = chosen
            self.model_chosen.emit(chosen)
