"""Light and dark looks: a full palette and a small stylesheet over the Fusion style.

Fusion looks the same everywhere and honours the palette; the application asks for it
when it is created (``STYLE_ARGS``), which costs nothing, where switching styles later
would cost a noticeable share of the startup.

Widgets take their colours from the palette (so the transcript can too); the
stylesheet only shapes what the palette cannot: the sidebar, rounded inputs, the
accent button and the message bar.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

THEMES = ("system", "light", "dark")
STYLE_ARGS = ["-style", "Fusion"]  # QApplication arguments


@dataclass(frozen=True)
class Colors:
    window: str  # the chat area
    sidebar: str
    surface: str  # inputs and the composer
    raised: str  # buttons, user bubbles
    border: str
    text: str
    muted: str
    accent: str
    accent_hover: str
    accent_text: str
    selection: str
    hover: str
    info: str
    warning: str
    warning_text: str  # a warning said in a line of text, not on a bar
    error: str
    link: str
    dark: bool


LIGHT = Colors(
    window="#ffffff", sidebar="#f6f5f3", surface="#ffffff", raised="#f1efec",
    border="#e2dfda", text="#1f1d1a", muted="#77716a", accent="#e2571c",
    accent_hover="#c94a14", accent_text="#ffffff", selection="#e9e5df", hover="#efece8",
    info="#e8f0fb", warning="#fdf3dc", warning_text="#9a6700", error="#fce8e6",
    link="#c2410c", dark=False)

DARK = Colors(
    window="#1c1c1e", sidebar="#151517", surface="#26262a", raised="#2c2c31",
    border="#34343a", text="#ececee", muted="#9a9aa3", accent="#f0712f",
    accent_hover="#ff8547", accent_text="#ffffff", selection="#2e2e34", hover="#242428",
    info="#1d2a3d", warning="#3a2f17", warning_text="#e3b341", error="#3d1e1e",
    link="#fb923c", dark=True)


def system_is_dark() -> bool:
    return QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark


def colors_for(theme: str) -> Colors:
    if theme == "dark":
        return DARK
    if theme == "light":
        return LIGHT
    return DARK if system_is_dark() else LIGHT


def palette(c: Colors) -> QPalette:
    p = QPalette()
    role = QPalette.ColorRole
    for r, value in (
        (role.Window, c.window), (role.WindowText, c.text), (role.Base, c.window),
        (role.AlternateBase, c.raised), (role.Text, c.text), (role.Button, c.raised),
        (role.ButtonText, c.text), (role.BrightText, "#ffffff"), (role.Highlight, c.accent),
        (role.HighlightedText, c.accent_text), (role.ToolTipBase, c.surface),
        (role.ToolTipText, c.text), (role.PlaceholderText, c.muted), (role.Link, c.link),
        (role.LinkVisited, c.link), (role.Light, c.surface), (role.Midlight, c.raised),
        (role.Mid, c.border), (role.Dark, c.border), (role.Shadow, "#000000"),
        (role.Accent, c.accent),
    ):
        p.setColor(r, QColor(value))
    disabled = QPalette.ColorGroup.Disabled
    for r in (role.WindowText, role.Text, role.ButtonText):
        p.setColor(disabled, r, QColor(c.muted))
    return p


def stylesheet(c: Colors) -> str:
    return f"""
QToolTip {{ color: {c.text}; background: {c.surface}; border: 1px solid {c.border};
    padding: 4px 6px; }}
#sidebar {{ background: {c.sidebar}; border-right: 1px solid {c.border}; }}
#brandName {{ font-weight: 700; font-size: 15px; }}
#newChatButton {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 8px;
    padding: 7px 12px; text-align: left; font-weight: 600; }}
#newChatButton:hover {{ background: {c.hover}; }}
#searchBox {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 8px;
    padding: 6px 8px; }}
#searchBox:focus {{ border-color: {c.accent}; }}
#conversationList {{ background: transparent; border: none; outline: 0; }}
#conversationList::item {{ padding: 7px 8px; margin: 1px 0; border-radius: 7px;
    color: {c.text}; }}
#conversationList::item:hover {{ background: {c.hover}; }}
#conversationList::item:selected {{ background: {c.selection}; color: {c.text}; }}
#topBar {{ background: {c.window}; border-bottom: 1px solid {c.border}; }}
#modelPicker {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 8px;
    padding: 5px 10px; min-height: 20px; }}
