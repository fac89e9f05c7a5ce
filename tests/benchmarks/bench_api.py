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
    from app.core.conversations.completions import read_request
    from app.ui.window import MainWindow
    from tests.heartbeat import INTERVAL_S, Heartbeat
    from tests.model_server import free_port

    app = QApplication(sys.argv[:1])
    app.setQuitOnLastWindowClosed(False)
    prefs = settings.load().settings
    prefs.temperature, prefs.seed, prefs.context_size, prefs.system_prompt = 0.0, 1, 4096, ""
    prefs.serve_api, prefs.api_port = True, free_port()
    settings.save(prefs)
    url = f"http://127.0.0.1:{prefs.api_port}/v1"
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    window = MainWindow(prefs)
    window.show()
    figures: dict[str, list[float]] = {k: [] for k in (
        "core_rate", "api_rate", "made", "ratio", "cold", "warm", "disconnect")}
    crowd: list[dict[str, Any]] = []
    arrived: list[str] = []
    gaps = [0.0]
    errors: list[str] = []
    model_name = [""]

    def directly(messages: list[dict[str, str]], max_tokens: int) -> Any:
        """The same request asked of the core, with no HTTP in between."""
        core = window.controller.core  # type: ignore[union-attr]
        asked = read_request({"messages": messages, "max_tokens": max_tokens,
                              "temperature": 0, "seed": 1})
        handle = core.answer(asked.prompt(), lambda m: asked.sampling_for(
            core.sampling(m.path), m.n_ctx)).result()
        return handle.future.result().stats

    def another_process(messages: list[dict[str, str]], max_tokens: int) -> Any:
        """``streamed`` by a client in a process of its own, as another app is."""
        code = ("import json, sys; sys.path.insert(0, sys.argv[1]); "
                "from tests.benchmarks.bench_api import streamed; "
                "print(json.dumps(streamed(sys.argv[2], json.loads(sys.argv[3]), "
                "int(sys.argv[4]))))")
        done = subprocess.run([sys.executable, "-c", code, str(ROOT), url,
                               json.dumps(messages), str(max_tokens)],
                              capture_output=True, text=True, check=True)
        return json.loads(done.stdout)

    threads = ThreadPoolExecutor(max_workers=CLIENTS + 2)  # the clients, off the GUI thread

    async def off(function: Any, *args: Any) -> Any:
        return await loop.run_in_executor(threads, function, *args)

    async def run() -> None:
        window.start()
        while window.chat is None or window.controller.core.model is None \
                or window.chat.api.server is None:  # type: ignore[union-attr]
            await asyncio.sleep(0.05)
        core = window.controller.core  # type: ignore[union-attr]
        model_name[0] = core.model.name
        story = [{"role": "user", "content": STORY}]
        await off(streamed, url, story, 16)  # warm both paths once
        for n in range(rounds):
            # Pairs in turn (core, API; then API, core) so a drift of the machine's
            # speed weighs on both alike; each pair gives a ratio.
            if n % 2:
                reply = await off(another_process, story, DECODE_TOKENS)
                stats = await off(directly, story, DECODE_TOKENS)
            else:
                stats = await off(directly, story, DECODE_TOKENS)
                reply = await off(another_process, story, DECODE_TOKENS)
            figures["core_rate"].append(stats.tokens_per_s)
            figures["api_rate"].append(reply["rate"])
            figures["made"].append(reply["made"])
            figures["ratio"].append(reply["rate"] / stats.tokens_per_s)
            if reply["tokens"] != stats.tokens:
                errors.append(f"decode: {reply['tokens']} tokens by the API, "
                              f"{stats.tokens} directly")
            system = {"role": "system", "content": f"Report {n}. {PREFIX}"}
            cold = await off(streamed, url, [system, {"role": "user", "content": "Who met?"}],
                             4)
            warm = await off(streamed, url, [system, {"role": "user", "content": "When?"}],
                             4)
            figures["cold"].append(cold["ttft"])
            figures["warm"].append(warm["ttft"])
            left = await off(streamed, url, story, DECODE_TOKENS, 5)
            while core.answering:
                await asyncio.sleep(0.001)
            figures["disconnect"].append(time.monotonic() - left["closed"])

        prompts = [f"Say something about the number {i}." for i in range(CLIENTS * EACH)]
        alone = {p: (await off(streamed, url, [{"role": "user", "content": p}], 16))["text"]
                 for p in prompts}
        heartbeat = Heartbeat()

        def client(c: int) -> None:
            for r in range(EACH):
                prompt = prompts[c * EACH + r]
                try:
                    got = streamed(url, [{"role": "user", "content": prompt}], 16)
                except Exception as err:  # counted, then shown
                    errors.append(f"{type(err).__name__}: {err}")
                    continue
                got["mixed"] = got["text"] != alone[prompt]
                got["prompt"] = prompt
                crowd.append(got)

        # The order requests reach the queue: read_request runs just before the handler
        # queues the request, with nothing awaited in between.
        from app.api import server as api_server

        def noted(body: Any) -> Any:
            arrived.append(body["messages"][0]["content"])
            return read_request(body)

        api_server.read_request = noted  # type: ignore[attr-defined]
        heartbeat.start()
        await asyncio.gather(*(off(client, c) for c in range(CLIENTS)))
        gaps.append(heartbeat.stop() - INTERVAL_S)
        window.close()
        while not window.is_shut_down:
            await asyncio.sleep(0.01)

    with loop:
        loop.run_until_complete(run())

    def median(name: str) -> float:
        return statistics.median(figures[name])

    answered = [r["prompt"] for r in sorted(crowd, key=lambda r: r["first"])]
    out_of_order = sum(a != b for a, b in zip(answered, arrived, strict=False))
    print(f"{rounds} rounds, {model_name[0]}, Fireside's API served by the window")
    print(f"decode      API {median('api_rate'):6.1f} tok/s  core {median('core_rate'):6.1f} "
          f"tok/s  ratio {median('ratio'):.3f} (median of {rounds} pairs: "
          f"{', '.join(f'{r:.2f}' for r in figures['ratio'])})  (target >= 0.95)")
    print(f"            the model made the API's replies at {median('made'):.1f} tok/s: the "
          f"client read {median('api_rate') / median('made'):.3f}x of it")
    print(f"prefix      warm {median('warm') * 1000:6.0f} ms  cold {median('cold') * 1000:6.0f}"
          f" ms  ratio {median('warm') / median('cold'):.3f}  (target <= 0.2)")
    print(f"disconnect  median {median('disconnect') * 1000:.0f} ms  worst "
          f"{max(figures['disconnect']) * 1000:.0f} ms  (target <= 200 ms)")
    print(f"crowd       {len(crowd)} of {CLIENTS * EACH} answered, {len(errors)} errors, "
          f"{sum(r['mixed'] for r in crowd)} texts not their own, {out_of_order} out of "
          f"order; longest window stall {max(gaps) * 1000:.0f} ms "
          "(target <= 50 ms)")
    for error in errors[:5]:
        print(f"  error: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 3))
