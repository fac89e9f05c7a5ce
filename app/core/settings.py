"""The one settings object, saved as JSON in the config folder with atomic writes."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core import paths
from app.core.options import LoadOptions, Sampling

logger = logging.getLogger(__name__)


_SAMPLING = Sampling()  # sampling defaults live in one place: the engine's Sampling


@dataclass
class Settings:
    model_folders: list[str] = field(default_factory=list)
    default_model: str | None = None  # a path; None: the bundled default
    last_model: str | None = None
    system_prompt: str = ""
    # The Sampling fields, flattened so settings.json stays simple to read and edit.
    temperature: float = _SAMPLING.temperature
    top_p: float = _SAMPLING.top_p
    top_k: int = _SAMPLING.top_k
    min_p: float = _SAMPLING.min_p
    repeat_penalty: float = _SAMPLING.repeat_penalty
    max_tokens: int = _SAMPLING.max_tokens
    seed: int | None = _SAMPLING.seed
    context_size: int | None = None  # None: the model's trained length, at most 8192
    threads: int | None = None  # None: one per physical core
    theme: str = "system"  # "system" | "light" | "dark"
    open_conversation: int | None = None

    def sampling(self) -> Sampling:
        return Sampling(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Sampling)})

    def load_options(self) -> LoadOptions:
        return LoadOptions(n_ctx=self.context_size, n_threads=self.threads)


@dataclass
class LoadedSettings:
    settings: Settings
    problem: str | None = None  # a message for the user when the file was unusable


def _coerce(value: Any, default: Any, annotation: str) -> Any:
    """Keep a stored value only if it has the type the field expects."""
    if value is None:
        return None if "None" in annotation else default
    if "list" in annotation:
        return [str(v) for v in value] if isinstance(value, list) else default
    if "float" in annotation:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if ok else default
    if "int" in annotation:
        return value if isinstance(value, int) and not isinstance(value, bool) else default
    if "str" in annotation:
        return value if isinstance(value, str) else default
    return default


def load(path: Path | None = None) -> LoadedSettings:
    path = path or paths.settings_path()
    defaults = Settings()
    if not path.exists():
        return LoadedSettings(defaults)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
    except (OSError, ValueError) as err:
        kept = path.with_name(f"{path.stem}.broken-{time.strftime('%Y%m%d-%H%M%S')}{path.suffix}")
        with contextlib.suppress(OSError):
            path.replace(kept)
        logger.warning("unreadable settings file %s: %s", path, err)
        return LoadedSettings(defaults, f"Your settings file could not be read ({err}); "
                                        f"defaults are in use. The old file is kept as {kept}.")
    values = {}
    for f in dataclasses.fields(Settings):
        default = getattr(defaults, f.name)
        values[f.name] = _coerce(raw.get(f.name, default), default, str(f.type))
    return LoadedSettings(Settings(**values))


def save(settings: Settings, path: Path | None = None) -> None:
    """Write atomically: a crash mid-write leaves the previous file intact."""
    import tempfile  # noqa: PLC0415 - only when saving: reading the settings stays light

    path = path or paths.settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(dataclasses.asdict(settings), indent=2, ensure_ascii=False)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".settings-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
