"""Finds the GGUF models on disk and describes each one from its header.

Models are used where they lie (another app's folder, the Hugging Face cache), so the
scan follows symbolic links, lists each file once however it was reached, and turns
every unreadable or unusable file into an entry with a reason instead of an exception.
Other apps' stores (LM Studio, Ollama, ...) are found by `app.core.models.sources`.
"""

from __future__ import annotations

import os
import re
import stat
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePath

from app.core import paths
from app.core.models import sources
from app.core.models.bundled import bundled_dir
from app.core.models.gguf import GGUFError, GGUFHeader, joined
from app.core.models.header_cache import cached_header
from app.core.models.sources import Found, Source, gguf_files

BUNDLED = "bundled"
MODELS_FOLDER = "models folder"
SETTINGS = "settings"
ENVIRONMENT = "environment"
COMMAND_LINE = "command line"

# The user's own folders: Fireside's models folder and the folders the user named.
_OWN = frozenset({MODELS_FOLDER, SETTINGS, ENVIRONMENT, COMMAND_LINE})
# What the picker says a model came from.
_LABELS = {BUNDLED: "Bundled", MODELS_FOLDER: "Fireside", SETTINGS: "Your folder",
           ENVIRONMENT: "Your folder", COMMAND_LINE: "Command line"}

# llama.cpp's encoder-only architectures: they embed text and cannot chat, whether or not
# the header names a pooling.
EMBEDDING_ARCHITECTURES = frozenset({"bert", "modern-bert", "nomic-bert", "nomic-bert-moe",
                                     "neo-bert", "jina-bert-v2", "jina-bert-v3", "eurobert",
                                     "gemma-embedding"})
NOT_FOR_CHAT = "an embedding model: it finds passages in documents and cannot chat"

# llama.cpp's split naming: <prefix>-00001-of-00003.gguf
SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})(?P<ext>\.gguf)$", re.I)


@dataclass(frozen=True)
class ModelEntry:
    name: str
    path: Path  # the file to load: the first shard of a split model
    shards: tuple[Path, ...]
    source: str
    architecture: str | None = None
    parameter_count: int | None = None
    size_label: str | None = None
    quantization: str | None = None
    context_length: int | None = None
    has_chat_template: bool = False
    base_model: bool = False  # not tuned for chat: it continues text (is_base_model)
    embedding: bool = False  # turns passages into vectors (documents); never a chat's model
    size_bytes: int = 0
    error: str | None = None  # why the model cannot be used

    @property
    def usable(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "path": str(self.path),
            "shards": [str(p) for p in self.shards],
            "source": self.source,
            "architecture": self.architecture,
            "parameter_count": self.parameter_count,
            "size_label": self.size_label,
            "quantization": self.quantization,
            "context_length": self.context_length,
            "has_chat_template": self.has_chat_template,
            "base_model": self.base_model,
            "embedding": self.embedding,
            "size_bytes": self.size_bytes,
            "error": self.error,
        }


def describe(path: str | os.PathLike[str], source: str = COMMAND_LINE) -> ModelEntry:
    """The entry for one file (or the split set it belongs to); errors go in `.error`."""
    return _inspect(Path(path), source)[0]


