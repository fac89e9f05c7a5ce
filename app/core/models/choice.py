"""Which model to use: the one asked for; with none asked for, the model at start. Never
an embedding model: those find passages in documents and cannot chat."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from app.core.models import bundled, catalog
from app.core.settings import Settings


def choose_model(query: str | None, entries: Sequence[catalog.ModelEntry], prefs: Settings,
                 required: bool = False) -> Path:
    """Resolve a path or catalog name (None: ``start_model``); raises LookupError with a
    message for the user."""
    if query:
        entry = catalog.find(entries, query)
        if entry is not None and entry.error and entry.source.startswith(catalog.SERVER_PREFIX):
            raise LookupError(f"{entry.name} cannot be used: {entry.error}")
        if entry is not None and entry.embedding:
            raise LookupError(f"{entry.name} is {catalog.NOT_FOR_CHAT}.")
        if entry is not None:
            return entry.path
        path = Path(query).expanduser()
        if path.suffix.lower() == ".gguf" or path.exists():
            return path  # the engine's check says what is wrong with it, if anything
        names = ", ".join(e.name for e in catalog.chat_models(entries) if not e.error) or "none"
        raise LookupError(f"No model called {query!r}. Models found: {names}.")
    if required:
        raise LookupError("Name a model: /model NAME or /model PATH.")
    return start_model(entries, prefs)


def start_model(entries: Sequence[catalog.ModelEntry], prefs: Settings) -> Path:
    """The model every face loads when none is named: the user's "Model at start", else
    the last one used, else the bundled default, else the first usable one found. A file
    that is gone is passed over. LookupError with a message for the user if none is left."""
    for candidate in (prefs.default_model, prefs.last_model):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    default = bundled.default_model_path()
    if default is not None:
        return default
    usable = [e for e in catalog.chat_models(entries) if not e.error]
    if usable:
        return usable[0].path
    raise LookupError("No model found. Put a .gguf file in the models folder "
                      "(see `fireside models`).")
