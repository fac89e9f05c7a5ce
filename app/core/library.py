"""The models Fireside can use: its folders, other apps' stores, and a watcher on both.

The core holds one ``ModelLibrary``; ``fireside models`` uses one on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from app.core import catalog, models, sources
from app.core.settings import Settings
from app.core.watch import Watcher


class ModelLibrary:
    def __init__(self, prefs: Settings, models_dirs: Sequence[Path] = ()) -> None:
        self._settings = prefs
        self._models_dirs = [Path(p) for p in models_dirs]
        self.entries: list[catalog.ModelEntry] = []  # as of the last rescan()
        self.sources: list[sources.Source] = []  # other apps' stores, found or not
        self._watcher: Watcher | None = None
        # What the watcher looks at, replaced whole (never mutated) when it changes.
        self._watched: tuple[tuple[tuple[Path, str], ...], frozenset[str]] = ((), frozenset())

    def folders(self) -> list[tuple[Path, str]]:
        return catalog.default_folders([Path(p) for p in self._settings.model_folders],
                                       self._models_dirs)

    def rescan(self) -> bool:
        """Look at the folders and other apps' stores again (disk work); True if the
        models or the stores found changed."""
        folders = self.folders()
        disabled = frozenset(self._settings.disabled_sources)
        self._watched = (tuple(folders), disabled)
        found = sources.discover()
        entries = catalog.scan(folders, catalog.switched_on(found, disabled))
        changed = (entries, found) != (self.entries, self.sources)
        self.entries, self.sources = entries, found
        return changed

    def choose(self, query: str | None, required: bool = False) -> Path:
        """A path or a model's name; None: the last used, else the default. LookupError
        (with a message for the user) if there is none."""
        return models.choose_model(query, self.entries, self._settings, required)

    def add(self, path: Path) -> None:
        """List a model file that no folder holds (one the settings name)."""
        if not any(path == e.path or path in e.shards for e in self.entries):
            self.entries = [*self.entries, catalog.describe(path)]

    def watch(self, on_change: Callable[[], None]) -> None:
        """Call ``on_change`` (on the watcher's thread) when model files come and go."""
        if self._watcher is None:
            self._watcher = Watcher(self._watch_list, on_change)
            self._watcher.start()

    def stop_watching(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()

    def _watch_list(self) -> list[tuple[str, Path]]:
        folders, disabled = self._watched  # on the watcher's thread: one read, no locks
        return catalog.watch_list(folders, disabled)