def scan(folders: Sequence[tuple[Path, str]], stores: Sequence[Source] = ()) -> list[ModelEntry]:
    """Every model under the folders (recursively) and in the stores, once each, sorted
    by name: the chat models and the embedding models (``embedding``), no projector or
    adapter."""
    groups: dict[object, list[Found]] = {}
    for found in candidates(folders, stores):
        first = _shard_paths(found.path)[0]
        groups.setdefault(_identity(first), []).append(replace(found, path=first))
    entries: list[ModelEntry] = []
    for group in groups.values():
        # One file reached several ways (links, overlapping folders, two apps): the
        # user's own folders name its source, then the bundled folder, then other apps,
        # each in the order given. The name another app gives it (an Ollama tag, a
        # Hugging Face repository) beats the file's own name, which for an Ollama blob
        # is a hash; Ollama's tag beats a repository name, and the shortest tag wins.
        chosen = min(group, key=lambda f: 0 if f.source in _OWN else 1 if f.source == BUNDLED
                     else 2)
        named = sorted((f for f in group if f.name),
                       key=lambda f: (f.source != sources.OLLAMA, len(f.name or "")))
        entry, listed = _inspect(chosen.path, chosen.source)
        if not listed:
            continue
        if named:
            name = named[0].name or entry.name
            if named[0].add_quantization and entry.quantization:
                name = f"{name}:{entry.quantization}"
            entry = replace(entry, name=name)
        entries.append(entry)
    return _with_unique_names(entries)


def chat_models(entries: Iterable[ModelEntry]) -> list[ModelEntry]:
    """The entries a chat can load: all but the embedding models."""
    return [e for e in entries if not e.embedding]


def is_embedding_model(header: GGUFHeader) -> bool:
    """A model that turns text into a vector: its header says how it pools its tokens
    (``<arch>.pooling_type``), or its architecture is an encoder's."""
    return header.pooling_type is not None or header.architecture in EMBEDDING_ARCHITECTURES


def candidates(folders: Sequence[tuple[Path, str]], stores: Sequence[Source] = ()) -> list[Found]:
    """Every file that may be a model, as reached (a file reached twice is here twice).

    Partial downloads (by name) and vision projectors (by name) are left out; the
    watcher lists these to tell when the catalog must be scanned again.
    """
    walked: set[tuple[int, int]] = set()
    found = [Found(path, source) for folder, source in folders
             for path in gguf_files(Path(folder), walked)]
    for store in stores:
        found += store.files(walked)
    return [f for f in found if not is_projector_name(f.path)]


def watch_list(folders: Sequence[tuple[Path, str]], disabled: Iterable[str] = ()
               ) -> list[tuple[str, Path]]:
    """What the watcher looks at: each candidate file, keyed by how it is reached."""
    return [(f"{f.source}\0{f.name or ''}\0{f.path}", f.path)
            for f in candidates(folders, app_stores(disabled))]


def app_stores(disabled: Iterable[str] = (), place: sources.Place | None = None) -> list[Source]:
    """The other apps' model stores found on this computer, less those switched off."""
    return switched_on(sources.discover(place), disabled)


def switched_on(found: Iterable[Source], disabled: Iterable[str]) -> list[Source]:
    """Of the discovered stores, those present and not switched off in settings."""
    off = set(disabled)
    return [s for s in found if s.found and s.key not in off]


SERVER_PREFIX = "server:"  # a server's models: "server:" + the server's name


def source_label(source: str) -> str:
    """Where a model came from, as the picker says it: "Fireside", "Ollama", a server..."""
    return source.removeprefix(SERVER_PREFIX) if source.startswith(SERVER_PREFIX) \
        else _LABELS.get(source, source)


def default_folders(extra: Sequence[Path] = (), cli: Sequence[Path] = ()) -> list[tuple[Path, str]]:
    """Where to look, in order of precedence: the first folder to reach a file names its source."""
    candidates = [(bundled_dir(), BUNDLED), (paths.models_dir(), MODELS_FOLDER)]
    candidates += [(Path(p).expanduser(), SETTINGS) for p in extra]
    candidates += [(p, ENVIRONMENT) for p in paths.env_models_dirs()]
    candidates += [(Path(p).expanduser(), COMMAND_LINE) for p in cli]
    return paths.distinct_places(candidates, lambda candidate: candidate[0])


