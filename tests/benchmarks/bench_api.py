"""Fireside's local API, served by the window: ratios against Fireside's own engine in the
same process, and what many clients at once get.

    python tests/benchmarks/bench_api.py [rounds]

- Decode: the tokens/s the official ``openai`` client, in a process of its own as
  another app is, reads from a streamed 1,000-token reply, against the tokens/s of the
  same reply asked of the core directly (>= 0.95x), and the speed the model made the
  API's reply at (what the client reads of it is what the server adds).
- Prefix: time to first token of a request whose 1,000-token prefix was sent just
  before, against a cold one (<= 0.2x).
- Disconnect: from the client closing its stream to the model free (<= 0.2 s).
- Crowd: 8 streaming clients x 5 requests each: all answered, first pieces in the order
  the requests reached the server, each text the one its prompt gets alone, 0 errors, and the
  longest gap of a 10 ms heartbeat in the window meanwhile (<= 50 ms).
Rounds alternate the core and the API, so both see the same machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("QT_API", "pyside6")

DECODE_TOKENS = 1000
PREFIX = "You answer questions about the report below, briefly.\n\n" + (
    "The harbour board met on Tuesday to review the lighthouse budget, the ferry "
    "timetable and the repairs to the north pier after the winter storms. ") * 28
STORY = "Write a very long, detailed story about a lighthouse keeper and a storm."
CLIENTS, EACH = 8, 5


def streamed(url: str, messages: list[dict[str, str]], max_tokens: int,
             close_after: int = 0) -> dict[str, Any]:
    """One streamed request as the official client reads it: when it was sent, its
    first piece, its text, its tokens/s (from the usage it reports)."""
    import openai

    with openai.OpenAI(base_url=url, api_key="none", max_retries=0) as client:
        sent = time.monotonic()
        first = last = 0.0
        parts: list[str] = []
        usage = None
        stream = client.chat.completions.create(
            model="any", messages=messages, stream=True, max_tokens=max_tokens,
            temperature=0.0, seed=1, stream_options={"include_usage": True})
        made = 0.0  # the tokens/s the model made this reply at, as the server says
        for chunk in stream:
            usage = chunk.usage or usage
            made = (chunk.model_extra or {}).get("timings", {}).get("predicted_per_second",
                                                                    made)
            if chunk.choices and chunk.choices[0].delta.content:
                last = time.monotonic()
                first = first or last
                parts.append(chunk.choices[0].delta.content)
                if len(parts) == close_after:
                    closed = time.monotonic()
                    stream.close()
                    return {"closed": closed}
    tokens = usage.completion_tokens if usage else len(parts)
    return {"sent": sent, "first": first, "ttft": first - sent, "text": "".join(parts),
            "tokens": tokens, "rate": (tokens - 1) / (last - first) if tokens > 1 else 0.0,
            "made": made}


def main(rounds: int) -> int:
    from PySide6.QtWidgets import QApplication

    os.environ["FIRESIDE_DATA_DIR"] = tempfile.mkdtemp(prefix="fireside-bench-")
    os.environ["FIRESIDE_CONFIG_DIR"] = os.environ["FIRESIDE_DATA_DIR"] + "/config"
    import qasync

    from app.core import settings
    from app.ui.window import MainWindow
    from tests.model_server import free_port

    app = QApplication(sys.argv[:1])
    app.setQuitOnLastWindowClosed(False)
    prefs = settings.load().settings
    prefs.temperature, prefs.seed, prefs.context_size, prefs.system_prompt = 0.0, 1, 4096, ""
    prefs.serve_api, prefs.api_port = True, free_port()
    settings.save(prefs)
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    window = MainWindow(prefs)
    window.show()
    bench = Bench(window, loop, f"http://127.0.0.1:{prefs.api_port}/v1")
    with loop:
        loop.run_until_complete(bench.run(rounds))
    bench.report(rounds)
    return 0


@dataclass
class Bench:
    """The window serving the API, and what the rounds measured of it."""

    window: Any
    loop: Any
    url: str
    # The clients, off the GUI thread.
    threads: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=CLIENTS + 2))
    figures: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in (
        "core_rate", "api_rate", "made", "ratio", "cold", "warm", "disconnect")})
    crowd: list[dict[str, Any]] = field(default_factory=list)
    arrived: list[str] = field(default_factory=list)
    gaps: list[float] = field(default_factory=lambda: [0.0])
    errors: list[str] = field(default_factory=list)
    model_name: str = ""

    def directly(self, messages: list[dict[str, str]], max_tokens: int) -> Any:
        """The same request asked of the core, with no HTTP in between."""
        from app.core.conversations.completions import read_request

        core = self.window.controller.core
        asked = read_request({"messages": messages, "max_tokens": max_tokens,
                              "temperature": 0, "seed": 1})
        handle = core.answer(asked.prompt(), lambda m: asked.sampling_for(
            core.sampling(m.path), m.n_ctx)).result()
        return handle.future.result().stats

    def another_process(self, messages: list[dict[str, str]], max_tokens: int) -> Any:
        """``streamed`` by a client in a process of its own, as another app is."""
        code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
                "from tests.benchmarks.bench_api import streamed; "
                "print(json.dumps(streamed(sys.argv[2], json.loads(sys.argv[3]), "
                "int(sys.argv[4]))))")
        done = subprocess.run([sys.executable, "-c", code, str(ROOT), self.url,
                               json.dumps(messages), str(max_tokens)],
                              capture_output=True, text=True, check=True)
        return json.loads(done.stdout)

    async def off(self, function: Any, *args: Any) -> Any:
        return await self.loop.run_in_executor(self.threads, function, *args)

    async def run(self, rounds: int) -> None:
        window = self.window
        window.start()
        while window.chat is None or window.controller.core.model is None \
                or window.chat.api.server is None:
            await asyncio.sleep(0.05)
        core = window.controller.core
        self.model_name = core.model.name
        story = [{"role": "user", "content": STORY}]
        await self.off(streamed, self.url, story, 16)  # warm both paths once
        for n in range(rounds):
            await self.decode(n, story)
            await self.prefix(n)
            await self.disconnect(core, story)
        await self.crowd_of_clients()
        window.close()
        while not window.is_shut_down:
            await asyncio.sleep(0.01)

    async def decode(self, n: int, story: list[dict[str, str]]) -> None:
        # Pairs in turn (core, API; then API, core) so a drift of the machine's
        # speed weighs on both alike; each pair gives a ratio.
        if n % 2:
            reply = await self.off(self.another_process, story, DECODE_TOKENS)
            stats = await self.off(self.directly, story, DECODE_TOKENS)
        else:
            stats = await self.off(self.directly, story, DECODE_TOKENS)
            reply = await self.off(self.another_process, story, DECODE_TOKENS)
        self.figures["core_rate"].append(stats.tokens_per_s)
        self.figures["api_rate"].append(reply["rate"])
        self.figures["made"].append(reply["made"])
        self.figures["ratio"].append(reply["rate"] / stats.tokens_per_s)
        if reply["tokens"] != stats.tokens:
            self.errors.append(f"decode: {reply['tokens']} tokens by the API, "
                               f"{stats.tokens} directly")

    async def prefix(self, n: int) -> None:
        system = {"role": "system", "content": f"Report {n}. {PREFIX}"}
        cold = await self.off(streamed, self.url,
                              [system, {"role": "user", "content": "Who met?"}], 4)
        warm = await self.off(streamed, self.url,
                              [system, {"role": "user", "content": "When?"}], 4)
        self.figures["cold"].append(cold["ttft"])
        self.figures["warm"].append(warm["ttft"])

    async def disconnect(self, core: Any, story: list[dict[str, str]]) -> None:
        left = await self.off(streamed, self.url, story, DECODE_TOKENS, 5)
        while core.answering:
            await asyncio.sleep(0.001)
        self.figures["disconnect"].append(time.monotonic() - left["closed"])

    async def crowd_of_clients(self) -> None:
        from app.api import server as api_server
        from app.core.conversations.completions import read_request
        from tests.heartbeat import INTERVAL_S, Heartbeat

        prompts = [f"Say something about the number {i}." for i in range(CLIENTS * EACH)]
        alone = {p: (await self.off(streamed, self.url, [{"role": "user", "content": p}],
                                    16))["text"]
                 for p in prompts}
        heartbeat = Heartbeat()

        # The order requests reach the queue: read_request runs just before the handler
        # queues the request, with nothing awaited in between.
        def noted(body: Any) -> Any:
            self.arrived.append(body["messages"][0]["content"])
            return read_request(body)

        api_server.read_request = noted  # type: ignore[attr-defined]
        heartbeat.start()
        await asyncio.gather(*(self.off(self.client, c, prompts, alone)
                               for c in range(CLIENTS)))
        self.gaps.append(heartbeat.stop() - INTERVAL_S)

    def client(self, c: int, prompts: list[str], alone: dict[str, str]) -> None:
        for r in range(EACH):
            prompt = prompts[c * EACH + r]
            try:
                got = streamed(self.url, [{"role": "user", "content": prompt}], 16)
            except Exception as err:  # counted, then shown
                self.errors.append(f"{type(err).__name__}: {err}")
                continue
            got["mixed"] = got["text"] != alone[prompt]
            got["prompt"] = prompt
            self.crowd.append(got)

    def median(self, name: str) -> float:
        return statistics.median(self.figures[name])

    def report(self, rounds: int) -> None:
        median, figures, crowd = self.median, self.figures, self.crowd
        answered = [r["prompt"] for r in sorted(crowd, key=lambda r: r["first"])]
        out_of_order = sum(a != b for a, b in zip(answered, self.arrived, strict=False))
        print(f"{rounds} rounds, {self.model_name}, Fireside's API served by the window")
        print(f"decode      API {median('api_rate'):6.1f} tok/s  core "
              f"{median('core_rate'):6.1f} tok/s  ratio {median('ratio'):.3f} (median of "
              f"{rounds} pairs: {', '.join(f'{r:.2f}' for r in figures['ratio'])})  "
              "(target >= 0.95)")
        print(f"            the model made the API's replies at {median('made'):.1f} tok/s: "
              f"the client read {median('api_rate') / median('made'):.3f}x of it")
        print(f"prefix      warm {median('warm') * 1000:6.0f} ms  cold "
              f"{median('cold') * 1000:6.0f} ms  ratio {median('warm') / median('cold'):.3f}"
              "  (target <= 0.2)")
        print(f"disconnect  median {median('disconnect') * 1000:.0f} ms  worst "
              f"{max(figures['disconnect']) * 1000:.0f} ms  (target <= 200 ms)")
        print(f"crowd       {len(crowd)} of {CLIENTS * EACH} answered, {len(self.errors)} "
              f"errors, {sum(r['mixed'] for r in crowd)} texts not their own, {out_of_order} "
              f"out of order; longest window stall {max(self.gaps) * 1000:.0f} ms "
              "(target <= 50 ms)")
        for error in self.errors[:5]:
            print(f"  error: {error}")


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
