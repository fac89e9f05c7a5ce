"""Fireside: a private desktop chat app for local GGUF language models."""

from __future__ import annotations


def __getattr__(name: str) -> str:
    # Read on first use: importlib.metadata costs tens of milliseconds at every start.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

        try:
            return version("fireside")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0.0.0"
    raise AttributeError(f"module 'app' has no attribute {name!r}")
