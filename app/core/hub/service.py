"""``ModelHub``: what the window's Get models page and ``fireside search`` / ``pull``
use. Nothing here touches the network until one of its methods is called."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from app.core import paths
from app.core.hub import fit as fits
from app.core.hub import listing, remote_header
from app.core.hub.access import HubAccess
from app.core.hub.downloads import Downloads, Job
from app.core.hub.listing import ModelChoice, RepoFiles, RepoSummary
from app.core.llama import devices, memory
from app.core.models import catalog
from app.core.reply import thinking, tool_calls
from app.core.settings import Settings


@dataclass(frozen=True)
class Judged:
    """A model on the Hub, its header read by ranges and its fit on this machine."""

    choice: ModelChoice
    fit: fits.Fit
    header: remote_header.RemoteHeader

    @property
    def abilities(self) -> dict[str, bool]:
        """What its header says it does: a chat template, tool calls, thinking; a base
        model (no chat tuning) continues text instead of answering."""
        head = self.header.header
        template = head.text("tokenizer.chat_template") or ""
        return {"chat_template": head.has_chat_template,
                "tools": bool(template) and tool_calls.format_for(template) is not None,
                "thinking": bool(template) and thinking.is_thinking_template(template),
                "base_model": catalog.is_base_model(head.metadata, Path(self.choice.label))}

    def facts(self) -> list[str]:
        """For the Get models page, beside the fit."""
        head, abilities = self.header.header, self.abilities
        found = [f"{head.size_label or '?'} parameters" if head.parameter_count else None,
                 head.architecture,
                 f"{head.context_length:,}-token context" if head.context_length else None,
                 "base model: continues text, not tuned to chat" if abilities["base_model"]
                 else "chat template" if abilities["chat_template"] else "no chat template",
                 "tool calls" if abilities["tools"] else None,
                 "thinking" if abilities["thinking"] else None,
                 f"header read: {memory.format_bytes(self.header.fetched)}"]
        return [fact for fact in found if fact]

    def to_json(self) -> dict[str, object]:
        head = self.header.header
        return {"file": self.choice.label, "quant": self.choice.quant,
                "bytes": self.choice.size, "files": [f.name for f in self.choice.everything],
                "fit": self.fit.to_json(), "header_bytes_read": self.header.fetched,
                "architecture": head.architecture, "parameters": head.parameter_count,
                "context_length": head.context_length, **self.abilities}


class ModelHub:
    def __init__(self, prefs: Settings, models_dir: Callable[[], Path] = paths.models_dir,
                 on_change: Callable[[Job], None] = lambda job: None,
                 on_done: Callable[[Job], None] = lambda job: None) -> None:
        self._settings = prefs
        self._judged: dict[tuple[str, str, str], Judged] = {}
        self._lock = threading.Lock()
        self.downloads = Downloads(self.access, models_dir, on_change, on_done)

    def access(self) -> HubAccess:
        """Read anew each time: the user may change the address, token or Offline."""
        return HubAccess.from_settings(self._settings)

    def search(self, text: str, sort: str = "downloads") -> list[RepoSummary]:
        return listing.search(self.access(), text, sort)

    def files(self, repo: str) -> RepoFiles:
        return listing.repo_files(self.access(), repo)

    def judge(self, files: RepoFiles, choice: ModelChoice) -> Judged:
        """The fit of ``choice``, its header read once per commit."""
        key = (files.repo, files.commit, choice.label)
        with self._lock:
            known = self._judged.get(key)
        if known is not None:
            return known
        header = remote_header.read(self.access(), files.repo, files.commit, choice)
        fit = fits.judge(header.header, self._settings.load_options(None),
                         devices.survey(), memory.available())
        judged = Judged(choice, fit, header)
        with self._lock:
            self._judged[key] = judged
        return judged

    def best(self, judged: list[Judged]) -> Judged | None:
        index = fits.best([(j.choice.quant, j.choice.size, j.fit) for j in judged])
        return None if index is None else judged[index]

    def close(self) -> None:
        self.downloads.close()
