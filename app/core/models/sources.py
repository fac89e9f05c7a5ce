"""Where other apps keep GGUF models, and the model files each of them holds.

LM Studio, Ollama, Jan, GPT4All and the Hugging Face cache each store models in a
layout of their own, in a place that depends on the system and on the app's own
settings. Everything here only reads: files are used where they lie, and nothing is
ever written to another app's folders. The places are computed from a `Place` (system,
home folder, environment), so every system's layout can be checked on any system.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from app.core import paths

LMSTUDIO = "LM Studio"
OLLAMA = "Ollama"
HUGGING_FACE = "Hugging Face"
JAN = "Jan"
GPT4ALL = "GPT4All"

# Settings keys (stable: stored in settings.json) and labels, in the order shown.
KEYS = {"lmstudio": LMSTUDIO, "ollama": OLLAMA, "huggingface": HUGGING_FACE, "jan": JAN,
        "gpt4all": GPT4ALL}

_OLLAMA_REGISTRY = "registry.ollama.ai"
_OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
# Ollama's Linux service keeps its models outside any home folder.
OLLAMA_SERVICE = Path("/usr/share/ollama/.ollama/models")
_SETTINGS_LIMIT = 1 << 20  # another app's settings file; a larger one is not a settings file

# Names that downloaders give a file they have not finished: Hugging Face's
# `.incomplete`, Ollama's `-partial`, GPT4All's `incomplete-` prefix, browsers' `.part`
# and `.crdownload`, LM Studio's and others' `.download`.
_PARTIAL = re.compile(
    r"(\.(part|partial|incomplete|download|crdownload|tmp)$)|(-partial(-\d+)?$)|(^incomplete-)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Place:
    """The facts model locations depend on."""

    system: str  # "linux", "darwin" or "windows"
    home: Path
    env: Mapping[str, str] = field(default_factory=dict)
    ollama_service: Path = OLLAMA_SERVICE

    def var(self, name: str) -> Path | None:
        value = self.env.get(name, "").strip()
        return Path(value).expanduser() if value else None


def here() -> Place:
    """This computer."""
    system = "windows" if sys.platform.startswith("win") else (
        "darwin" if sys.platform == "darwin" else "linux")
    return Place(system, Path.home(), dict(os.environ), OLLAMA_SERVICE)


@dataclass(frozen=True)
class Found:
    """A model file another app (or a folder) holds, with the name that app gives it."""

    path: Path
    source: str
    name: str | None = None  # e.g. "llama3.2:3b"; None: named from the file itself
    add_quantization: bool = False  # a repository name: append the file's quantization


@dataclass(frozen=True)
class Source:
    """One app's model store: where it is on this computer (if anywhere)."""

    key: str
    label: str
    folders: tuple[Path, ...]  # the folders that exist, most specific first
    layout: str = "folder"  # "folder", "ollama" or "huggingface"

    @property
    def found(self) -> bool:
        return bool(self.folders)

    def files(self, walked: set[tuple[int, int]] | None = None) -> list[Found]:
        """Every model file in the store (only reads; folders walked once each)."""
        walked = set() if walked is None else walked
        found: list[Found] = []
        for folder in self.folders:
            if self.layout == "ollama":
                found += _ollama_files(folder)
            elif self.layout == "huggingface":
                found += _hf_files(folder)
            else:
                found += [Found(p, self.label) for p in gguf_files(folder, walked)]
        return found


def discover(place: Place | None = None) -> list[Source]:
    """Every known app's model store, found or not, in the order of KEYS."""
    place = place or here()
    candidates = {
        "lmstudio": (_lmstudio_folders(place), "folder"),
        "ollama": (_ollama_folders(place), "ollama"),
        "huggingface": (_hf_folders(place), "huggingface"),
        "jan": (_jan_folders(place), "folder"),
        "gpt4all": (_gpt4all_folders(place), "folder"),
    }
    return [Source(key, KEYS[key], _existing(folders), layout)
            for key, (folders, layout) in candidates.items()]


def is_partial_name(name: str) -> bool:
    """Whether a file name marks a download in progress."""
    return bool(_PARTIAL.search(name))


