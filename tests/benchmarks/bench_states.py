"""Coming back to a long conversation: time to first token with its saved sequence state
restored, against the same send with the state dropped (the history read in full), in
the same run, on both bundled models.

    python tests/benchmarks/bench_states.py [rounds]

- Reopen: another conversation took the sequence; back to the first, a new message
  (target <= 0.15x).
- Switch: another model loaded and the first one back (target <= 0.2x).
- Restart: the core closed and opened again (a new engine: the state comes from the
  disk, as after quitting the app; the file is likely in the system's cache, as after a
  recent quit) (target <= 0.2x).
- Leaving: the longest the main thread (a Qt event loop with a 10 ms heartbeat, as the
  window's) waits while a new chat is started and answered, which keeps the state left
  and writes it to disk, against the same with nothing kept (target: <= 20 ms more;
  <= 50 ms in all).
- The size of a state per 1,000 tokens, in memory and on disk.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PARAGRAPH = ("The harbour board met on Tuesday to review the lighthouse budget, the ferry "
             "timetable and the repairs to the north pier after the winter storms. ") * 5
TARGET_TOKENS = 3000


def main(rounds: int) -> int:
    os.environ["FIRESIDE_DATA_DIR"] = tempfile.mkdtemp(prefix="fireside-bench-")
    os.environ["FIRESIDE_CONFIG_DIR"] = os.environ["FIRESIDE_DATA_DIR"] + "/config"
    os.environ["FIRESIDE_CACHE_DIR"] = os.environ["FIRESIDE_DATA_DIR"] + "/cache"
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QCoreApplication

    from app.core import settings
    from app.core.fireside import Fireside
    from app.core.models import bundled

    app = QCoreApplication([])
    prefs = settings.load().settings
    prefs.temperature, prefs.seed, prefs.max_tokens, prefs.context_size = 0.0, 1, 8, 4096
    bench = Bench(app, prefs, Fireside.open(prefs=prefs))
    models = [bundled.default_model_path(), bundled.bundled_dir() / bundled.GEMMA_FILE]
    print(f"{rounds} rounds; conversations of about {TARGET_TOKENS:,} tokens")
    try:
        for model in models:
            assert model is not None
            other = next(m for m in models if m != model)
            bench.core.load(model).result()
            figures: dict[str, list[float]] = {key: [] for key in (
                "restored", "full", "switch", "restart", "stall", "stall_none")}
            for _ in range(rounds):
                size, disk_size, full = bench.one_round(model, other, figures)
            name = bench.core.model.name if bench.core.model else model.name
            report(name, figures, size, disk_size, full)
    finally:
        bench.core.close()
    return 0


@dataclass
class Bench:
    """The core under test; a restart puts a new one in its place."""

    app: Any
    prefs: Any
    core: Any

    def one_round(self, model: Path, other: Path,
                  figures: dict[str, list[float]]) -> tuple[float, float, Any]:
        """Each way back to a long conversation, and the reference read in full; the
        state's size in memory and on disk, and the reference's stats."""
        states = self.core.engine.local.states  # the engine's own cache
        conversation = self.long_conversation()
        figures["stall"].append(leave_and_answer(self.app, self.core))
        size = states.used / len(states)
        assert states.disk is not None and states.disk.flush()
        disk_size = states.disk.used / len(states.disk)
        back = self.reopened(conversation)
        figures["restored"].append(back.ttft_s)
        switched = self.switched_back(model, other)
        figures["switch"].append(switched.ttft_s)
        restarted = self.restarted(model, conversation)
        figures["restart"].append(restarted.ttft_s)
        figures["stall_none"].append(self.leave_keeping_nothing())
        full = self.read_in_full(conversation)
        figures["full"].append(full.ttft_s)
        assert back.restored_tokens and switched.restored_tokens \
            and restarted.restored_tokens and not full.restored_tokens
        return size, disk_size, full

    def long_conversation(self) -> int:
        """A new conversation of some TARGET_TOKENS tokens, with nothing kept before it."""
        core = self.core
        core.engine.clear_states().result()
        core.new_chat().result()
        stats = None
        n = 0
        while stats is None or stats.prompt_tokens < TARGET_TOKENS:
            n += 1
            stats = send(core, f"Note {n}: {PARAGRAPH}Say OK.")
        conversation = core.conversation_id
        assert conversation is not None
        return conversation

    def reopened(self, conversation: int) -> Any:
        self.core.open_conversation(conversation).result()
        return again(self.core)

    def switched_back(self, model: Path, other: Path) -> Any:
        self.core.load(other).result()
        self.core.load(model).result()
        return again(self.core)

    def restarted(self, model: Path, conversation: int) -> Any:
        from app.core.fireside import Fireside

        self.core.close()  # quitting keeps it on disk
        self.core = Fireside.open(prefs=self.prefs)
        self.core.load(model).result()
        self.core.open_conversation(conversation).result()
        return again(self.core)

    def leave_keeping_nothing(self) -> float:
        """leave_and_answer with nothing kept: the reference for its wait."""
        local = self.core.engine.local
        keep = local._keep_sequence
        local._keep_sequence = lambda: None
        gap = leave_and_answer(self.app, self.core)
        local._keep_sequence = keep
        return gap

    def read_in_full(self, conversation: int) -> Any:
        """The conversation again with every state dropped: the history read in full."""
        core = self.core
        core.open_conversation(conversation).result()
        core.new_chat().result()
        core.engine.clear_states().result()
        core.open_conversation(conversation).result()
        return again(core)


def report(name: str, figures: dict[str, list[float]], size: float, disk_size: float,
           full: Any) -> None:
    median = {key: statistics.median(values) for key, values in figures.items()}
    full_s = median["full"]
    print(f"{name}: {full.prompt_tokens:,}-token prompt, state "
          f"{size / full.prompt_tokens * 1000 / 2**20:.1f} MiB per 1,000 tokens in "
          f"memory, {disk_size / full.prompt_tokens * 1000 / 2**20:.1f} MiB on disk")
    for key, label, target in (("restored", "reopen ", "0.15"),
                               ("switch", "switch ", "0.2"),
                               ("restart", "restart", "0.2")):
        print(f"  {label} restored {median[key] * 1000:6.0f} ms  full "
              f"{full_s * 1000:6.0f} ms  ratio {median[key] / full_s:.3f}  "
              f"(target <= {target})")
    print(f"  leaving: main thread's longest wait {median['stall'] * 1000:.0f} ms, "
          f"{median['stall_none'] * 1000:.0f} ms with nothing kept: "
          f"{(median['stall'] - median['stall_none']) * 1000:+.0f} ms "
          "(target <= +20 ms, <= 50 ms)")


def leave_and_answer(app: Any, core: Any) -> float:
    """New chat and a short question in it, the sequence's history left behind; the
    main thread's longest gap between heartbeats meanwhile, in seconds."""
    from PySide6.QtCore import QEventLoop, QTimer

    from tests.heartbeat import Heartbeat

    beat, loop, poll = Heartbeat(), QEventLoop(), QTimer()
    beat.start()
    core.new_chat()
    reply = core.send("What is a harbour?")
    poll.timeout.connect(lambda: loop.quit() if reply.done() and reply.result().future.done()
                         else None)
    poll.start(5)
    loop.exec()
    poll.stop()
    gap = beat.stop()
    reply.result().future.result()
    return gap


def send(core: Any, text: str) -> Any:
    return core.send(text).result().future.result().reply.stats


def again(core: Any) -> Any:
    """The last reply written again: the same prompt each time."""
    rewound = core.regenerate().result()
    return rewound.turn.future.result().reply.stats


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2))
