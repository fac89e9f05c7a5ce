"""The file dialogs of the composer's Attach menu: files, or a folder, to bring into the
conversation. Non-modal: a nested event loop would stall the window's async work."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QWidget


def choose_documents(parent: QWidget, folder: bool,
                     chosen: Callable[[list[Path]], None]) -> QFileDialog:
    """Open a file dialog for documents (or a folder); ``chosen`` gets what was picked.
    Any file may be picked: Fireside reads text whatever its name."""
    title = "Bring a folder into this conversation" if folder \
        else "Bring files into this conversation"
    chooser = QFileDialog(parent, title, str(Path.home()))
    chooser.setObjectName("documentChooser")
    if folder:
        chooser.setFileMode(QFileDialog.FileMode.Directory)
        chooser.setOption(QFileDialog.Option.ShowDirsOnly, True)
    else:
        chooser.setFileMode(QFileDialog.FileMode.ExistingFiles)
    chooser.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    chooser.filesSelected.connect(lambda files: chosen([Path(f) for f in files]))
    chooser.open()
    return chooser
