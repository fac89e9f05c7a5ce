"""The models Fireside can use: its folders, other apps' stores, and a watcher on both;
then the models of the servers the user added, asked for separately (that is network
work, and nothing waits on it).

The core holds one ``ModelLibrary``; ``fireside models`` uses one on its own.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from app.core.models import catalog, choice, sources
from app.core.models.watch import Watcher
from app.core.remote import servers
from app.core.settings import Settings


class ModelLibrary:
    def __init__(self, prefs: Settings, models_dirs: Sequence[Path] = ()) -> None:
        self._settings = prefs
        self._models_dirs = [Path(p) for p in models_dirs]
        self.entries: list[catalog.ModelEntry] = []  # the files, then the servers' models
        self.sources: list[sources.Source] = []  # other apps' stores, found or not
        self.listings: list[servers.Listing] = []  # what each server said, at the last ask
        self._files: list[catalog.ModelEntry] = []
        self._added: list[Path] = []  # files no folder holds: listed after every rescan
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
        files = catalog.scan(folders, catalog.switched_on(found, disabled))
        files += [catalog.describe(p) for p in self._added
                  if p.exists() and not _lists(files, p)]
        changed = (files, found) != (self._files, self.sources)
        self._files, self.sources = files, found
        self._combine()
        return changed

    def ask_servers(self) -> bool:
        """Ask every server added for its models, all at once (network work, bounded by
        each server's timeouts); True if what they serve changed."""
        known = servers.added(self._settings.servers)
        listings: list[servers.Listing] = []
        if known and self._settings.offline:
            listings = [servers.Listing(s, problem="Fireside is offline") for s in known]
        elif known:
            with ThreadPoolExecutor(min(8, len(known))) as pool:
                listings = list(pool.map(servers.ask_models, known))
        changed = listings != self.listings
        self.listings = listings
        self._combine()
        return changed

    def _combine(self) -> None:
        """The files, then each server's models (a server that did not answer is one
        entry that says why); replaced whole, never changed in place."""
        remote: list[catalog.ModelEntry] = []
        named = {s.name for s in servers.added(self._settings.servers)}
        for listing in self.listings:
            if listing.server.name not in named:
                continue  # removed since it was asked
            source = catalog.SERVER_PREFIX + listing.server.name
            if listing.problem:
                path = servers.model_path(listing.server.name, "")
                remote.append(catalog.ModelEntry(listing.server.name, path, (path,), source,
                                                 error=f"unreachable: {listing.problem}"))
            for model in listing.models:
                path = servers.model_path(model.server, model.id)
                remote.append(catalog.ModelEntry(
                    servers.display_name(model), path, (path,), source,
                    architecture="remote", context_length=model.context_length,
                    has_chat_template=True))
        self.entries = [*self._files, *remote]

    def choose(self, query: str | None, required: bool = False) -> Path:
        """A path or a model's name; None: the model at start (``choice.start_model``).
        LookupError (with a message for the user) if there is none."""
        return choice.choose_model(query, self.entries, self._settings, required)

    def add(self, path: Path) -> None:
        """List a model file that no folder holds (one the settings name), now and after
        each rescan while it exists. One listed already is left to its folder or store:
        it goes when it goes from there."""
        if not _lists(self.entries, path):
            self._list(catalog.describe(path))

    def add_file(self, path: Path) -> catalog.ModelEntry:
        """A model file the user opened: the entry listed already if it is the same file
        reached another way, else its own, listed (as ``add`` does) if it can be used."""
        entry = catalog.describe(path)
        for listed in self.entries:
            with contextlib.suppress(OSError):  # a server's model has no file
                if os.path.samefile(listed.path, entry.path):
                    return listed
        if entry.usable:
            self._list(entry)
        return entry

    def _list(self, entry: catalog.ModelEntry) -> None:
        self._added.append(entry.path)
        self._files = [*self._files, entry]
        self._combine()

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


def _lists(entries: Sequence[catalog.ModelEntry], path: Path) -> bool:
    return any(path == e.path or path in e.shards for e in entries)
