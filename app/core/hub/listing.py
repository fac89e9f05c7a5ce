"""What the Hub holds: a search of its GGUF repositories, and one repository's GGUF
files as the models one can download (a split model's shards together, a vision
projector beside its model), through ``huggingface_hub``."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, TypeVar

from app.core.hub.access import HubAccess, HubError
from app.core.models import catalog

SORTS = {"downloads": "downloads", "likes": "likes", "recent": "last_modified"}
SEARCH_LIMIT = 50
_QUANT = re.compile(r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|MXFP4(?:_MOE)?|BF16|F16|F32)"
                    r"(?![A-Za-z0-9])", re.IGNORECASE)
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
T = TypeVar("T")


@dataclass(frozen=True)
class RepoSummary:
    repo: str
    downloads: int
    likes: int
    modified: str  # ISO date, "" if the Hub did not say
    gated: bool

    def to_json(self) -> dict[str, object]:
        return {"repo": self.repo, "downloads": self.downloads, "likes": self.likes,
                "modified": self.modified, "gated": self.gated}


@dataclass(frozen=True)
class RemoteFile:
    name: str  # its path in the repository
    size: int
    sha256: str | None  # the Hub's, for a file kept in LFS


@dataclass(frozen=True)
class ModelChoice:
    """One downloadable model: a file, or a split model's shards, first first."""

    label: str  # the file's name, a split model's without its shard numbers
    quant: str  # "Q4_K_M", "F16"... ("other" where the name says none)
    files: tuple[RemoteFile, ...]
    projector: RemoteFile | None = None  # a vision model's mmproj, downloaded with it

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def everything(self) -> tuple[RemoteFile, ...]:
        """What a download fetches: the model's files and its projector."""
        return self.files + ((self.projector,) if self.projector else ())

    @property
    def fetched_size(self) -> int:
        return sum(f.size for f in self.everything)


@dataclass(frozen=True)
class RepoFiles:
    repo: str
    commit: str
    gated: bool
    license: str | None
    choices: tuple[ModelChoice, ...]  # smallest first

    def find(self, quant: str | None = None, name: str | None = None) -> ModelChoice:
        """The choice named by a file (any of its shards) or a quantization; HubError
        naming what there is otherwise."""
        for choice in self.choices:
            if name and any(f.name == name or f.name.rsplit("/", 1)[-1] == name
                            for f in choice.files):
                return choice
            if not name and quant and choice.quant.casefold() == quant.casefold():
                return choice
        there = ", ".join(c.quant for c in self.choices) or "no GGUF model files"
        wanted = f"file named {name}" if name else f"{quant} file"
        raise HubError(f"{self.repo} has no {wanted}; it has: {there}")


def search(access: HubAccess, text: str, sort: str = "downloads",
           limit: int = SEARCH_LIMIT) -> list[RepoSummary]:
    """GGUF repositories whose name holds ``text``, most downloaded (liked, recent) first."""
    api = access.api()

    def run() -> list[RepoSummary]:
        found = api.list_models(search=text.strip() or None, filter="gguf",
                                sort=SORTS.get(sort, "downloads"),  # type: ignore[arg-type]
                                limit=limit,
                                expand=["downloads", "likes", "lastModified", "gated"])
        return [RepoSummary(m.id, m.downloads or 0, m.likes or 0,
                            m.last_modified.date().isoformat() if m.last_modified else "",
                            bool(m.gated)) for m in found]

    return _asking(access, run)


def repo_files(access: HubAccess, repo: str) -> RepoFiles:
    """A repository's GGUF models, with each file's size and sha256."""
    if not _REPO.match(repo):
        raise HubError(f"{repo!r} is not a repository name: owner/name, as on the Hub")
    api = access.api()
    info = _asking(access, lambda: api.model_info(repo, files_metadata=True), repo)
    files = [RemoteFile(s.rfilename, s.size or (s.lfs.size if s.lfs else 0),
                        s.lfs.sha256 if s.lfs else None) for s in info.siblings or []]
    license_ = next((t.removeprefix("license:") for t in info.tags or []
                     if t.startswith("license:")), None)
    card: Any = info.card_data
    if card is not None and getattr(card, "license", None):
        license_ = str(card.license)
    return RepoFiles(repo, info.sha or "main", bool(info.gated), license_, choices(files))


def choices(files: list[RemoteFile]) -> tuple[ModelChoice, ...]:
    """The GGUF files as models: a split set is one, projectors go with every model of
    the repository (the largest-precision one: F16 where there is one)."""
    ggufs = [f for f in files if f.name.lower().endswith(".gguf")]
    projectors = sorted((f for f in ggufs if catalog.is_projector_name(PurePosixPath(f.name))),
                        key=lambda f: (quant_of(f.name) not in ("F16", "BF16"), f.size))
    projector = projectors[0] if projectors else None
    sets: dict[str, list[RemoteFile]] = {}
    for file in ggufs:
        if catalog.is_projector_name(PurePosixPath(file.name)):
            continue
        split = catalog.SPLIT_NAME.match(file.name)
        key = f"{split['prefix']}{split['ext']}" if split else file.name
        sets.setdefault(key, []).append(file)
    made = []
    for key, members in sets.items():
        members.sort(key=lambda f: f.name)
        split = catalog.SPLIT_NAME.match(members[0].name)
        if split and len(members) != int(split["count"]):
            continue  # a split model with shards missing cannot load
        label = key.rsplit("/", 1)[-1]
        made.append(ModelChoice(label, quant_of(key), tuple(members), projector))
    return tuple(sorted(made, key=lambda c: (c.size, c.label)))


def quant_of(name: str) -> str:
    found = _QUANT.findall(name.rsplit("/", 1)[-1].removesuffix(".gguf"))
    return found[-1].upper() if found else "other"


def parse_ref(ref: str) -> tuple[str, str | None]:
    """``owner/repo[:QUANT]`` as ``fireside pull`` takes it."""
    repo, _, quant = ref.strip().partition(":")
    if not _REPO.match(repo):
        raise HubError(f"{ref!r} is not a model on the Hub: write OWNER/REPO or "
                       f"OWNER/REPO:QUANT (for example Qwen/Qwen3-4B-GGUF:Q4_K_M)")
    return repo, quant or None


def _asking(access: HubAccess, call: Callable[[], T], repo: str = "") -> T:
    with hub_errors(access, repo):
        return call()


@contextmanager
def hub_errors(access: HubAccess, repo: str = "") -> Iterator[None]:
    """The library's and the network's exceptions as one HubError a person can read."""
    import httpx2  # noqa: PLC0415
    from huggingface_hub import errors  # noqa: PLC0415

    try:
        yield
    except errors.GatedRepoError:
        raise HubError(f"{repo or 'This repository'} is gated: accept its terms on the "
                       "Hub, then add a token (Settings → Network, or HF_TOKEN)") from None
    except errors.RepositoryNotFoundError:
        raise HubError(f"{repo or 'The repository'} was not found on {access.endpoint} "
                       "(or it is private and needs a token)") from None
    except errors.RevisionNotFoundError:
        raise HubError("that revision is not on the Hub") from None
    except errors.HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else "?"
        raise HubError(f"the Hub answered {status}: {_first_line(error)}") from None
    except httpx2.TransportError as error:
        raise HubError(f"cannot reach {access.endpoint}: {_first_line(error) or 'no answer'}"
                       " (a mirror can be set in Settings → Network, or HF_ENDPOINT)") from None


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
