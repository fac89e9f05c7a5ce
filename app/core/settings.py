"""The one settings object, saved as JSON in the config folder with atomic writes."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core import paths
from app.core.options import LoadOptions, Sampling
from app.core.remote.servers import READ_TIMEOUT_S
from app.core.reply.thinking import THINKING_CHOICES

logger = logging.getLogger(__name__)


API_PORT = 8484  # Fireside's own API, unless taken or changed
_SAMPLING = Sampling()  # sampling defaults live in one place: the engine's Sampling
# The Sampling fields a user sets (a request's own stop strings and schema are never
# saved).
_SAMPLING_FIELDS = tuple(f.name for f in dataclasses.fields(Sampling)
                         if f.name not in ("stop", "schema"))
JsonObject = dict[str, Any]  # kept as it is when it is an object; read where it is used

# What a model can have of its own (stored only when it differs from the defaults).
MODEL_FIELDS = ("context_size", "threads", "template_override", "system_prompt",
                "flash_attention", "kv_cache", "batch_size", "prompt_threads", "gpu_layers",
                "draft_model", *_SAMPLING_FIELDS)


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
    thinking: str = _SAMPLING.thinking  # thinking.THINKING_CHOICES
    thinking_budget: int | None = _SAMPLING.thinking_budget  # None: no limit
    speculation: bool = True  # drafting where it pays (Sampling's own default is off)
    context_size: int | None = None  # None: the model's trained length, at most 8192
    threads: int | None = None  # for generating; None: one per physical core
    # For people who know llama.cpp's switches (options.LoadOptions says each).
    flash_attention: str = "auto"
    kv_cache: str = "f16"
    batch_size: int | None = None  # None: 512
    prompt_threads: int | None = None  # for reading prompts; None: as threads
    gpu_layers: str = "auto"  # GPU offload: "auto", "all", "off" or a count (offload.plan)
    gpu_margin_mib: int | None = None  # GPU memory auto leaves free; None: offload.margin
    theme: str = "system"  # "system" | "light" | "dark"
    open_conversation: int | None = None
    disabled_sources: list[str] = field(default_factory=list)  # keys of sources.KEYS
    # Per model file, by its path: {"file": name, "size": bytes, <MODEL_FIELDS it sets>}.
    model_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Model servers the user added: {"name", "url", "key_env"?} (servers.Server; no keys).
    servers: list[dict[str, str]] = field(default_factory=list)
    # How long a server may say nothing mid-reply before the reply counts as cut off.
    server_timeout_s: float = READ_TIMEOUT_S
    # Fireside's own API on 127.0.0.1, off unless the user turns it on; a token, when
    # set, is required of every request (this file is readable by its owner only).
    serve_api: bool = False
    api_port: int = API_PORT
    api_token: str = ""
    # Tool servers as the mcpServers JSON of Claude Desktop, LM Studio and Cursor holds
    # them: {name: {"command", "args", "env"} or {"url", "headers"}} (mcp_tools.read_config),
    # the env values and headers in the keyring ("keptIn" says where: tools.mcp_keys).
    mcp_servers: JsonObject = field(default_factory=dict)
    tools_off: list[str] = field(default_factory=list)  # servers switched off, by name
    always_allowed_tools: list[str] = field(default_factory=list)  # "server/tool"
    max_tool_calls: int = 10  # per reply; then the model answers in words
    tool_timeout_s: float = 60.0  # a call that takes longer is cancelled
    # The Hugging Face Hub, contacted only when the user searches or downloads: its
    # address ("": HF_ENDPOINT, else the public Hub; a mirror goes here) and whether a
    # token for gated models is kept in the keyring (its place, as servers' keys).
    hub_endpoint: str = ""
    hub_token_kept: str = ""  # "" none, else secrets.KeyStore
    # Offline: every connection Fireside would make is refused, with a message.
    offline: bool = False
    # Documents: the GGUF embedding model their passages are found with ("": the bundled
    # all-MiniLM-L6-v2). A change re-embeds the passages kept.
    embedding_model: str = ""

    def sampling(self, model: Path | str | None = None) -> Sampling:
        """The sampling for replies, with the model's own settings if it has any."""
        own = self.model_overrides(model)
        sampling = Sampling(**{name: own.get(name, getattr(self, name))
                               for name in _SAMPLING_FIELDS})
        if sampling.thinking not in THINKING_CHOICES:  # a hand-edited file
            sampling = dataclasses.replace(sampling, thinking="on")
        return sampling

    def load_options(self, model: Path | str | None = None) -> LoadOptions:
        own = self.model_overrides(model)
        return LoadOptions(
            n_ctx=own.get("context_size", self.context_size),
            n_threads=own.get("threads", self.threads),
            template_override=own.get("template_override"),
            flash_attention=own.get("flash_attention", self.flash_attention),
            kv_cache=own.get("kv_cache", self.kv_cache),
            batch_size=own.get("batch_size", self.batch_size),
            prompt_threads=own.get("prompt_threads", self.prompt_threads),
            gpu_layers=own.get("gpu_layers", self.gpu_layers),
            gpu_margin_mib=self.gpu_margin_mib,
            draft_model=own.get("draft_model") or None).checked()

    def system_prompt_for(self, model: Path | str | None = None) -> str:
        return str(self.model_overrides(model).get("system_prompt", self.system_prompt))

    # Per-model settings ----------------------------------------------------------------
    # Keyed by the file's path. A file that was renamed or moved keeps its settings:
    # a record whose file is gone and whose size matches (and, when several do, whose
    # name matches) is taken over by the new path on the next change.

    def model_overrides(self, model: Path | str | None) -> dict[str, Any]:
        """The settings this model file has of its own (only those it sets)."""
        key = self._model_key(model)
        record = self.model_settings.get(key) if key else None
        if record is None and key:
            record = self.model_settings.get(self._moved_from(Path(key)) or "")
        return {k: v for k, v in (record or {}).items() if k in MODEL_FIELDS}

    def set_model_value(self, model: Path | str, name: str, value: Any) -> None:
        """Give the model its own value for one of MODEL_FIELDS."""
        if name not in MODEL_FIELDS:
            raise KeyError(name)
        key = self._model_key(model)
        record = self._record(Path(key))
        record[name] = value

    def clear_model(self, model: Path | str, name: str | None = None) -> None:
        """Back to the defaults: for one setting, or (name None) for all of them."""
        key = self._model_key(model)
        if key not in self.model_settings:
            key = self._moved_from(Path(key)) or ""
        record = self.model_settings.get(key)
        if record is None:
            return
        if name is not None:
            record.pop(name, None)
        if name is None or not any(k in MODEL_FIELDS for k in record):
            del self.model_settings[key]

    @staticmethod
    def _model_key(model: Path | str | None) -> str:
        return os.path.abspath(os.fspath(model)) if model else ""

    def _record(self, path: Path) -> dict[str, Any]:
        key = str(path)
        old = self._moved_from(path) if key not in self.model_settings else None
        record = self.model_settings.pop(old) if old else self.model_settings.get(key, {})
        record.update(file=path.name, size=_size(path))
        self.model_settings[key] = record
        return record

    def _moved_from(self, path: Path) -> str | None:
        """The key of a record left by this file under another name, if it is clear which."""
        size = _size(path)
        if not size:
            return None
        gone = [k for k, r in self.model_settings.items()
                if r.get("size") == size and not os.path.exists(k)]
        same_name = [k for k in gone if self.model_settings[k].get("file") == path.name]
        choice = same_name or gone
        return choice[0] if len(choice) == 1 else None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except (OSError, ValueError):
        return 0


