"""Opening the window (the default when ``fireside`` is run without a command)."""

from __future__ import annotations

import argparse


def open_window(args: argparse.Namespace) -> int:
    try:
        from app.ui.application import run  # noqa: PLC0415 - Qt only for the window
    except ImportError:
        # No window in this build: chat in the terminal instead.
        from app.cli.terminal import run_chat  # noqa: PLC0415

        for name in ("prompt", "model", "system", "temperature", "top_p", "top_k", "min_p",
                     "repeat_penalty", "seed", "max_tokens", "context", "threads"):
            setattr(args, name, None)
        args.json = False
        return run_chat(args)
    return run(args)
