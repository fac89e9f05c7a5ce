"""Coming back to a long conversation: time to first token with its saved sequence state
restored, against the same send with the state dropped (the history read in full), in
the same run, on both bundled models.

    python tests/benchmarks/bench_states.py [rounds]

- Reopen: another conversation took the sequence; back to the first, a new message
  (target <= 0.15x).
- Switch: another model loaded and the first one back (target <= 0.2x).
- The size of a state per 1,000 tokens.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PARAGRAPH = ("The harbour board met on Tuesday to review the lighthouse budget, the ferry "
             "timetable and the repairs to the north pier after the winter storms. ") * 5
TARGET_TOKENS = 3000


def main(rounds: int) -> int:
    os.environ["FIRESIDE_DATA_DIR"] = tempfile.mkdtemp(prefix="fireside-bench-")
    os.environ["FIRESIDE_CONFIG_DIR"] = os.environ["FIRESIDE_DATA_DIR"] + "/config"
    from app.core import bundled, settings
    from app.core.fireside import Fireside

    prefs = settings.load().settings
    prefs.temperature, prefs.seed, prefs.max_tokens, prefs.context_size = 0.0, 1, 8, 4096
    core = Fireside.open(prefs=prefs)
    models = [bundled.default_model_path(), bundled.bundled_dir() / bundled.GEMMA_FILE]
    print(f"{rounds} rounds; conversations of about {TARGET_TOKENS:,} tokens")
    try:
        for model in models:
            assert model is not None
            other = next(m for m in models if m != model)
            core.load(model).result()
            figures: dict[str, list[float]] = {"restored": [], "full": [], "switch": []}
            for _ in range(rounds):
                states = core.engine.states
                core.engine.clear_states().result()
                core.new_chat().result()
                stats = None
                n = 0
                while stats is None or stats.prompt_tokens < TARGET_TOKENS:
                    n += 1
                    stats = send(core, f"Note {n}: {PARAGRAPH}Say OK.")
                conversation = core.conversation_id
                core.new_chat().result()
                size = states.used / len(states)
                send(core, "What is a harbour?")
                core.open_conversation(conversation).result()
                back = again(core)
                figures["restored"].append(back.ttft_s)
                core.load(other).result()
                core.load(model).result()
                switched = again(core)
                figures["switch"].append(switched.ttft_s)
                core.new_chat().result()
                core.engine.clear_states().result()
                core.open_conversation(conversation).result()
                full = again(core)
                figures["full"].append(full.ttft_s)
                assert back.restored_tokens and switched.restored_tokens \
                    and not full.restored_tokens
            restored, full_s = (statistics.median(figures[k]) for k in ("restored", "full"))
            switch = statistics.median(figures["switch"])
            name = core.model.name if core.model else model.name
            print(f"{name}: {full.prompt_tokens:,}-token prompt, state "
                  f"{size / full.prompt_tokens * 1000 / 2**20:.1f} MiB per 1,000 tokens")
            print(f"  reopen  restored {restored * 1000:6.0f} ms  full {full_s * 1000:6.0f} ms"
                  f"  ratio {restored / full_s:.3f}  (target <= 0.15)")
            print(f"  switch  restored {switch * 1000:6.0f} ms  full {full_s * 1000:6.0f} ms"
                  f"  ratio {switch / full_s:.3f}  (target <= 0.2)")
    finally:
        core.close()
    return 0


def send(core: Any, text: str) -> Any:
    return core.send(text).result().future.result().reply.stats


def again(core: Any) -> Any:
    """The last reply written again: the same prompt each time."""
    rewound = core.regenerate().result()
    return rewound.turn.future.result().reply.stats


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2))