@dataclass
class LoadedSettings:
    settings: Settings
    problem: str | None = None  # a message for the user when the file was unusable


def _coerce(value: Any, default: Any, annotation: str) -> Any:
    """Keep a stored value only if it has the type the field expects."""
    if value is None:
        return None if "None" in annotation else default
    if annotation == "JsonObject":
        return value if isinstance(value, dict) else default
    if annotation == "bool":
        return value if isinstance(value, bool) else default
    if annotation.startswith("dict"):
        return _model_records(value) if isinstance(value, dict) else default
    if annotation.startswith("list[dict"):
        records = value if isinstance(value, list) else []
        return [r for r in records if isinstance(r, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in r.items())]
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


_FIELD_TYPES = {f.name: str(f.type) for f in dataclasses.fields(Settings)} | {
    "template_override": "str | None", "draft_model": "str | None"}


def _model_records(value: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per-model settings as stored, less anything of the wrong type."""
    records: dict[str, dict[str, Any]] = {}
    for key, stored in value.items():
        if not isinstance(key, str) or not isinstance(stored, dict):
            continue
        record: dict[str, Any] = {}
        for name in MODEL_FIELDS:
            if name in stored:
                kept = _coerce(stored[name], _MISSING, _FIELD_TYPES[name])
                if kept is not _MISSING:
                    record[name] = kept
        if record:
            record["file"] = str(stored.get("file") or Path(key).name)
            size = stored.get("size")
            record["size"] = size if isinstance(size, int) and not isinstance(size, bool) else 0
            records[key] = record
    return records


_MISSING = object()


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
        logger.warning("unreadable settings file %s: %s", path, err)
        problem = f"Your settings file could not be read ({err}); defaults are in use."
        try:
            kept = _set_aside(path)
        except OSError as move_err:
            return LoadedSettings(defaults, f"{problem} It could not be set aside "
                                            f"({move_err.strerror or move_err}): {path}")
        return LoadedSettings(defaults, f"{problem} The old file is kept as {kept}.")
    values = {}
    for f in dataclasses.fields(Settings):
        default = getattr(defaults, f.name)
        values[f.name] = _coerce(raw.get(f.name, default), default, str(f.type))
    return LoadedSettings(Settings(**values))


def _set_aside(path: Path) -> Path:
    """Rename an unreadable settings file to a free ``.broken-<time>`` name; never delete."""
    return paths.set_aside(path, lambda stamp: f"{path.stem}.broken-{stamp}{path.suffix}")


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
