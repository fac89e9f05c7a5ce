"""The Hub from the core, against a Hub on loopback (tests/loopback_hub.py) serving real
GGUF files through the real ``huggingface_hub`` and HTTP: search, a repository's models,
the fit from a header read by ranges, and downloads through real faults."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.core import paths, settings
from app.core.hub import download
from app.core.hub.access import HubError
from app.core.hub.downloads import CANCELLED, DONE, FAILED, PAUSED, Job
from app.core.hub.service import ModelHub
from app.core.llama import memory
from app.core.models import catalog
from app.core.models.gguf import read_header
from tests.core import helpers
from tests.gguf_files import tiny_model, write_split
from tests.loopback_hub import TOKEN, LoopbackHub

REPO = "fireside-test/Tiny-GGUF"
NAME = "tiny-Q8_0.gguf"



def model_hub(server: LoopbackHub, **changes: object) -> ModelHub:
    prefs = settings.Settings(hub_endpoint=server.endpoint)
    for key, value in changes.items():
        setattr(prefs, key, value)
    return ModelHub(prefs)


def pull(hub: ModelHub, repo: str = REPO, name: str | None = None) -> Job:
    files = hub.files(repo)
    job = hub.downloads.add(files, files.find(name=name) if name else files.choices[0])
    assert hub.downloads.wait(job, timeout=120)
    return job


def held(hub: ModelHub, server: LoopbackHub, at: int) -> tuple[Job, threading.Event]:
    """A download of REPO's file that the server holds at ``at`` bytes (once they all
    came) until the event is set."""
    files = hub.files(REPO)
    go = threading.Event()
    server.stall_at[NAME] = (at, go)
    job = hub.downloads.add(files, files.choices[0])
    while job.done < at:
        hub.downloads.wait(job, timeout=0.05)
    return job, go


def in_library() -> list[catalog.ModelEntry]:
    return catalog.scan([(paths.models_dir(), catalog.MODELS_FOLDER)])


# Search and a repository's models ----------------------------------------------------


def test_search_finds_gguf_repositories_sorted_as_asked(
        hub_server: LoopbackHub, tmp_path: Path) -> None:
    model = tiny_model(tmp_path)
    hub_server.add("a/Qwen-GGUF", {NAME: model}, downloads=5, likes=50)
    hub_server.add("b/Qwen-Coder-GGUF", {NAME: model}, downloads=50, likes=5,
                   modified="2026-11-01T00:00:00.000Z")
    hub_server.add("c/Llama-GGUF", {NAME: model}, downloads=500, likes=1)
    hub = model_hub(hub_server)
    assert [r.repo for r in hub.search("qwen")] == ["b/Qwen-Coder-GGUF", "a/Qwen-GGUF"]
    assert [r.repo for r in hub.search("qwen", "likes")] == ["a/Qwen-GGUF", "b/Qwen-Coder-GGUF"]
    assert hub.search("", "recent")[0].repo == "b/Qwen-Coder-GGUF"
    assert hub.search("qwen")[0].modified == "2026-11-01"
    # Only what was asked, and only GGUF: the library's own fetches stay off.
    assert all(p.startswith("/api/models?") and "filter=gguf" in p
               for p in hub_server.api_paths)


def test_a_split_model_is_one_choice_and_a_projector_comes_with_it(
        hub_server: LoopbackHub, tmp_path: Path) -> None:
    shards = write_split(tmp_path / "big-Q4_K_M.gguf", 3)
    small = tiny_model(tmp_path, "big-Q2_K.gguf", 1)
    projector = tiny_model(tmp_path, "mmproj-big-F16.gguf", 1)
    hub_server.add("v/Big-Vision-GGUF", {
        **{f"Q4_K_M/{p.name}": p for p in shards}, "big-Q2_K.gguf": small,
        "mmproj-big-F16.gguf": projector, "README.md": tmp_path / "big-Q2_K.gguf"})
    hub = model_hub(hub_server)
    files = hub.files("v/Big-Vision-GGUF")
    assert [(c.quant, len(c.files)) for c in files.choices] in (
        [("Q2_K", 1), ("Q4_K_M", 3)], [("Q4_K_M", 3), ("Q2_K", 1)])
    split = files.find("Q4_K_M")
    assert split.label == "big-Q4_K_M.gguf"
    assert split.projector is not None and split.projector.name == "mmproj-big-F16.gguf"
    assert files.license == "apache-2.0" and not files.gated
    with pytest.raises(HubError, match=r"has no Q8_0 file; it has: .*Q2_K"):
        files.find("Q8_0")

    job = pull(hub, "v/Big-Vision-GGUF", "Q4_K_M/big-Q4_K_M-00002-of-00003.gguf")
    assert job.state == DONE, job.error
    entries = in_library()
    assert [len(e.shards) for e in entries] == [3], "three shards, one model; mmproj unlisted"
    assert (job.path.parent / "mmproj-big-F16.gguf").is_file()
    assert [read_header(p).tensors for p in entries[0].shards] == [
        read_header(p).tensors for p in shards]


def test_a_missing_repository_and_a_gated_one_say_what_to_do(
        hub_server: LoopbackHub, tmp_path: Path) -> None:
    hub_server.add("g/Gated-GGUF", {NAME: tiny_model(tmp_path)}, gated=True)
    hub = model_hub(hub_server)
    with pytest.raises(HubError, match="nobody/Nothing-GGUF was not found on http://127"):
        hub.files("nobody/Nothing-GGUF")
    files = hub.files("g/Gated-GGUF")
    assert files.gated
    with pytest.raises(HubError, match=r"gated or private: accept its terms.*add a token"):
        hub.judge(files, files.choices[0])
    job = pull(hub, "g/Gated-GGUF")
    assert job.state == FAILED and "gated" in (job.error or "")
    assert not in_library()

    from app.core.hub.access import keep_token

    prefs = settings.Settings(hub_endpoint=hub_server.endpoint)
    assert keep_token(prefs, TOKEN) in ("keyring", "file")
    assert TOKEN not in settings.dataclasses.asdict(prefs).values()
    job = pull(ModelHub(prefs), "g/Gated-GGUF")
    assert job.state == DONE, job.error


def test_offline_refuses_every_hub_request_and_says_so(hub_server: LoopbackHub) -> None:
    hub = model_hub(hub_server, offline=True)
    with pytest.raises(HubError, match="Fireside is offline"):
        hub.search("qwen")
    with pytest.raises(HubError, match="Fireside is offline"):
        hub.files("a/b")
    assert hub_server.api_paths == [] and hub_server.sent == []


def test_a_file_name_that_leaves_the_models_folder_is_refused(
        hub_server: LoopbackHub, tmp_path: Path) -> None:
    hub_server.add("evil/Escape-GGUF", {"../../escape-Q8_0.gguf": tiny_model(tmp_path)})
    hub = model_hub(hub_server)
    files = hub.files("evil/Escape-GGUF")
    with pytest.raises(HubError, match=r"refused the file name '\.\./\.\./escape-Q8_0\.gguf'"):
        hub.downloads.add(files, files.choices[0])
    assert not list(tmp_path.parent.rglob("escape-Q8_0.gguf*"))
    assert hub_server.sent == []


# Downloads through faults -----------------------------------------------------------


def test_a_cut_connection_resumes_where_it_stopped(
        hub_server: LoopbackHub, tmp_path: Path) -> None:
    model = tiny_model(tmp_path, megabytes=12)
    hub_server.add(REPO, {NAME: model})
    cut = 7_654_321
    hub_server.cut_at[NAME] = cut
    job = pull(model_hub(hub_server))
    assert job.state == DONE, job.error
    assert job.sha256 == [hub_server.sha(model)]
    assert download.part_of(job.path).exists() is False
    ranges = [s.range for s in hub_server.sent]
    assert ranges[0] == "bytes=0-" and len(ranges) == 2
    resumed_from = int(ranges[1].removeprefix("bytes=").rstrip("-"))
    assert cut - resumed_from <= 1 << 20, "at most 1 MB fetched again"
    assert [e.path for e in in_library()] == [job.path]


def test_busy_answers_are_waited_out_as_the_hub_asks(
        hub_server: LoopbackHub, tmp_path: Path) -> None:
    model = tiny_model(tmp_path, megabytes=1)
    hub_server.add(REPO, {NAME: model})
    hub_server.busy = [(429, 1), (503, 2)]
    job = pull(model_hub(hub_server))
    assert job.state == DONE, job.error
    sent = hub_server.sent
    assert [s.status for s in sent] == [429, 503, 206]
    # Retry-After is a lower bound: the next try never comes sooner than asked.
    assert sent[1].at - sent[0].at >= 1 and sent[2].at - sent[1].at >= 2


def test_a_stall_is_dropped_and_the_download_goes_on(
        hub_server: LoopbackHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIRESIDE_HUB_STALL_S", "1")
    model = tiny_model(tmp_path, megabytes=4)
    hub_server.add(REPO, {NAME: model})
    never = threading.Event()
    hub_server.stall_at[NAME] = (3_000_000, never)
    try:
        job = pull(model_hub(hub_server))
    finally:
        never.set()
    assert job.state == DONE, job.error
    assert job.sha256 == [hub_server.sha(model)]
    assert hub_server.sent[0].range == "bytes=0-"
    assert hub_server.sent[1].range == "bytes=3000000-", "every byte that came is kept"


def test_a_file_changed_on_the_hub_between_tries_starts_again(
        hub_server: LoopbackHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mirror that serves the newest version under any revision: the resume's If-Range
    finds another ETag, so the kept bytes go and the new version comes whole."""
    monkeypatch.setenv("FIRESIDE_HUB_STALL_S", "1")
    old = tiny_model(tmp_path / "old", megabytes=4, fill=1.0)
    new = tiny_model(tmp_path / "new", megabytes=4, fill=2.0)
    hub_server.add(REPO, {NAME: old})
    hub = model_hub(hub_server)
    job, go = held(hub, hub_server, 2_000_000)
    hub_server.replace(REPO, NAME, new)  # while the first try hangs
    try:
        assert hub.downloads.wait(job, timeout=120)
    finally:
        go.set()
    assert job.state == DONE, job.error
    assert job.sha256 == [hub_server.sha(new)] and job.path.read_bytes() == new.read_bytes()
    # If-Range brought the whole new file (200): left unread until its sha256 is known
    # from the Hub again, then fetched from the start.
    assert [(s.range, s.status) for s in hub_server.sent] == [
        ("bytes=0-", 206), ("bytes=2000000-", 200), ("bytes=0-", 206)]