#modelPicker:hover {{ border-color: {c.muted}; }}
#modelPicker {{ padding-right: 30px; }}
#modelPicker::drop-down {{ border: none; width: 28px; }}
#modelPicker::down-arrow {{ image: none; }}
#modelPicker QAbstractItemView {{ background: {c.surface}; border: 1px solid {c.border};
    selection-background-color: {c.selection}; selection-color: {c.text}; padding: 4px; }}
QToolButton#settingsButton, QToolButton#modelsFolderButton, QToolButton#messageClose {{
    border: none; border-radius: 8px; padding: 6px; }}
QToolButton#settingsButton:hover, QToolButton#modelsFolderButton:hover,
QToolButton#messageClose:hover {{ background: {c.hover}; }}
#loadProgress, #contextMeter, #documentsProgress {{ background: {c.raised}; border: none;
    border-radius: 3px; }}
#loadProgress::chunk, #contextMeter::chunk, #documentsProgress::chunk {{
    background: {c.accent}; border-radius: 3px; }}
#composerFrame {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 14px; }}
#composer {{ background: transparent; border: none; }}
#sendButton, #stopButton {{ background: {c.accent}; color: {c.accent_text}; border: none;
    border-radius: 10px; padding: 7px 16px; font-weight: 600; }}
#sendButton:hover, #stopButton:hover {{ background: {c.accent_hover}; }}
#sendButton:disabled {{ background: {c.raised}; color: {c.muted}; }}
#stopButton {{ background: {c.text}; color: {c.window}; }}
#stopButton:hover {{ background: {c.muted}; }}
#editBanner, #statusText, #speedLabel, #sidebarHint {{ color: {c.muted}; }}
#messageBar {{ border-radius: 10px; border: 1px solid {c.border}; background: {c.info}; }}
#messageBar[level="warning"] {{ background: {c.warning}; }}
#messageBar[level="error"] {{ background: {c.error}; }}
#messageAction {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 7px;
    padding: 4px 12px; font-weight: 600; }}
#messageAction:hover {{ background: {c.hover}; }}
QPushButton#cancelLoadButton, QPushButton#cancelReadingButton, #settingsDialog QPushButton,
#sourceView QPushButton {{ background: {c.surface}; border: 1px solid {c.border};
    border-radius: 7px; padding: 5px 12px; }}
QPushButton#cancelLoadButton:hover, QPushButton#cancelReadingButton:hover,
#settingsDialog QPushButton:hover, #sourceView QPushButton:hover {{ background: {c.hover}; }}
QPushButton#cancelReadingButton {{ padding: 2px 10px; }}
#settingsDialog QLineEdit, #settingsDialog QPlainTextEdit, #settingsDialog QListWidget {{
    background: {c.surface}; border: 1px solid {c.border}; border-radius: 6px; padding: 3px; }}
#settingsNote {{ color: {c.muted}; }}
#chatPlaceholder {{ color: {c.muted}; font-size: 15px; }}
QToolButton#attachButton {{ border: none; border-radius: 8px; padding: 5px; }}
QToolButton#attachButton:hover {{ background: {c.hover}; }}
QToolButton#attachButton::menu-indicator {{ image: none; width: 0; }}
#documentChip {{ background: {c.raised}; border: 1px solid {c.border}; border-radius: 12px; }}
QToolButton#chipClose {{ border: none; border-radius: 9px; padding: 2px; }}
QToolButton#chipClose:hover {{ background: {c.hover}; }}
QToolButton#documentProblems {{ color: {c.warning_text}; border: none; border-radius: 6px;
    padding: 2px 4px; }}
QToolButton#documentProblems:hover, QToolButton#documentProblems:checked {{
    background: {c.hover}; }}
#documentProblemList, #sourcePath {{ color: {c.muted}; }}
#documentProblemList {{ padding-left: 6px; }}
#dropHighlight {{ border: 2px dashed {c.accent}; border-radius: 14px;
    background: {_translucent(c.window, 0.88)}; }}
#dropHint {{ color: {c.text}; font-size: 15px; font-weight: 600; background: transparent; }}
#sourcePassage {{ background: {c.surface}; border: 1px solid {c.border}; border-radius: 8px;
    padding: 6px; }}
"""


def _translucent(color: str, alpha: float) -> str:
    value = QColor(color)
    return f"rgba({value.red()}, {value.green()}, {value.blue()}, {round(alpha * 255)})"


def apply(app: QApplication, theme: str) -> Colors:
    """Give the whole application the look for ``theme`` ("system", "light" or "dark")."""
    colors = colors_for(theme)
    app.setPalette(palette(colors))
    app.setStyleSheet(stylesheet(colors))
    return colors
