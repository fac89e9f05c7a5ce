"""Icons: the app's flame and the few line glyphs the window uses.

The flame is drawn in ``resources/fireside.svg``; ``python -m app.ui.icons`` renders
it to the PNG sizes the window uses. Glyphs are drawn from SVG text in the theme's
text colour, so they follow light and dark.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer

SIZES = (16, 24, 32, 48, 64, 128, 256, 512)

_GLYPHS = {
    "plus": '<path d="M12 5v14M5 12h14"/>',
    "folder": '<path d="M3 7.5A2.5 2.5 0 0 1 5.5 5H9l2 2.2h7.5A2.5 2.5 0 0 1 21 9.7v7.8'
              'a2.5 2.5 0 0 1-2.5 2.5h-13A2.5 2.5 0 0 1 3 17.5z"/>',
    "settings": '<path d="M4 7h9M17 7h3M4 17h3M11 17h9"/>'
                '<circle cx="15" cy="7" r="2.2"/><circle cx="9" cy="17" r="2.2"/>',
    "close": '<path d="M6.5 6.5l11 11M17.5 6.5l-11 11"/>',
    "search": '<circle cx="11" cy="11" r="6.5"/><path d="M16 16l4.5 4.5"/>',
    "download": '<path d="M12 4v11M7.5 10.5L12 15l4.5-4.5M5 19.5h14"/>',
    "paperclip": '<path d="M20.5 11.5l-8.3 8.3a5.5 5.5 0 0 1-7.8-7.8l8.5-8.5a3.7 3.7 0 0 1 5.2 '
                 '5.2l-8.5 8.5a1.8 1.8 0 0 1-2.6-2.6l7.8-7.8"/>',
    "file": '<path d="M13.5 3H7a2 2 0 0 0-2 2v14a2 2 0 0 0 2 2h10a2 2 0 0 0 2-2V8.5z"/>'
            '<path d="M13.5 3v5.5H19"/>',
}


def resources_dir() -> Path:
    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        return Path(frozen_root) / "resources"
    return Path(__file__).resolve().parents[2] / "resources"


@functools.cache
def app_icon() -> QIcon:
    icon = QIcon()
    for size in SIZES:
        path = resources_dir() / "icons" / f"fireside-{size}.png"
        if path.is_file():
            icon.addFile(str(path))
    return icon


def glyph(name: str, color: QColor, size: int = 18, ratio: float = 2.0) -> QIcon:
    """A line icon from ``_GLYPHS`` in ``color``, sharp up to ``ratio`` times the normal density."""
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" '
           f'stroke="{color.name()}" stroke-width="1.8" stroke-linecap="round" '
           f'stroke-linejoin="round">{_GLYPHS[name]}</svg>')
    renderer = QSvgRenderer(svg.encode())
    pixels = round(size * ratio)
    pixmap = QPixmap(pixels, pixels)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    pixmap.setDevicePixelRatio(ratio)
    return QIcon(pixmap)


def render_pngs(svg: Path, folder: Path, sizes: tuple[int, ...] = SIZES) -> list[Path]:
    from PySide6.QtGui import QImage  # noqa: PLC0415 - only when rendering the resources

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg} is not a valid SVG file")
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for size in sizes:
        image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(painter)
        painter.end()
        path = folder / f"fireside-{size}.png"
        if not image.save(str(path)):
            raise OSError(f"could not write {path}")
        written.append(path)
    return written


if __name__ == "__main__":
    from PySide6.QtGui import QGuiApplication

    app = QGuiApplication(sys.argv[:1])
    for written in render_pngs(resources_dir() / "fireside.svg", resources_dir() / "icons"):
        print(written)