def find(
    entries: Sequence[ModelEntry], query: str | os.PathLike[str], source: str = COMMAND_LINE
) -> ModelEntry | None:
    """The model a user means: a path to a .gguf file (anywhere) or a name.

    Names match case-insensitively; an exact name beats a file name, which beats a prefix.
    A path that does not lead to a usable file still gives an entry, carrying the reason.
    """
    text = os.fspath(query).strip()
    if not text:
        return None
    try:
        candidate = Path(text).expanduser()
    except RuntimeError:  # "~someone" with no such user
        candidate = Path(text)
    wanted = text.casefold()
    path_like = os.sep in text or "/" in text or wanted.endswith(".gguf")
    info = _stat(candidate)
    if info and (path_like or stat.S_ISREG(info.st_mode)):
        identity = _identity(_shard_paths(candidate)[0])
        for entry in entries:
            if any(_identity(shard) == identity for shard in entry.shards):
                return entry
        return describe(candidate, source)
    for matches in (
        lambda e: e.name.casefold() == wanted,
        lambda e: wanted in (e.path.name.casefold(), _clean_stem(e.path).casefold()),
        lambda e: e.name.casefold().startswith(wanted),
    ):
        found = next((e for e in entries if matches(e)), None)
        if found is not None:
            return found
    return describe(candidate, source) if path_like else None


def _inspect(path: Path, source: str) -> tuple[ModelEntry, bool]:
    """The entry for a file, and whether it is a model worth listing (a chat or an
    embedding model)."""
    shards = _shard_paths(path)
    first = shards[0]
    entry = ModelEntry(
        name=_clean_stem(first),
        path=first,
        shards=tuple(shards),
        source=source,
        size_bytes=sum(_file_size(p) for p in shards),
    )
    missing = [i for i, p in enumerate(shards, 1) if _stat(p) is None]
    if len(shards) > 1 and missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        reason = f"part {missing[0]} of {len(shards)} is missing: {shards[missing[0] - 1].name}"
        return replace(entry, error=reason + more), True
    try:
        headers = [cached_header(p) for p in shards]
    except GGUFError as failure:
        prefix = f"{failure.path.name}: " if len(shards) > 1 and failure.path else ""
        return replace(entry, error=prefix + failure.reason), True

    head = joined(headers)
    not_chat = _not_a_chat_model(first, head)
    embedding = not_chat is None and is_embedding_model(head)
    unnamed = None if head.architecture else "the file does not name its architecture"
    entry = replace(
        entry,
        name=display_name(head.metadata, first),
        architecture=head.architecture,
        parameter_count=head.parameter_count,
        size_label=head.size_label,
        quantization=head.quantization,
        context_length=head.context_length,
        has_chat_template=head.has_chat_template,
        base_model=not embedding and is_base_model(head.metadata, first),
        embedding=embedding,
        error=not_chat or unnamed,
    )
    return entry, not_chat is None


def _not_a_chat_model(path: Path, header: GGUFHeader) -> str | None:
    kind = (header.model_type or "").lower()
    if is_projector_name(path) or kind == "mmproj" or header.architecture == "clip":
        return "a vision projector (mmproj), not a chat model"
    if kind == "adapter":
        return "a LoRA adapter, not a chat model"
    return None


def is_projector_name(path: PurePath) -> bool:
    """A vision projector (mmproj) goes with a model; it is not one to chat with."""
    return "mmproj" in path.name.lower()


def _shard_paths(path: Path) -> list[Path]:
    """All files of the split set `path` belongs to, first shard first; else [path]."""
    match = SPLIT_NAME.match(path.name)
    if not match:
        return [path]
    number, count = int(match["no"]), int(match["count"])
    if not 1 <= number <= count:
        return [path]
    prefix, ext = match["prefix"], match["ext"]
    return [path.with_name(f"{prefix}-{i:05d}-of-{count:05d}{ext}") for i in range(1, count + 1)]


_QUANT_SUFFIX = re.compile(r"[._-](?:I?Q\d[\w]*|F16|F32|BF16)$", re.IGNORECASE)


