"""Make the platform icon from resources/icons: ``make_icons.py build/fireside.ico|.icns``.

Windows' .ico is written with Pillow, each size from its own drawn PNG rather than
scaled from the largest; macOS's .icns with the system's iconutil.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ICONS = Path(__file__).resolve().parents[1] / "resources" / "icons"


def png(size: int) -> Path:
    return ICONS / f"fireside-{size}.png"


def write_ico(target: Path) -> None:
    from PIL import Image  # noqa: PLC0415 - only the Windows build installs Pillow

    sizes = [s for s in (16, 24, 32, 48, 64, 128, 256) if png(s).is_file()]
    images = [Image.open(png(s)).convert("RGBA") for s in sizes]
    images[-1].save(target, format="ICO", sizes=[(s, s) for s in sizes],
                    append_images=images[:-1])


def write_icns(target: Path) -> None:
    # iconutil wants an .iconset folder of point sizes at 1x and 2x.
    with tempfile.TemporaryDirectory() as tmp:
        iconset = Path(tmp) / "fireside.iconset"
        iconset.mkdir()
        for points in (16, 32, 128, 256, 512):
            for scale, suffix in ((1, ""), (2, "@2x")):
                source = png(points * scale)
                if source.is_file():
                    shutil.copyfile(source, iconset / f"icon_{points}x{points}{suffix}.png")
        subprocess.run(["iconutil", "-c", "icns", str(iconset), "-o", str(target)], check=True)


def main(target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.suffix == ".ico":
        write_ico(target)
    elif target.suffix == ".icns":
        write_icns(target)
    else:
        raise SystemExit(f"make_icons.py: {target.name} is neither .ico nor .icns")
    print(target)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
