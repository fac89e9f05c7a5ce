"""Where the user writes: a growing text box with Send, which turns into Stop, and
Attach, which brings files or a folder into the conversation."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFocusEvent, QKeyEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.ui import icons

MAX_LINES = 8
FOCUSED_FRAME = "#composerFrame { border-color: palette(highlight); }"


class Composer(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line; grows up to MAX_LINES lines."""

    submitted = Signal(str)
    """The user pressed Enter with some text."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("composer")
        self.setAccessibleName("Message")
        self.setAccessibleDescription("Enter sends, Shift+Enter starts a new line")
        self.setPlaceholderText("Message Fireside…  (Enter to send, Shift+Enter for a new line)")
        self.setTabChangesFocus(True)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().setDocumentMargin(2)
        self.document().documentLayout().documentSizeChanged.connect(self._fit_height)
        self._fit_height()

    def text(self) -> str:
        return self.toPlainText()

    def set_text(self, text: str) -> None:
        self.setPlainText(text)
        self.moveCursor(self.textCursor().MoveOperation.End)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")  # not the soft break Qt would insert
            elif self.text().strip():
                self.submitted.emit(self.text())
            event.accept()
            return
        super().keyPressEvent(event)

    def _fit_height(self) -> None:
        line = self.fontMetrics().lineSpacing()
        lines = max(1, min(MAX_LINES, int(self.document().size().height())))
        margins = self.contentsMargins()
        extra = margins.top() + margins.bottom() + 2 * int(self.document().documentMargin())
        self.setFixedHeight(lines * line + extra + 4)


class ComposerBar(QFrame):
    """The composer, its Attach and Send/Stop buttons and the note shown while editing."""

    send_requested = Signal(str)
    """The user sent this text (Enter or Send)."""
    stop_requested = Signal()
    """The user wants the streaming reply to stop."""
    edit_cancelled = Signal()
    """The user gave up editing the last message."""
    attach_files_requested = Signal()
    """The user wants to pick files to bring into the conversation."""
    attach_folder_requested = Signal()
    """The user wants to pick a folder to bring into the conversation."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("composerBar")
        self._streaming = False
        self._can_send = False
        self._editing = False

        self.edit_banner = QLabel("Editing your last message — Esc cancels", self)
        self.edit_banner.setObjectName("editBanner")
        self.edit_banner.hide()

        self.frame = QFrame(self)
        self.frame.setObjectName("composerFrame")
        self.composer = Composer(self.frame)
        self.composer.submitted.connect(self._on_composer_submitted)
        self.composer.installEventFilter(self)
        self.send_button = QPushButton("Send", self.frame)
        self.send_button.setObjectName("sendButton")
        self.send_button.setAccessibleName("Send message")
        self.send_button.setToolTip("Send (Enter)")
        self.send_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.send_button.clicked.connect(self._on_send_clicked)
        self.stop_button = QPushButton("Stop", self.frame)
        self.stop_button.setObjectName("stopButton")
        self.stop_button.setAccessibleName("Stop the reply")
        self.stop_button.setToolTip("Stop (Esc)")
        self.stop_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.stop_button.clicked.connect(self.stop_requested)
        self.stop_button.hide()
        # This conversation's switch for the tools of the servers added in Settings.
        self.tools_button = QToolButton(self.frame)
        self.tools_button.setObjectName("toolsToggle")
        self.tools_button.setText("Tools")
        self.tools_button.setCheckable(True)
        self.tools_button.setAutoRaise(True)
        self.tools_button.setAccessibleName("Tools in this conversation")
        self.tools_button.setToolTip("Let the model call the tools of the servers added in "
                                     "Settings → Tools; each call is asked first")
        self.tools_button.hide()
        self.attach_button = self._attach_button()

        row = QHBoxLayout(self.frame)
        row.setContentsMargins(6, 8, 8, 8)
        row.setSpacing(6)
        row.addWidget(self.attach_button, 0, Qt.AlignmentFlag.AlignBottom)
        row.addWidget(self.composer, 1)
        row.addWidget(self.tools_button, 0, Qt.AlignmentFlag.AlignBottom)
        row.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        row.addWidget(self.stop_button, 0, Qt.AlignmentFlag.AlignBottom)

        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(4)
        column.addWidget(self.edit_banner)
        column.addWidget(self.frame)
        self.composer.textChanged.connect(self._update_buttons)
        self._update_buttons()

    def _attach_button(self) -> QToolButton:
        button = QToolButton(self.frame)
        button.setObjectName("attachButton")
        button.setAccessibleName("Attach documents")
        button.setToolTip("Bring files or a folder into this conversation (or drop them "
                          "on the chat)")
        button.setIconSize(QSize(18, 18))
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu = QMenu(button)
        menu.setObjectName("attachMenu")
        self.attach_files_action = menu.addAction("Files…")
        self.attach_files_action.setObjectName("attachFilesAction")
        self.attach_files_action.triggered.connect(self.attach_files_requested)
        self.attach_folder_action = menu.addAction("Folder…")
        self.attach_folder_action.setObjectName("attachFolderAction")
        self.attach_folder_action.triggered.connect(self.attach_folder_requested)
        button.setMenu(menu)
        button.setEnabled(False)  # until the chat is ready to take documents
        return button

    @property
    def editing(self) -> bool:
        return self._editing

    def set_can_attach(self, can_attach: bool) -> None:
        self.attach_button.setEnabled(can_attach)

    def apply_icons(self, color: QColor) -> None:
        self.attach_button.setIcon(icons.glyph("paperclip", color))

    def set_streaming(self, streaming: bool) -> None:
        """While a reply streams, Send becomes Stop."""
        self._streaming = streaming
        self.send_button.setVisible(not streaming)
        self.stop_button.setVisible(streaming)
        self._update_buttons()

    def set_can_send(self, can_send: bool, reason: str = "") -> None:
        """Whether a model is ready to answer; ``reason`` says why not."""
        self._can_send = can_send
        self.send_button.setToolTip("Send (Enter)" if can_send else reason)
        self._update_buttons()

    def begin_edit(self, text: str) -> None:
        self._editing = True
        self.edit_banner.show()
        self.composer.set_text(text)
        self.composer.setFocus()

    def cancel_edit(self) -> None:
        if self._editing:
            self._editing = False
            self.edit_banner.hide()
            self.composer.clear()
            self.edit_cancelled.emit()

    def finish_edit(self) -> None:
        self._editing = False
        self.edit_banner.hide()

    def focus(self) -> None:
        """Put the focus in the text box (and show it before the focus event comes)."""
        self.composer.setFocus()
        self._show_focus(True)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.composer and isinstance(event, QFocusEvent):
            self._show_focus(event.type() == QEvent.Type.FocusIn)
        return super().eventFilter(watched, event)

    def _show_focus(self, focused: bool) -> None:
        # The rounded frame, not the bare text box, shows where the focus is. A sheet of
        # its own re-styles just the frame (no style object needed: that is not free).
        sheet = FOCUSED_FRAME if focused else ""
        if self.frame.styleSheet() != sheet:
            self.frame.setStyleSheet(sheet)

    def _update_buttons(self) -> None:
        self.send_button.setEnabled(self._can_send and bool(self.composer.text().strip()))

    def _on_send_clicked(self) -> None:
        self._on_composer_submitted(self.composer.text())

    def _on_composer_submitted(self, text: str) -> None:
        if self._streaming or not self._can_send or not text.strip():
            return
        self.send_requested.emit(text)