def test_a_file_changed_while_the_app_was_closed_starts_again(
        hub_server: LoopbackHub, tmp_path: Path) -> None:
    old = tiny_model(tmp_path / "old", megabytes=4, fill=1.0)
    new = tiny_model(tmp_path / "new", megabytes=4, fill=2.0)
    hub_server.add(REPO, {NAME: old})
    hub = model_hub(hub_server)
    job, _ = held(hub, hub_server, 1_500_000)
    hub.close()  # paused, its .part kept
    assert job.state == PAUSED and download.part_of(job.path).stat().st_size >= 1_500_000
    hub_server.replace(REPO, NAME, new)

    job = pull(model_hub(hub_server))
    assert job.state == DONE, job.error
    assert job.path.read_bytes() == new.read_bytes()
    assert hub_server.sent[-1].range == "bytes=0-", "nothing of the old version is kept"


def test_a_wrong_sha256_is_refused_and_nothing_half_made_is_left(
        hub_server: LoopbackHub, tmp_path: Path) -> None:
    repo = hub_server.add(REPO, {NAME: tiny_model(tmp_path, megabytes=2)})
    repo.wrong_sha.add(NAME)
    job = pull(model_hub(hub_server))
    assert job.state == FAILED
    assert "did not arrive intact: its sha256" in (job.error or "")
    assert not in_library()
    assert [p.name for p in job.path.parent.iterdir()] == []


