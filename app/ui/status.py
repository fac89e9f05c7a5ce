"""The line under the composer: how full the context is and how fast the last reply came."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget

if TYPE_CHECKING:
    from app.core.backend import Placement
    from app.core.reply.replies import ReplyStats


class StatusLine(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("statusLine")
        self.text = QLabel(self)
        self.text.setObjectName("statusText")
        self.context_meter = QProgressBar(self)
        self.context_meter.setObjectName("contextMeter")
        self.context_meter.setAccessibleName("Context used")
        self.context_meter.setTextVisible(False)
        self.context_meter.setFixedSize(90, 6)
        self.context_label = QLabel(self)
        self.context_label.setObjectName("statusText")
        self.serving = QLabel(self)  # Fireside's local API, when it is on
        self.serving.setObjectName("servingLabel")
        self.serving.setAccessibleName("Local server")
        self.serving.setVisible(False)
        self.placement = QLabel(self)  # where the loaded model's layers are: "GPU 40/63"
        self.placement.setObjectName("placementLabel")
        self.placement.setAccessibleName("Where the model runs")
        self.speed = QLabel(self)
        self.speed.setObjectName("speedLabel")
        self.speed.setAccessibleName("Speed of the last reply")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 0, 6, 0)
        layout.setSpacing(8)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.serving)
        layout.addWidget(self.placement)
        layout.addWidget(self.context_meter)
        layout.addWidget(self.context_label)
        layout.addWidget(self.speed)
        self._n_ctx = 0
        self._used = 0
        self.set_context_size(0)

    @property
    def used_tokens(self) -> int:
        return self._used

    def set_message(self, text: str) -> None:
        self.text.setText(text)

    def set_serving(self, text: str) -> None:
        """What the local server is doing; empty: it is off."""
        self.serving.setText(text)
        self.serving.setVisible(bool(text))

    def set_placement(self, plan: Placement | None) -> None:
        """Where the loaded model's layers are; None: no local model."""
        self.placement.setText(plan.where if plan else "")
        self.placement.setToolTip(plan.summary() if plan else "")
        self.placement.setVisible(plan is not None)

    def set_context_size(self, n_ctx: int) -> None:
        """The loaded model's context, in tokens (0: no model)."""
        self._n_ctx = n_ctx
        self._show_context()

    def show_reply(self, stats: ReplyStats | None) -> None:
        """Context use and speed from a reply's stats; None clears them (new chat)."""
        self._used = stats.prompt_tokens + stats.tokens if stats else 0
        self.speed.setText(f"{stats.tokens_per_s:.1f} tok/s" if stats and stats.tokens_per_s
                           else "")
        self._show_context()

    def _show_context(self) -> None:
        n_ctx, used = self._n_ctx, self._used
        self.context_meter.setVisible(n_ctx > 0)
        self.context_meter.setRange(0, max(1, n_ctx))
        self.context_meter.setValue(min(used, n_ctx))
        text = f"{used:,} / {n_ctx:,} tokens" if n_ctx else ""
        self.context_label.setText(text)
        self.context_meter.setAccessibleDescription(text)
        self.context_meter.setToolTip(f"Context: {text}" if text else "")
