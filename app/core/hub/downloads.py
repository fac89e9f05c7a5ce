"""The download queue: models (a file, a split model's shards, a vision projector) fetched
one after another on a thread of their own, each with its bytes, speed and time left,
paused, resumed or cancelled by the user; one left unfinished by a quit or a crash is
found again on the next start, paused."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.core.hub import download, listing
from app.core.hub.access import HubAccess, HubError
from app.core.hub.listing import ModelChoice, RepoFiles

logger = logging.getLogger(__name__)

QUEUED, DOWNLOADING, PAUSED, DONE, FAILED, CANCELLED = (
    "queued", "downloading", "paused", "done", "failed", "cancelled")
_SPEED_WINDOW_S = 5.0
_ids = itertools.count(1)


@dataclass
class Job:
    """One model being downloaded. Its fields change on the download thread; a face
    reads them when told of a change."""

    repo: str
    label: str  # the model's file name (a split model's without shard numbers)
    name: str  # the repository path of its first file: how a resume finds it again
    targets: list[Path]  # where each file goes, the model's first
    total: int
    state: str = QUEUED
    done: int = 0
    error: str | None = None
    sha256: list[str] = field(default_factory=list)  # each file's, once checked
    id: int = field(default_factory=lambda: next(_ids))
    _marks: list[tuple[float, int]] = field(default_factory=list)  # (time, done) for speed

    @property
    def path(self) -> Path:
        return self.targets[0]

    @property
    def speed(self) -> float:
        """Bytes a second over the last few seconds (0 while nothing comes)."""
        marks, now = list(self._marks), time.monotonic()
        if self.state != DOWNLOADING or not marks or now - marks[-1][0] > _SPEED_WINDOW_S:
            return 0.0
        first, done = marks[0]
        return (self.done - done) / (now - first) if now > first else 0.0

    @property
    def eta_s(self) -> float | None:
        speed = self.speed
        return (self.total - self.done) / speed if speed > 0 else None

    def _count(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        self._marks.append((now, self.done))
        while self._marks and now - self._marks[0][0] > _SPEED_WINDOW_S:
            self._marks.pop(0)

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "repo": self.repo, "file": self.label, "path": str(self.path),
                "state": self.state, "done": self.done, "total": self.total,
                "speed": round(self.speed), "eta_s": self.eta_s, "error": self.error}


class Downloads:
    """One thread fetches the queued jobs in turn; ``on_change`` hears of every change
    of a job (on that thread), ``on_done`` of each model in place."""

    def __init__(self, access: Callable[[], HubAccess], models_dir: Callable[[], Path],
                 on_change: Callable[[Job], None] = lambda job: None,
                 on_done: Callable[[Job], None] = lambda job: None) -> None:
        self._access, self._models_dir = access, models_dir
        self.on_change, self.on_done = on_change, on_done
        self.jobs: list[Job] = []
        self._wanted: dict[int, tuple[RepoFiles, ModelChoice] | None] = {}
        self._stop: dict[int, download.Stopper] = {}  # the jobs downloading now
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._closed = False

    # What a face calls --------------------------------------------------------------

    def add(self, files: RepoFiles, choice: ModelChoice) -> Job:
        """Queue ``choice``; the job already queued for the same file if there is one."""
        targets = _targets(self._models_dir(), files.repo, choice)
        with self._lock:
            for job in self.jobs:
                if job.path == targets[0] and job.state not in (DONE, FAILED, CANCELLED):
                    if job.state == PAUSED:
                        self._queue(job, (files, choice))
                    return job
            job = Job(files.repo, choice.label, choice.files[0].name, targets,
                      choice.fetched_size)
            self.jobs.append(job)
            self._queue(job, (files, choice))
        self._changed(job)
        return job

    def pause(self, job: Job) -> None:
        with self._lock:
            if job.state == QUEUED:
                job.state = PAUSED
            elif job.state == DOWNLOADING and job.id in self._stop:
                self._stop[job.id].ask("pause")
        self._changed(job)

    def resume(self, job: Job) -> None:
        with self._lock:
            if job.state in (PAUSED, FAILED):
                self._queue(job, self._wanted.get(job.id))
        self._changed(job)

    def cancel(self, job: Job) -> None:
        """Stop it and remove what it fetched."""
        with self._lock:
            if job.state == DOWNLOADING and job.id in self._stop:
                self._stop[job.id].ask("cancel")
                return
            if job.state in (DONE, CANCELLED):
                return
            job.state = CANCELLED
        _remove_parts(job)
        self._changed(job)

    def find_unfinished(self) -> list[Job]:
        """Downloads a quit or a crash left in the models folder, as paused jobs (their
        ``.part`` kept); each resumes from its bytes when the user says so."""
        found = []
        models = self._models_dir()
        for info in sorted(models.glob(f"*/*/**/*{download.PART_INFO}")):
            target = info.with_name(info.name.removesuffix(download.PART_INFO))
            held = download.kept(target)
            if held is None:
                continue
            with self._lock:
                if any(target in job.targets for job in self.jobs):
                    continue
                job = Job(held.wanted.repo, target.name, held.wanted.name, [target],
                          held.wanted.size, state=PAUSED, done=held.size)
                self.jobs.append(job)
                self._wanted[job.id] = None  # planned again from the Hub on resume
            found.append(job)
        return found

    def wait(self, job: Job, timeout: float | None = None) -> bool:
        """Until ``job`` is done, failed, cancelled or paused; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while job.state in (QUEUED, DOWNLOADING):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._wake.wait(left)
        return True

    def close(self) -> None:
        """Pause what is downloading (its bytes kept) and end the thread."""
        with self._lock:
            self._closed = True
            for stopper in self._stop.values():
                stopper.ask("pause")
            self._wake.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=10)

    # The download thread ------------------------------------------------------------

    def _queue(self, job: Job, wanted: tuple[RepoFiles, ModelChoice] | None) -> None:
        """Under the lock."""
        job.state, job.error = QUEUED, None
        self._wanted[job.id] = wanted
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._work, name="fireside-downloads",
                                            daemon=True)
            self._thread.start()
        self._wake.notify_all()

    def _work(self) -> None:
        while True:
            with self._lock:
                job = next((j for j in self.jobs if j.state == QUEUED), None)
                if job is None or self._closed:
                    self._thread = None
                    return
                job.state = DOWNLOADING
                wanted = self._wanted.get(job.id)
                self._stop[job.id] = download.Stopper()
            self._changed(job)
            self._run(job, wanted)

    def _run(self, job: Job, wanted: tuple[RepoFiles, ModelChoice] | None) -> None:
        try:
            for again in (False, True):
                try:
                    self._fetch(job, *(wanted or self._plan_again(job)))
                    break
                except download.FileChanged:
                    if again:
                        raise
                    wanted = self._plan_again(job)  # the Hub's new sha256 for it
            state, error = DONE, None
        except download.Stopped as stopped:
            state, error = (CANCELLED if str(stopped) == "cancel" else PAUSED), None
        except HubError as failure:
            state, error = FAILED, str(failure)
        except Exception as failure:  # a bug must not end the queue silently
            logger.exception("download of %s failed", job.label)
            state, error = FAILED, f"{job.label}: {failure}"
        if state == CANCELLED:
            _remove_parts(job)
        with self._lock:
            job.state, job.error = state, error
            self._stop.pop(job.id, None)
            self._wake.notify_all()
        self._changed(job)
        if state == DONE:
            self.on_done(job)

    def _plan_again(self, job: Job) -> tuple[RepoFiles, ModelChoice]:
        files = listing.repo_files(self._access(), job.repo)
        choice = files.find(name=job.name)
        with self._lock:
            self._wanted[job.id] = (files, choice)
            job.total = choice.fetched_size
        return files, choice

    def _fetch(self, job: Job, files: RepoFiles, choice: ModelChoice) -> None:
        access = self._access()
        job.targets = _targets(self._models_dir(), files.repo, choice)
        job.total = choice.fetched_size
        job.done, job.sha256, job._marks = 0, [], []
        last = [0.0]

        def heard(n: int) -> None:
            job._count(n)
            now = time.monotonic()
            if now - last[0] >= 0.2:  # a face redraws at most five times a second
                last[0] = now
                self._changed(job)

        with access.client() as client:
            for file, target in zip(choice.everything, job.targets, strict=True):
                if target.exists() and target.stat().st_size == file.size:
                    job._count(file.size)  # fetched and its sha256 checked before
                    job.sha256.append(file.sha256 or "")
                    continue
                wanted = download.Wanted(files.repo, files.commit, file.name, file.size,
                                         file.sha256)
                job.sha256.append(download.fetch(access, client, wanted, target,
                                                 on_bytes=heard, stop=self._stop[job.id]))

    def _changed(self, job: Job) -> None:
        try:
            self.on_change(job)
        except Exception:
            logger.exception("a download listener failed")


def duration(seconds: float) -> str:
    """Time left, as a progress line says it: "42 s", "3 min 05 s"."""
    seconds = int(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def _targets(models: Path, repo: str, choice: ModelChoice) -> list[Path]:
    """Each file's place: the repository's layout, a projector beside its model."""
    targets = [download.target_path(models, repo, f.name) for f in choice.files]
    if choice.projector is not None:
        base = download.target_path(models, repo, choice.projector.name).name
        targets.append(targets[0].with_name(base))
    return targets


def _remove_parts(job: Job) -> None:
    for target in job.targets:
        download.part_of(target).unlink(missing_ok=True)
        download.info_of(target).unlink(missing_ok=True)
