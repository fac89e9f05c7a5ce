"""The terminal into a slow reader: `fireside chat --json` piped into a program that reads
a line a second for its first LAGGING_LINES lines (its pipe 4 KB, the smallest Linux
allows, so it fills within the reply), against the same command writing into a file,
which never waits. The reply's own tokens/s, as its `reply` event gives them.

Target: decoding into the slow reader >= 0.95x decoding into the file: the terminal
writes on a thread of its own, so a reader that lags never holds the model back.
Rounds alternate the two, and the ratio is of the medians. Linux only (F_SETPIPE_SZ).

    python tests/benchmarks/bench_terminal.py [--rounds N]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core.models import bundled

STORY = "Write a very long story about a lighthouse keeper and the ships she saw."
TOKENS = 1200
LAGGING_LINES = 12  # read one a second, then the rest as fast as they come
PIPE_BYTES = 4096
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def command(model: Path, seed: int) -> list[str]:
    return [sys.executable, "-m", "app", "chat", "--json", "--model", str(model),
            "--temperature", "0.8", "--seed", str(seed), "--max-tokens", str(TOKENS), STORY]


def reply_rate(lines: list[str]) -> tuple[float, int]:
    """The reply event's tokens/s and tokens."""
    for line in reversed(lines):
        event = json.loads(line)
        if event.get("event") == "reply":
            return float(event["tokens_per_s"]), int(event["tokens"])
    raise RuntimeError("no reply event")


def into_file(model: Path, seed: int, env: dict[str, str]) -> tuple[float, int]:
    with tempfile.TemporaryFile("w+") as out:
        subprocess.run(command(model, seed), stdout=out, stderr=subprocess.DEVNULL,
                       stdin=subprocess.DEVNULL, env=env, check=True)
        out.seek(0)
        return reply_rate(out.read().splitlines())


def into_slow_reader(model: Path, seed: int, env: dict[str, str]) -> tuple[float, int]:
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, F_SETPIPE_SZ, PIPE_BYTES)
    process = subprocess.Popen(command(model, seed), stdout=write_end,
                               stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env)
    os.close(write_end)
    lines: list[str] = []

    def read() -> None:
        with os.fdopen(read_end) as source:
            for n, line in enumerate(source):
                lines.append(line)
                if n < LAGGING_LINES:
                    time.sleep(1.0)

    reader = threading.Thread(target=read)
    reader.start()
    process.wait()
    reader.join()
    return reply_rate(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    model = bundled.bundled_dir() / bundled.DEFAULT_MODEL_FILE
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
    name = next((line.split(":", 1)[1].strip() for line in cpu.splitlines()
                 if line.startswith("Model name")), "unknown CPU")
    print(f"CPU: {name}, {os.cpu_count()} logical CPUs; {model.name}, {TOKENS} tokens")
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "FIRESIDE_DATA_DIR": f"{home}/data",
               "FIRESIDE_CONFIG_DIR": f"{home}/config", "FIRESIDE_CACHE_DIR": f"{home}/cache"}
        slow, fast = [], []
        for round_ in range(args.rounds):
            seed = 10 + round_  # the same reply on both sides of a round
            fast.append(into_file(model, seed, env))
            slow.append(into_slow_reader(model, seed, env))
            print(f"round {round_ + 1}: file {fast[-1][0]:.1f} tok/s ({fast[-1][1]} tokens), "
                  f"slow reader {slow[-1][0]:.1f} tok/s ({slow[-1][1]} tokens)", flush=True)
    ratio = statistics.median(r for r, _ in slow) / statistics.median(r for r, _ in fast)
    print(f"decode into a slow reader / into a file: {ratio:.3f} (target >= 0.95)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
