"""``fireside search`` and ``fireside pull``: the Hub from the terminal, through the same
``ModelHub`` as the window's Get models page."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from app.core import settings
from app.core.hub import downloads as queue
from app.core.hub.access import HubError
from app.core.hub.listing import RepoFiles, parse_ref
from app.core.hub.service import Judged, ModelHub
from app.core.llama.memory import format_bytes


def run_search(args: argparse.Namespace) -> int:
    hub = ModelHub(settings.load().settings)
    try:
        found = hub.search(args.text, args.sort)
    except HubError as error:
        return _failed(args, error)
    for repo in found:
        if args.json:
            _event(repo.to_json())
        else:
            gated = "  (gated)" if repo.gated else ""
            print(f"{repo.repo}  ·  {repo.downloads:,} downloads  ·  {repo.likes:,} likes"
                  f"  ·  {repo.modified}{gated}")
    if not found and not args.json:
        print(f"No GGUF models on the Hub match {args.text!r}.")
    return 0


def run_pull(args: argparse.Namespace) -> int:
    hub = ModelHub(settings.load().settings)
    try:
        files, judged = _plan(hub, args)
    except HubError as error:
        return _failed(args, error)
    plan = judged.to_json() | {"repo": files.repo}
    if args.json:
        _event({"event": "plan", **plan})
    else:
        print(f"{files.repo}: {judged.choice.label} ({format_bytes(judged.choice.size)}): "
              f"{judged.fit.summary()}")
        if not judged.fit.fits:
            print("It will not load on this machine as it is now.", file=sys.stderr)
    if args.dry_run:
        return 0
    return _download(hub, files, judged, args)


def _plan(hub: ModelHub, args: argparse.Namespace) -> tuple[RepoFiles, Judged]:
    """The repository, and the model to download with its fit."""
    repo, quant = parse_ref(args.ref)
    files = hub.files(repo)
    if args.file or quant:
        return files, hub.judge(files, files.find(quant, args.file))
    if not files.choices:
        raise HubError(f"{repo} has no GGUF model files")
    judged = [hub.judge(files, choice) for choice in files.choices]
    best = hub.best(judged)
    if best is None:
        raise HubError(f"nothing in {repo} fits this machine: the smallest, "
                       f"{judged[0].choice.label}, {judged[0].fit.summary()}")
    return files, best


def _download(hub: ModelHub, files: RepoFiles, judged: Judged,
              args: argparse.Namespace) -> int:
    job = hub.downloads.add(files, judged.choice)
    bar = _Bar(args.json)
    hub.downloads.on_change = bar.show
    try:
        while not hub.downloads.wait(job, timeout=0.5):
            pass
    except KeyboardInterrupt:
        hub.downloads.pause(job)
        hub.downloads.wait(job)
    bar.end()
    hub.close()
    if job.state == queue.DONE:
        record = {"event": "downloaded", "path": str(job.path), "sha256": job.sha256[0],
                  "bytes": job.total,
                  "files": [{"path": str(p), "sha256": s}
                            for p, s in zip(job.targets, job.sha256, strict=False)]}
        if args.json:
            _event(record)
        else:
            print(f"Downloaded {job.path}\n    sha256 {job.sha256[0]} (checked against "
                  f"the Hub's)")
        return 0
    if job.state == queue.PAUSED:
        message = (f"paused: {format_bytes(job.done)} of {format_bytes(job.total)} kept; the "
                   f"same command goes on from there")
        if args.json:
            _event({"event": "paused", "message": message, "done": job.done})
        else:
            print(message, file=sys.stderr)
        return 130
    return _failed(args, HubError(job.error or "the download did not finish"))


class _Bar:
    """A progress bar on a terminal, a ``progress`` event a second with --json."""

    def __init__(self, as_json: bool) -> None:
        self._json = as_json
        self._tty = sys.stderr.isatty()
        self._last = 0.0
        self._drawn = False

    def show(self, job: queue.Job) -> None:
        now = time.monotonic()
        if job.state == queue.DOWNLOADING and now - self._last < (1.0 if self._json else 0.2):
            return
        self._last = now
        if self._json:
            _event({"event": "progress", **{k: v for k, v in job.to_json().items()
                                            if k in ("state", "done", "total", "speed",
                                                     "eta_s")}})
        elif self._tty:
            share = job.done / job.total if job.total else 1.0
            filled = int(share * 30)
            eta = f", {queue.duration(job.eta_s)} left" if job.eta_s is not None else ""
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {share:6.1%}  "
                             f"{format_bytes(job.done)} of {format_bytes(job.total)}  "
                             f"{format_bytes(int(job.speed))}/s{eta}   ")
            sys.stderr.flush()
            self._drawn = True

    def end(self) -> None:
        if self._drawn:
            sys.stderr.write("\n")


def _event(record: dict[str, Any]) -> None:
    print(json.dumps(record, ensure_ascii=False), flush=True)


def _failed(args: argparse.Namespace, error: HubError) -> int:
    if getattr(args, "json", False):
        _event({"event": "error", "message": str(error)})
    print(f"fireside: {error}", file=sys.stderr)
    return 1
