"""Handing things to the desktop: folders to the file manager, links to the browser,
documents to the app that opens them."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices

from app.core import paths
from app.ui import notices

WEB_SCHEMES = ("http", "https", "mailto")


def open_folder(folder: Path) -> None:
    if not QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder))):
        notices.warning(f"No file manager could be opened. The folder is {folder}")


def open_models_folder() -> None:
    open_folder(paths.models_dir())


def open_link(url: QUrl) -> None:
    """Open a link from a reply; only web and mail links (model output is untrusted)."""
    if url.scheme().lower() not in WEB_SCHEMES:
        notices.warning(f"Fireside opens only web links, not {url.toDisplayString()}")
        return
    if not QDesktopServices.openUrl(url):
        notices.warning(f"No browser could be opened for {url.toDisplayString()}")


def open_file(path: Path) -> None:
    """Open a document in the app the desktop opens it with."""
    if not path.exists():
        notices.warning(f"{path} is no longer there: it was moved or deleted.")
    elif not QDesktopServices.openUrl(QUrl.fromLocalFile(str(path))):
        notices.warning(f"No app could be opened for {path.name}. The file is {path}")