def gguf_files(folder: Path, walked: set[tuple[int, int]],
               follow_links: bool = True) -> Iterator[Path]:
    """Files named *.gguf under folder; unreadable folders are passed over.

    Symbolic links are followed unless ``follow_links`` is False (then telling a folder
    from a file costs no system call); `walked` holds the folders already seen, so a
    link loop or a folder reached twice is walked once.
    """
    if folder.name.lower().endswith(".gguf") and not folder.is_dir():
        yield folder  # a model file given where a folder was expected
        return
    stack = [folder]
    while stack:
        directory = stack.pop()
        try:
            info = directory.stat()
            if (info.st_dev, info.st_ino) in walked:
                continue
            walked.add((info.st_dev, info.st_ino))
            with os.scandir(directory) as listing:
                items = sorted(listing, key=lambda item: item.name)
        except OSError:
            continue
        subfolders: list[Path] = []
        for item in items:
            if item.name.lower().endswith(".gguf"):
                if not is_partial_name(item.name[:-5]):
                    yield Path(item.path)
                continue
            try:
                if item.is_dir(follow_symlinks=follow_links):
                    subfolders.append(Path(item.path))
            except OSError:
                continue
        stack.extend(reversed(subfolders))


# --- where each app keeps its models ---------------------------------------------


def _existing(folders: list[Path]) -> tuple[Path, ...]:
    return tuple(paths.distinct_places(filter(_is_dir, folders), lambda folder: folder))


def _is_dir(folder: Path) -> bool:
    try:
        return folder.is_dir()
    except (OSError, ValueError):
        return False


def _read_text(path: Path) -> str | None:
    try:
        if path.stat().st_size > _SETTINGS_LIMIT:
            return None
        return path.read_text(encoding="utf-8-sig")
    except (OSError, ValueError):
        return None


def _json_text(path: Path, key: str) -> str | None:
    """A string value of a JSON settings file, if the file and the value are there."""
    text = _read_text(path)
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return None
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, str) and value.strip() else None


def _data_home(place: Place) -> Path:
    return place.var("XDG_DATA_HOME") or place.home / ".local" / "share"


def _app_support(place: Place) -> Path:
    return place.home / "Library" / "Application Support"


def _lmstudio_folders(place: Place) -> list[Path]:
    # LM Studio's home is named by ~/.lmstudio-home-pointer (when it was moved), else
    # ~/.lmstudio, or ~/.cache/lm-studio for older versions. Its settings.json may name
    # another downloads folder ("Models Directory" in its settings).
    homes: list[Path] = []
    pointer = _read_text(place.home / ".lmstudio-home-pointer")
    if pointer and pointer.strip():
        homes.append(Path(pointer.strip()).expanduser())
    homes += [place.home / ".lmstudio", place.home / ".cache" / "lm-studio"]
    folders: list[Path] = []
    for home in homes:
        chosen = _json_text(home / "settings.json", "downloadsFolder")
        if chosen:
            folders.append(Path(chosen).expanduser())
        folders.append(home / "models")
    return folders


def _ollama_folders(place: Place) -> list[Path]:
    # OLLAMA_MODELS replaces the default for the server that sees it; a service
    # install on Linux runs as its own user with its store under /usr/share/ollama.
    folders = [p for p in (place.var("OLLAMA_MODELS"),) if p]
    folders.append(place.home / ".ollama" / "models")
    if place.system == "linux":
        folders.append(place.ollama_service)
    return [f for f in folders if (f / "manifests").is_dir()]


def _hf_folders(place: Place) -> list[Path]:
    # huggingface_hub's own order: HF_HUB_CACHE, else $HF_HOME/hub, else
    # $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (on every system).
    hub = place.var("HF_HUB_CACHE") or place.var("HUGGINGFACE_HUB_CACHE")
    if hub is None:
        hf_home = place.var("HF_HOME") or (
            (place.var("XDG_CACHE_HOME") or place.home / ".cache") / "huggingface")
        hub = hf_home / "hub"
    return [hub]


def _jan_folders(place: Place) -> list[Path]:
    # Jan 0.6+ keeps models in <data folder>/llamacpp/models; the data folder is
    # <app folder>/data unless its settings.json ("data_folder") moved it. Older
    # versions used ~/jan (and <data folder>/models).
    if place.system == "windows":
        appdata = place.var("APPDATA") or place.home / "AppData" / "Roaming"
        app_dirs = [appdata / "Jan"]
    elif place.system == "darwin":
        app_dirs = [_app_support(place) / "Jan"]
    else:
        app_dirs = [_data_home(place) / "Jan"]
    folders: list[Path] = []
    for app_dir in app_dirs:
        data = _json_text(app_dir / "settings.json", "data_folder")
        data_dir = Path(data).expanduser() if data else app_dir / "data"
        folders += [data_dir / "llamacpp" / "models", data_dir / "models"]
    folders.append(place.home / "jan" / "models")
    return folders


