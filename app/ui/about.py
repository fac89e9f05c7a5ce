"""About Fireside: the version, what the app is, and the licenses of what ships with it.

The license texts live in ``resources/licenses`` (inside the bundle in the installers),
so the dialog works offline like the rest of the app.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontDatabase
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import __version__
from app.ui import icons

DESCRIPTION = ("A private desktop chat app for local language models in GGUF format. "
               "Your conversations stay on this computer: no account, no telemetry, "
               "no downloads while it runs.")


@dataclass(frozen=True)
class Component:
    name: str
    role: str
    license: str
    files: tuple[str, ...]  # in resources/licenses, shown one after the other


COMPONENTS = (
    Component("Fireside", "this app", "MIT", ("Fireside-MIT.txt",)),
    Component("SmolLM2-135M-Instruct", "the default model, by Hugging Face", "Apache-2.0",
              ("SmolLM2-Apache-2.0.txt",)),
    Component("Gemma 3 270M", "a second model in source installs, by Google",
              "Gemma Terms of Use", ("Gemma-Terms-of-Use.txt",)),
    Component("all-MiniLM-L6-v2", "finds passages in your documents, by the "
              "sentence-transformers authors", "Apache-2.0",
              ("all-MiniLM-L6-v2-Apache-2.0.txt",)),
    Component("llama.cpp", "runs the models", "MIT", ("llama.cpp-MIT.txt",)),
    Component("llama-cpp-python", "Python bindings for llama.cpp", "MIT",
              ("llama-cpp-python-MIT.txt",)),
    Component("Qt 6 and PySide6", "the window", "LGPL-3.0",
              ("Qt-PySide6-LGPL-3.0.txt", "GPL-3.0.txt")),
    Component("qasync", "asyncio on Qt's event loop", "BSD-2-Clause",
              ("qasync-BSD-2-Clause.txt",)),
    Component("platformdirs", "where data and settings live", "MIT",
              ("platformdirs-MIT.txt",)),
    Component("Jinja2 and MarkupSafe", "chat templates", "BSD-3-Clause",
              ("Jinja2-BSD-3-Clause.txt", "MarkupSafe-BSD-3-Clause.txt")),
    Component("markdown-it-py, mdit-py-plugins, mdurl", "Markdown in replies", "MIT",
              ("markdown-it-py-MIT.txt", "mdit-py-plugins-MIT.txt", "mdurl-MIT.txt")),
    Component("Pygments", "code highlighting", "BSD-2-Clause", ("Pygments-BSD-2-Clause.txt",)),
    Component("psutil", "memory estimates", "BSD-3-Clause", ("psutil-BSD-3-Clause.txt",)),
    Component("NumPy", "used by llama-cpp-python", "BSD-3-Clause",
              ("NumPy-BSD-3-Clause.txt",)),
    Component("PDFium and pypdfium2", "reads PDF files", "BSD-3-Clause, Apache-2.0",
              ("PDFium-BSD-3-Clause.txt", "pypdfium2-Apache-2.0.txt")),
    Component("python-docx and lxml", "reads Word files", "MIT, BSD-3-Clause",
              ("python-docx-MIT.txt", "lxml-BSD-3-Clause.txt")),
    Component("Python", "the interpreter inside the installers", "PSF-2.0",
              ("Python-PSF-2.0.txt",)),
)


def licenses_dir() -> Path:
    return icons.resources_dir() / "licenses"


def license_text(component: Component) -> str:
    """The component's license texts, or a sentence saying which file is missing."""
    parts = []
    for name in component.files:
        path = licenses_dir() / name
        try:
            parts.append(path.read_text(encoding="utf-8"))
        except OSError:
            parts.append(f"The license text {name} is missing from this installation "
                         f"(expected in {path.parent}).")
    return "\n\n".join(part.strip() for part in parts) + "\n"


class AboutDialog(QDialog):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("aboutDialog")
        self.setWindowTitle("About Fireside")
        self.setAccessibleName("About Fireside")
        self.setModal(False)
        self.resize(940, 600)

        header = self._build_header()
        description = QLabel(DESCRIPTION, self)
        description.setObjectName("aboutDescription")
        description.setWordWrap(True)
        split = self._build_licenses()
        self.show_component(0)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(header)
        layout.addWidget(description)
        layout.addWidget(QLabel("Fireside is built on these, under their own licenses:", self))
        layout.addWidget(split, 1)
        layout.addWidget(buttons)

    def _build_header(self) -> QHBoxLayout:
        """The logo beside the app's name and version."""
        logo = QLabel(self)
        logo.setPixmap(icons.app_icon().pixmap(64, 64))
        title = QLabel("Fireside", self)
        title.setObjectName("aboutTitle")
        font = title.font()
        font.setPointSizeF(font.pointSizeF() * 1.8)
        font.setWeight(QFont.Weight.DemiBold)
        title.setFont(font)
        self.version_label = QLabel(f"Version {__version__}", self)
        self.version_label.setObjectName("aboutVersion")
        self.version_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        heading = QVBoxLayout()
        heading.addWidget(title)
        heading.addWidget(self.version_label)
        header = QHBoxLayout()
        header.addWidget(logo)
        header.addLayout(heading, 1)
        return header

    def _build_licenses(self) -> QSplitter:
        """The components on the left, the license of the one selected on the right."""
        self.components = QTreeWidget(self)
        self.components.setObjectName("aboutComponents")
        self.components.setAccessibleName("Components and their licenses")
        self.components.setHeaderLabels(["Component", "License"])
        self.components.setRootIsDecorated(False)
        for component in COMPONENTS:
            item = QTreeWidgetItem([component.name, component.license])
            item.setToolTip(0, component.role)
            self.components.addTopLevelItem(item)
        self.components.resizeColumnToContents(0)
        self.components.resizeColumnToContents(1)
        self.license_view = QPlainTextEdit(self)
        self.license_view.setObjectName("aboutLicenseText")
        self.license_view.setAccessibleName("License text")
        self.license_view.setReadOnly(True)
        # License texts are laid out in fixed columns: wrapping would scramble them.
        self.license_view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.license_view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        split = QSplitter(Qt.Orientation.Horizontal, self)
        split.addWidget(self.components)
        split.addWidget(self.license_view)
        split.setStretchFactor(1, 1)
        split.setSizes([380, 560])
        self.components.currentItemChanged.connect(self._on_components_current_item_changed)
        return split

    def show_component(self, index: int) -> None:
        """Select the component at ``index`` in COMPONENTS and show its license."""
        item = self.components.topLevelItem(index)
        if item is not None:
            self.components.setCurrentItem(item)

    def _on_components_current_item_changed(self, current: QTreeWidgetItem | None,
                                            _previous: QTreeWidgetItem | None) -> None:
        index = self.components.indexOfTopLevelItem(current) if current else -1
        if 0 <= index < len(COMPONENTS):
            component = COMPONENTS[index]
            self.license_view.setPlainText(
                f"{component.name}: {component.role}\nLicense: {component.license}\n\n"
                + license_text(component))


def show_about(parent: QWidget) -> AboutDialog:
    """Open the About dialog beside ``parent``, or bring the open one to the front."""
    dialog = parent.findChild(AboutDialog, "aboutDialog")
    if dialog is None:
        dialog = AboutDialog(parent)
    dialog.show()
    dialog.raise_()
    dialog.activateWindow()
    return dialog
