"""Other apps' model stores, laid out as those apps lay them out, under a test's home.

Model files are links to the real demo models (never copies); Ollama manifests are
written in Ollama's format (an OCI image manifest whose model layer names the blob).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

OLLAMA_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


def link(target: Path, at: Path, hard: bool = False) -> Path:
    at.parent.mkdir(parents=True, exist_ok=True)
    if hard:
        os.link(target, at)
    else:
        at.symlink_to(target)
    return at


def ollama_model(models: Path, name: str, target: Path, *, registry: str = "registry.ollama.ai",
                 namespace: str = "library", projector: Path | None = None,
                 hard: bool = False) -> Path:
    """Pull `name` ("model:tag") as Ollama would: a blob per layer and the manifest last.

    The digests are made from the names: Ollama checks them, Fireside does not.
    """
    model, tag = name.split(":")
    blobs = models / "blobs"

    def blob(kind: str, content: Path | bytes) -> dict[str, object]:
        digest = hashlib.sha256(f"{name}/{kind}".encode()).hexdigest()
        path = blobs / f"sha256-{digest}"
        if isinstance(content, Path):
            link(content, path, hard)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        return {"mediaType": f"application/vnd.ollama.image.{kind}",
                "digest": f"sha256:{digest}", "size": path.stat().st_size}

    layers = [blob("model", target)]
    if projector is not None:
        layers.append(blob("projector", projector))
    layers += [blob("template", b"{{ .Prompt }}"), blob("license", b"Apache-2.0"),
               blob("params", b'{"stop": ["<|im_end|>"]}')]
    config = blob("config", b'{"model_format": "gguf", "model_family": "llama"}')
    config["mediaType"] = "application/vnd.docker.container.image.v1+json"
    manifest = models / "manifests" / registry / namespace / model / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "mediaType": OLLAMA_MANIFEST,
                                    "config": config, "layers": layers}))
    return manifest


def hf_model(hub: Path, repo: str, target: Path, file_name: str,
             revision: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    """A file in the Hugging Face cache: a snapshot link into blobs/ (itself a link here)."""
    folder = hub / ("models--" + repo.replace("/", "--"))
    digest = hashlib.sha256(f"{repo}/{file_name}".encode()).hexdigest()
    blob = link(target, folder / "blobs" / digest)
    (folder / "refs").mkdir(parents=True, exist_ok=True)
    (folder / "refs" / "main").write_text(revision)
    snapshot = folder / "snapshots" / revision / file_name
    snapshot.parent.mkdir(parents=True, exist_ok=True)
    snapshot.symlink_to(os.path.relpath(blob, snapshot.parent))
    return snapshot


def tree(root: Path) -> dict[str, tuple[int, int] | str]:
    """Every name under root with its size and modification time (links as their target)."""
    state: dict[str, tuple[int, int] | str] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            info = path.lstat()
            key = str(path.relative_to(root))
            state[key] = os.readlink(path) if path.is_symlink() else (info.st_size,
                                                                      info.st_mtime_ns)
    return state
