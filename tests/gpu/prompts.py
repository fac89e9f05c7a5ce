"""Prompts of an exact length in the loaded model's own tokens.

Never a count of words or characters: each vocabulary splits text its own way (Gemma 3
has no multi-digit number tokens, so "word1234" is six of its tokens and one or two of
SmolLM2's), and a guessed prompt either misses its figure or overflows the context.
"""

from __future__ import annotations

from app.core.backend import PromptPlan, Session
from app.core.reply import templates

TEXT = ("The keeper climbed the stairs at dusk, trimmed the wick and watched the storm "
        "come in over the grey sea, counting the ships that still made for the harbour. ")


def exact_prompt(session: Session, n_tokens: int, text: str = TEXT) -> PromptPlan:
    """One user message in the model's template, exactly ``n_tokens`` long: ``text``
    repeated as often as needed, its tokens cut where the count is reached, the
    template's own tokens around it kept whole."""
    content = text
    while True:
        segments = templates.render(session.template, [{"role": "user", "content": content}])
        parts = [(segment.is_content, session.encode([segment])) for segment in segments]
        frame = sum(len(tokens) for is_content, tokens in parts if not is_content)
        written = sum(len(tokens) for is_content, tokens in parts if is_content)
        if frame >= n_tokens:
            raise ValueError(f"the template alone is {frame} tokens, more than {n_tokens}")
        if frame + written >= n_tokens:
            break
        content = text * (2 + (n_tokens - frame) * len(content) // (len(text) * max(1, written)))
    room = n_tokens - frame
    kept: list[int] = []
    for is_content, tokens in parts:
        taken = tokens[:max(0, room)] if is_content else tokens
        room -= len(taken) if is_content else 0
        kept += taken
    assert len(kept) == n_tokens
    return PromptPlan(kept)
