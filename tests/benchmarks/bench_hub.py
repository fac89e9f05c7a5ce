"""The Hub's downloads and header reads, against a Hub on loopback serving the bundled
models (tests/loopback_hub.py), in one run.

    python tests/benchmarks/bench_hub.py [rounds]

- Download speed: Fireside's downloader (the file written, its sha256 computed) against
  ``curl -L -o`` fetching the same file from the same server; rounds alternate the two
  and the ratio is of the medians (target >= 0.9x). Twice: with the server sending as
  fast as loopback goes (over 1 GB/s; there the sha256 Fireside checks costs a share of
  the two cores curl does not pay, so ``curl`` then ``sha256sum`` is shown too), and at
  the pace of a 1 Gbit/s link.
- Header read to judge the fit: bytes and requests, and the share of the file (goal:
  well under 10 %); the estimate from the remote header against the one from the same
  file on disk (they must be equal).
- Bytes fetched again after a cut at a random point (target <= 1 MB).
"""

from __future__ import annotations

import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.core import settings  # noqa: E402
from app.core.hub import download  # noqa: E402
from app.core.hub.service import ModelHub  # noqa: E402
from app.core.llama import memory  # noqa: E402
from app.core.models import bundled  # noqa: E402
from app.core.models.gguf import read_header  # noqa: E402
from tests.loopback_hub import LoopbackHub  # noqa: E402

GBIT = 125e6  # bytes a second
MODELS = {"SmolLM2 135M": "SmolLM2-135M-Instruct.Q4_1.gguf",
          "Gemma 3 270M": "gemma-3-270m-q4_k_m.gguf"}


def fireside_fetch(hub: ModelHub, repo: str, target: Path) -> float:
    """Seconds to fetch the file and check its sha256, once the Hub has been asked for
    it (as curl is given the address)."""
    files = hub.files(repo)
    (file,) = files.choices[0].files
    wanted = download.Wanted(repo, files.commit, file.name, file.size, file.sha256)
    access = hub.access()
    started = time.perf_counter()
    with access.client() as client:
        download.fetch(access, client, wanted, target, on_bytes=lambda n: None,
                       stop=download.Stopper())
    return time.perf_counter() - started


def curl_fetch(url: str, target: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["curl", "-sfL", "-o", str(target), url], check=True)
    return time.perf_counter() - started


def curl_and_sha256sum(url: str, target: Path) -> float:
    started = time.perf_counter()
    subprocess.run(["curl", "-sfL", "-o", str(target), url], check=True)
    subprocess.run(["sha256sum", str(target)], check=True, capture_output=True)
    return time.perf_counter() - started


def speeds(path: Path, repo: str, work: Path, rounds: int,
           pace: float | None = None) -> dict[str, list[float]]:
    """Seconds per download, Fireside's, curl's and curl's with sha256sum, alternated,
    from a Hub in a process of its own (in this one it would share the interpreter's
    lock with the client), sending at ``pace`` bytes a second if given."""
    paced = ["--pace", str(pace)] if pace else []
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "loopback_hub.py"),
                               *paced, f"{repo}={path}"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None and server.stdin is not None
    endpoint = server.stdout.readline().strip()
    hub = ModelHub(settings.Settings(hub_endpoint=endpoint), lambda: work / "models")
    url = hub.access().file_url(repo, hub.files(repo).commit, path.name)
    ways = {"fireside": lambda target: fireside_fetch(hub, repo, target),
            "curl": lambda target: curl_fetch(url, target),
            "curl + sha256sum": lambda target: curl_and_sha256sum(url, target)}
    if pace:
        del ways["curl + sha256sum"]
    times: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for i in range(rounds):
            order = list(ways)[:: 1 if i % 2 else -1]
            for name in order:
                target = work / f"round{i}.gguf"
                times[name].append(ways[name](target))
                target.unlink()
    finally:
        server.stdin.close()
        server.wait(timeout=30)
    return times


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    if shutil.which("curl") is None:
        sys.exit("curl is needed for the reference")
    server = LoopbackHub()
    work = Path(tempfile.mkdtemp(prefix="fireside-bench-hub-"))
    prefs = settings.Settings(hub_endpoint=server.endpoint)
    hub = ModelHub(prefs, lambda: work / "models")
    try:
        for label, name in MODELS.items():
            path = bundled.bundled_dir() / name
            repo = f"bench/{name.removesuffix('.gguf')}"
            server.add(repo, {name: path})
            print(f"\n{label}: {path.stat().st_size / 1e6:,.0f} MB")
            files = hub.files(repo)
            judged = hub.judge(files, files.choices[0])
            share = judged.header.fetched / path.stat().st_size
            same = memory.estimate(judged.header.header) == memory.estimate(read_header(path))
            print(f"  header read: {judged.header.fetched:,} bytes in {judged.header.requests} "
                  f"requests = {share:.1%} of the file; estimate equals the local one: {same}")

            size = path.stat().st_size
            for pace, how in ((None, "loopback at full speed"), (GBIT, "paced at 1 Gbit/s")):
                times = speeds(path, repo, work, rounds, pace)
                median = {name: statistics.median(taken) for name, taken in times.items()}
                rates = ", ".join(f"{name} {size / took / 1e6:,.0f} MB/s"
                                  for name, took in median.items())
                ratios = ", ".join(f"{median[name] / median['fireside']:.3f}x against {name}"
                                   for name in median if name != "fireside")
                print(f"  download, {how}: {rates}; Fireside at {ratios} (medians of "
                      f"{rounds})")

            refetched = []
            for _ in range(3):
                cut = random.randrange(1 << 20, size - (1 << 20))
                server.cut_at[name] = cut
                before = len(server.sent)
                target = work / "cut.gguf"
                fireside_fetch(hub, repo, target)
                target.unlink()
                resumed = [s for s in server.sent[before:] if s.range != "bytes=0-"]
                start = int(resumed[0].range.removeprefix("bytes=").rstrip("-"))  # type: ignore[union-attr]
                refetched.append(cut - start)
            print(f"  fetched again after a cut at a random point: {max(refetched):,} bytes "
                  f"at most (3 cuts)")
    finally:
        hub.close()
        server.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