def _gpt4all_folders(place: Place) -> list[Path]:
    # GPT4All keeps its settings as an INI file (Qt's IniFormat on every system) whose
    # modelPath (modelPaths before 2.4.11) can move its downloads folder.
    if place.system == "windows":
        local = place.var("LOCALAPPDATA") or place.home / "AppData" / "Local"
        roaming = place.var("APPDATA") or place.home / "AppData" / "Roaming"
        default, ini = local / "nomic.ai" / "GPT4All", roaming / "nomic.ai" / "GPT4All.ini"
    else:
        if place.system == "darwin":
            default = _app_support(place) / "nomic.ai" / "GPT4All"
        else:
            default = _data_home(place) / "nomic.ai" / "GPT4All"
        config = place.var("XDG_CONFIG_HOME") or place.home / ".config"
        ini = config / "nomic.ai" / "GPT4All.ini"
    folders: list[Path] = []
    chosen = _ini_value(ini, ("modelPath", "modelPaths"))
    if chosen:
        folders.append(Path(chosen).expanduser())
    folders.append(default)
    return folders


def _ini_value(path: Path, keys: tuple[str, ...]) -> str | None:
    text = _read_text(path)
    if not text:
        return None
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys keep their case
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    for key in keys:
        value = parser.get("General", key, fallback="").strip().strip('"')
        if value.startswith("file://"):
            value = value[len("file://"):]
        if value:
            return value
    return None


# --- the files in the layouts that are not plain folders -------------------------


def _ollama_files(models: Path) -> list[Found]:
    """The model blob of every manifest: manifests/<registry>/<namespace>/<model>/<tag>."""
    manifests, blobs = models / "manifests", models / "blobs"
    found: list[Found] = []
    for manifest in sorted(_files_under(manifests, depth=4)):
        parts = manifest.relative_to(manifests).parts
        if len(parts) != 4:
            continue
        text = _read_text(manifest)
        try:
            data = json.loads(text) if text else None
        except ValueError:
            continue
        layers = data.get("layers") if isinstance(data, dict) else None
        if not isinstance(layers, list):
            continue
        # Projector, adapter, template, parameter and license layers are not models.
        digests = [layer.get("digest") for layer in layers if isinstance(layer, dict)
                   and layer.get("mediaType") == _OLLAMA_MODEL_LAYER]
        digest = digests[0] if digests else None
        if not isinstance(digest, str) or not re.fullmatch(r"sha256[:-][0-9a-fA-F]{64}", digest):
            continue
        blob = blobs / digest.replace(":", "-")
        if blob.is_file():
            found.append(Found(blob, OLLAMA, _ollama_name(*parts)))
    return found


def _ollama_name(registry: str, namespace: str, model: str, tag: str) -> str:
    """How `ollama list` names it: llama3.2:3b, someone/model:tag, hf.co/org/repo:tag."""
    if registry != _OLLAMA_REGISTRY:
        return f"{registry}/{namespace}/{model}:{tag}"
    if namespace != "library":
        return f"{namespace}/{model}:{tag}"
    return f"{model}:{tag}"


def _hf_files(hub: Path) -> list[Found]:
    """GGUF files in models--<org>--<name>/snapshots/<revision>/ (links into blobs/)."""
    found: list[Found] = []
    try:
        repos = sorted(p for p in hub.iterdir() if p.name.startswith("models--"))
    except OSError:
        return found
    for repo in repos:
        repo_id = "/".join(repo.name[len("models--"):].split("--"))
        walked: set[tuple[int, int]] = set()
        # In a snapshot, folders are real and every link points at a file in blobs/:
        # not following links spares a stat per file (a cache holds thousands).
        for path in gguf_files(repo / "snapshots", walked, follow_links=False):
            found.append(Found(path, HUGGING_FACE, repo_id, add_quantization=True))
    return found


def _files_under(folder: Path, depth: int) -> Iterator[Path]:
    """Regular files exactly `depth` levels below folder."""
    if depth == 0:
        if folder.is_file():
            yield folder
        return
    try:
        children = list(folder.iterdir())
    except OSError:
        return
    for child in children:
        yield from _files_under(child, depth - 1)
