"""The ``fireside`` command: the window when run alone, else a terminal command."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from app.cli import main as terminal


def main(argv: Sequence[str] | None = None) -> int:
    args = terminal.parse(argv)
    if args.command is not None:
        return terminal.run(args)
    try:
        from app.ui.application import run  # noqa: PLC0415 - Qt only for the window
    except ImportError:
        return terminal.chat_instead_of_window(args)  # a build without the window
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
