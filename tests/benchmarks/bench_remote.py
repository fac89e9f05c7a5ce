"""A model on a server, through the window: ratios against the official ``openai`` client
reading the same llama-cpp-python server on loopback, in the same run.

    python tests/benchmarks/bench_remote.py [rounds]

- Throughput: the tokens/s the window shows for a long reply, against the pieces per
  second the bare client reads for the same prompt (target >= 0.95x).
- First piece: Fireside's time to first piece against the bare client's (<= 1.1x). It is
  some 20 ms on loopback, where the machine's jitter is a few ms: each round adds
  FIRST_PIECE_PAIRS replies stopped after a few pieces, alternated, to the medians.
- Stop: from the stop to the reply finished and the stream closed (<= 0.2 s).
- Quit mid-reply: from closing the window to everything saved (<= 2 s).
- Stall: the longest gap of a 10 ms heartbeat while the window asks a server that is
  connected but silent (<= 50 ms).
Rounds alternate the client and the window, so both see the same machine. The server
stands for another machine: it gets a core of its own, the client and the window share
the others (on one machine, the window's drawing would otherwise take the server's CPU
and be counted as time to first piece).
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.core.reply.pieces import Pieces
    from app.ui.bridge import PieceStream

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_API", "pyside6")

REPLY_TOKENS = 2000
FIRST_PIECE_PAIRS = 5
STOP_AFTER = 3  # pieces
STORY = "Write a very long, detailed story about a lighthouse keeper and a storm."


def bare_client(url: str, model: str, pieces_wanted: int = 0) -> tuple[float, float, int]:
    """(seconds to the first piece, pieces per second after it, pieces) for STORY; with
    ``pieces_wanted``, the stream is closed after that many, as a stop does."""
    import openai

    with openai.OpenAI(base_url=url, api_key="none") as client:
        started = time.monotonic()
        first = last = 0.0
        pieces = 0
        stream = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": STORY}], stream=True,
            temperature=0.0, top_p=0.95, max_tokens=REPLY_TOKENS, seed=1)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                last = time.monotonic()
                first = first or last
                pieces += 1
                if pieces == pieces_wanted:
                    stream.close()
                    break
    return first - started, (pieces - 1) / (last - first) if pieces > 1 else 0.0, pieces


def main(rounds: int) -> int:
    from PySide6.QtWidgets import QApplication

    os.environ["FIRESIDE_DATA_DIR"] = tempfile.mkdtemp(prefix="fireside-bench-")
    os.environ["FIRESIDE_CONFIG_DIR"] = os.environ["FIRESIDE_DATA_DIR"] + "/config"
    import qasync

    from app.core import settings
    from app.core.models import bundled
    from app.core.remote import servers
    from app.ui.window import MainWindow
    from tests.model_server import llama_server

    model = bundled.default_model_path()
    assert model is not None
    app = QApplication(sys.argv[:1])
    app.setQuitOnLastWindowClosed(False)
    own = _server_cpu()
    with llama_server(model, n_ctx=4096, cpus=own) as server:
        prefs = settings.load().settings
        prefs.temperature, prefs.top_p, prefs.seed = 0.0, 0.95, 1
        prefs.max_tokens, prefs.system_prompt = REPLY_TOKENS, ""
        prefs.servers = [servers.Server("box", server.url).to_json()]
        settings.save(prefs)
        remote = servers.model_path("box", str(model))
        bare_client(server.url, str(model))  # the server warms up once, for both
        loop = qasync.QEventLoop(app)
        asyncio.set_event_loop(loop)
        window = MainWindow(prefs)
        window.show()
        bench = Bench(window, loop, server, str(model), remote)
        with loop:
            loop.run_until_complete(bench.run(rounds))
    bench.report(rounds, own)
    return 0


def _server_cpu() -> set[int] | None:
    """The last CPU, kept for the server alone; None where there is only one."""
    cpus = sorted(os.sched_getaffinity(0))
    own = {cpus[-1]} if len(cpus) > 1 else None
    if own:
        os.sched_setaffinity(0, set(cpus) - own)
    return own


@dataclass
class Bench:
    """The window chatting with a model on the server, and what the rounds measured."""

    window: Any
    loop: Any
    server: Any
    model: str  # the model's file, as the server names it
    remote: Path  # the same model, as the window names it
    figures: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in (
        "bare_ttft", "bare_rate", "ttft", "rate", "stop", "quit", "stall")})

    async def reply(self, text: str, stop_after: int = 0) -> tuple[object, float]:
        controller = self.window.controller
        assert controller is not None and self.window.chat is not None
        finished: asyncio.Future[object] = self.loop.create_future()
        stopped_at = [0.0]
        stopping: list[asyncio.Task[None]] = []  # held until the reply ends

        async def stop_when_shown(pieces: Pieces) -> None:
            # The window is woken only when it waits, not for each piece: count them
            # where they are written, as the user would see them come.
            while pieces.mark().answer < stop_after and not pieces.ended:
                await asyncio.sleep(0.002)
            stopped_at[0] = time.monotonic()
            controller.stop()

        def started(_name: str, stream: PieceStream) -> None:
            if stop_after:
                stopping.append(self.loop.create_task(stop_when_shown(stream.pieces)))

        def done(_text: str, stats: object) -> None:
            if not finished.done():
                finished.set_result(stats)

        controller.reply_started.connect(started)
        controller.reply_finished.connect(done)
        self.window.composer_bar.send_requested.emit(text)
        stats = await finished
        controller.reply_started.disconnect(started)
        controller.reply_finished.disconnect(done)
        return stats, time.monotonic() - stopped_at[0]

    async def run(self, rounds: int) -> None:
        await self.load_remote()
        for _ in range(rounds):
            await self.long_reply()
            for _pair in range(FIRST_PIECE_PAIRS):
                await self.first_piece_pair()
        await self.silent_server()
        await self.quit_mid_reply()

    async def load_remote(self) -> None:
        window = self.window
        window.start()
        while window.chat is None or window.chat.models.loading or \
                window.picker.list_model.row_of(self.remote) < 0:
            await asyncio.sleep(0.05)
        window.chat.models.load(self.remote)
        while window.controller.core.model is None or \
                window.controller.core.model.path != self.remote:
            await asyncio.sleep(0.05)

    async def long_reply(self) -> None:
        ttft, rate, _n = await self.loop.run_in_executor(None, bare_client, self.server.url,
                                                         self.model)
        self.figures["bare_ttft"].append(ttft)
        self.figures["bare_rate"].append(rate)
        await self.window.controller.new_chat()
        stats, _ = await self.reply(STORY)
        self.figures["ttft"].append(stats.ttft_s)  # type: ignore[attr-defined]
        self.figures["rate"].append(stats.tokens_per_s)  # type: ignore[attr-defined]

    async def first_piece_pair(self) -> None:
        ttft, _rate, _n = await self.loop.run_in_executor(
            None, bare_client, self.server.url, self.model, STOP_AFTER)
        self.figures["bare_ttft"].append(ttft)
        await self.window.controller.new_chat()
        stats, stop_s = await self.reply(STORY, stop_after=STOP_AFTER)
        self.figures["ttft"].append(stats.ttft_s)  # type: ignore[attr-defined]
        self.figures["stop"].append(stop_s)

    async def silent_server(self) -> None:
        """A server that is connected but silent, asked for its models."""
        from tests.heartbeat import INTERVAL_S, Heartbeat

        os.kill(self.server.process.pid, signal.SIGSTOP)
        heartbeat = Heartbeat()
        heartbeat.start()
        task = self.window.chat.models.ask_servers()
        if task is not None:
            await task
        gap = heartbeat.stop()
        os.kill(self.server.process.pid, signal.SIGCONT)
        self.figures["stall"].append(gap - INTERVAL_S)

    async def quit_mid_reply(self) -> None:
        window = self.window
        window.composer_bar.send_requested.emit(STORY)
        await asyncio.sleep(2.0)  # mid-reply
        closing = time.monotonic()
        window.close()
        while not window.is_shut_down:
            await asyncio.sleep(0.01)
        self.figures["quit"].append(time.monotonic() - closing)

    def median(self, name: str) -> float:
        return statistics.median(self.figures[name])

    def report(self, rounds: int, own: set[int] | None) -> None:
        median = self.median
        print(f"{rounds} rounds, SmolLM2 on llama-cpp-python's server on loopback, "
              f"on CPU {own or 'shared'}; the client and the window on the others")
        print(f"throughput  window {median('rate'):6.1f} tok/s  bare client "
              f"{median('bare_rate'):6.1f} tok/s  ratio "
              f"{median('rate') / median('bare_rate'):.3f}  (target >= 0.95)")
        print(f"first piece window {median('ttft') * 1000:6.0f} ms    bare client "
              f"{median('bare_ttft') * 1000:6.0f} ms     ratio "
              f"{median('ttft') / median('bare_ttft'):.3f}  (target <= 1.1)")
        print(f"stop -> finished  median {median('stop') * 1000:.0f} ms  worst "
              f"{max(self.figures['stop']) * 1000:.0f} ms  (target <= 200 ms)")
        print(f"quit mid-reply    {median('quit'):.2f} s  (target <= 2 s)")
        print(f"longest stall while a silent server is asked: {median('stall') * 1000:.0f} ms "
              "(target <= 50 ms)")


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
