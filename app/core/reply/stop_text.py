"""Text that ends a reply: the API's ``stop`` strings, and a base model's next turn."""

from __future__ import annotations

from collections.abc import Sequence


class StopText:
    """Ends a reply at the first stop string, never sending any of it: text that could
    be the start of one is held back until the next piece says whether it is."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(stops)
        self._held = ""
        self.hit = False
        self.rest = ""  # from the stop string on, in the piece that held it

    def feed(self, piece: str) -> str:
        """What of ``piece`` may be sent now."""
        if self.hit:
            return ""
        text = self._held + piece
        found = [i for i in (text.find(s) for s in self._stops) if i >= 0]
        if found:
            self.hit, self._held = True, ""
            self.rest = text[min(found):]
            return text[:min(found)]
        keep = max((n for s in self._stops for n in range(1, len(s))
                    if text.endswith(s[:n])), default=0)
        self._held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held