def test_the_same_model_asked_twice_is_one_download(
        hub_server: LoopbackHub, tmp_path: Path) -> None:
    hub_server.add(REPO, {NAME: tiny_model(tmp_path, megabytes=4)})
    hub = model_hub(hub_server)
    files = hub.files(REPO)
    go = threading.Event()
    hub_server.stall_at[NAME] = (1_000_000, go)
    first = hub.downloads.add(files, files.choices[0])
    second = hub.downloads.add(files, files.choices[0])
    assert second is first and len(hub.downloads.jobs) == 1
    # Another Fireside asking for it meanwhile is told, and touches nothing.
    other = model_hub(hub_server)
    job = other.downloads.add(other.files(REPO), files.choices[0])
    assert other.downloads.wait(job, timeout=60)
    assert job.state == FAILED and "is being downloaded already" in (job.error or "")
    go.set()
    assert hub.downloads.wait(first, timeout=120) and first.state == DONE, first.error
    assert len([s for s in hub_server.sent if s.status in (200, 206)]) == 1


def test_pause_resume_and_cancel(hub_server: LoopbackHub, tmp_path: Path) -> None:
    model = tiny_model(tmp_path, megabytes=6)
    hub_server.add(REPO, {NAME: model})
    hub = model_hub(hub_server)
    job, go = held(hub, hub_server, 2_000_000)
    hub.downloads.pause(job)
    go.set()
    assert hub.downloads.wait(job, timeout=60) and job.state == PAUSED
    kept = download.part_of(job.path).stat().st_size
    assert kept >= 2_000_000
    hub.downloads.resume(job)
    assert hub.downloads.wait(job, timeout=120) and job.state == DONE, job.error
    assert hub_server.sent[-1].range == f"bytes={kept}-"
    assert job.sha256 == [hub_server.sha(model)]

    job.path.unlink()
    again, go = held(hub, hub_server, 1_000_000)
    hub.downloads.cancel(again)
    go.set()
    assert hub.downloads.wait(again, timeout=60) and again.state == CANCELLED
    assert list(again.path.parent.iterdir()) == []