# Words in a model's name, fine-tune label or file name that say it was tuned to chat.
_CHAT_TUNED = frozenset({"it", "instruct", "chat", "sft", "dpo", "rlhf", "orpo", "kto",
                         "assistant", "thinking", "reasoning", "hermes"})


def is_base_model(metadata: Mapping[str, object], path: Path) -> bool:
    """True for a model not tuned for chat: no chat template, and nothing in its name,
    fine-tune label or file name says it was (``instruct``, ``chat``, ``-it``…). Such a
    model continues the text it is given (and repeats the prompt) rather than answering.
    """
    template = metadata.get("tokenizer.chat_template")
    if isinstance(template, str) and template.strip():
        return False
    labels = [metadata.get(key) for key in ("general.name", "general.finetune",
                                            "general.basename")] + [path.name]
    words = {word for label in labels if isinstance(label, str)
             for word in re.split(r"[^a-z0-9]+", label.casefold())}
    return not words & _CHAT_TUNED


def display_name(metadata: Mapping[str, object], path: Path) -> str:
    """general.name, unless it is a training-run label: then the file's name."""
    name = metadata.get("general.name")
    finetune = metadata.get("general.finetune")
    if not isinstance(name, str) or not name.strip():
        return _clean_stem(path)
    # e.g. "Smollm2 135M 8k Lc100K Mix1 Ep2" for SmolLM2-135M-Instruct.Q4_1.gguf
    if isinstance(finetune, str) and finetune.replace("-", " ").casefold() in name.casefold():
        return _clean_stem(path)
    name = name.strip()
    size = metadata.get("general.size_label")
    if isinstance(size, str) and size and name.casefold().endswith(f" {size.casefold()}"):
        name = name[:-len(size)] + size  # "Gemma 3 270m": the size as it is usually written
    return name


def _clean_stem(path: Path) -> str:
    """The file name without extension, shard number or quantization tag."""
    match = SPLIT_NAME.match(path.name)
    stem = match["prefix"] if match else path.name
    stem = stem[:-5] if stem.lower().endswith(".gguf") else stem
    return _QUANT_SUFFIX.sub("", stem) or stem


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except (OSError, ValueError):  # ValueError: a NUL byte in the path
        return None


def _identity(path: Path) -> object:
    """The same file however it is reached: symbolic link, hard link, overlapping folders."""
    info = _stat(path)
    if info is None:
        return os.path.normcase(os.path.abspath(path))
    return (info.st_dev, info.st_ino)


def _file_size(path: Path) -> int:
    info = _stat(path)
    return info.st_size if info and stat.S_ISREG(info.st_mode) else 0


def _with_unique_names(entries: list[ModelEntry]) -> list[ModelEntry]:
    """Tell same-named models apart by quantization, then source, then folder, then number."""
    entries = sorted(entries, key=lambda e: (e.name.casefold(), str(e.path)))
    qualifiers: list[list[str]] = [[] for _ in entries]

    def labels() -> list[str]:
        return [
            f"{e.name} ({', '.join(q)})" if q else e.name
            for e, q in zip(entries, qualifiers, strict=True)
        ]

    rounds: list[Callable[[ModelEntry], str | None]] = [
        lambda e: e.quantization,
        lambda e: e.source,
        lambda e: e.path.parent.name or None,
    ]
    for qualifier in rounds:
        current = labels()
        clashes = Counter(label.casefold() for label in current)
        for i, entry in enumerate(entries):
            extra = qualifier(entry)
            if clashes[current[i].casefold()] > 1 and extra and extra not in qualifiers[i]:
                qualifiers[i].append(extra)
    final = labels()
    taken: Counter[str] = Counter()
    for i, label in enumerate(final):
        taken[label.casefold()] += 1
        if taken[label.casefold()] > 1:
            final[i] = f"{label} #{taken[label.casefold()]}"
    named = [replace(e, name=n) for e, n in zip(entries, final, strict=True)]
    return sorted(named, key=lambda e: (e.name.casefold(), str(e.path)))