def test_a_full_disk_is_named_keeps_what_came_and_resumes_when_room_returns(
        hub_server: LoopbackHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tiny_model(tmp_path, megabytes=6)
    hub_server.add(REPO, {NAME: model})
    with helpers.small_disk(tmp_path / "disk", "30m") as disk:
        monkeypatch.setenv("FIRESIDE_DATA_DIR", str(disk))
        hub = model_hub(hub_server)
        files = hub.files(REPO)
        go = threading.Event()
        hub_server.stall_at[NAME] = (3_000_000, go)
        job = hub.downloads.add(files, files.choices[0])
        part = download.part_of(job.path)
        while not part.exists() or part.stat().st_size < 3_000_000:  # on the disk
            hub.downloads.wait(job, timeout=0.05)
        filler = helpers.fill_disk(disk)
        go.set()
        assert hub.downloads.wait(job, timeout=60) and job.state == FAILED
        assert "is full" in (job.error or "") and "are kept" in (job.error or "")
        assert download.part_of(job.path).stat().st_size >= 3_000_000
        filler.unlink()
        hub.downloads.resume(job)
        assert hub.downloads.wait(job, timeout=120) and job.state == DONE, job.error
        assert job.sha256 == [hub_server.sha(model)]
        # Too little room from the start: refused before a byte is fetched.
        big = tiny_model(tmp_path, "big-Q8_0.gguf", megabytes=24)
        hub_server.add("x/Big-GGUF", {"big-Q8_0.gguf": big})
        sent = len(hub_server.sent)
        failed = pull(hub, "x/Big-GGUF")
        assert failed.state == FAILED and "only" in (failed.error or "")
        assert "free on the disk" in (failed.error or "") and len(hub_server.sent) == sent


# The bundled models: the fit before the download equals the fit after ----------------


@pytest.mark.parametrize("bundled", ["smollm2_path", "gemma_path"])
def test_the_fit_from_the_remote_header_equals_the_local_one(
        hub_server: LoopbackHub, bundled: str, request: pytest.FixtureRequest) -> None:
    model: Path = request.getfixturevalue(bundled)
    hub_server.add(REPO, {model.name: model})
    hub = model_hub(hub_server)
    files = hub.files(REPO)
    judged = hub.judge(files, files.choices[0])
    assert judged.header.fetched < model.stat().st_size // 10, "the header, not the weights"
    assert judged.fit.fits
    job = pull(hub)
    assert job.state == DONE and job.sha256 == [hub_server.sha(model)]
    local = read_header(job.path)
    assert memory.estimate(judged.header.header) == memory.estimate(local)
    assert judged.header.header.tensors == local.tensors
    assert judged.header.header.metadata.keys() == local.metadata.keys()


def test_a_download_left_by_the_last_run_is_found_paused_and_goes_on(
        hub_server: LoopbackHub, tmp_path: Path) -> None:
    model = tiny_model(tmp_path, megabytes=4)
    hub_server.add(REPO, {NAME: model})
    before = model_hub(hub_server)
    job, go = held(before, hub_server, 1_500_000)
    before.close()  # quit mid-download: what came is on disk, the rest is not
    go.set()
    kept = download.part_of(job.path).stat().st_size

    after = model_hub(hub_server)  # the next start: nothing is asked of the Hub yet
    asked = len(hub_server.api_paths)
    (found,) = after.downloads.find_unfinished()
    assert (found.state, found.done, found.total, found.path) == (
        PAUSED, kept, model.stat().st_size, job.path)
    assert len(hub_server.api_paths) == asked
    after.downloads.resume(found)
    assert after.downloads.wait(found, timeout=120) and found.state == DONE, found.error
    assert hub_server.sent[-1].range == f"bytes={kept}-"
    assert found.sha256 == [hub_server.sha(model)]
