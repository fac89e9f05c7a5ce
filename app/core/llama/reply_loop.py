"""One reply decoded: llama-cpp-python's ``generate()`` token by token, each through the
reply's filter chain (:class:`~app.core.reply.reply_text.ReplyText`) into its pieces,
until the model ends it, a stop string or a turn marker does, the user stops it, or it
reaches its length or the context's end. A thought that has spent its budget (or that
the model ends with its end-of-generation token) is closed here, and the answer
follows; a tool call's arguments are held to the functions' schemas by a grammar.

Runs on the inference thread, inside ``Engine._generate``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, Literal

import llama_cpp

from app.core.backend import LoadedModel, PromptPlan
from app.core.llama import sampler_chain, speculation
from app.core.llama.detok import PieceDecoder
from app.core.options import Sampling
from app.core.reply import json_schema, thinking, tool_calls
from app.core.reply.pieces import Pieces
from app.core.reply.replies import FinishReason, Reply, ReplyStats
from app.core.reply.reply_text import ReplyText

Tokens = Generator[int, Any, None]


@dataclasses.dataclass(frozen=True)
class Decoded:
    """How the decoding went: why it ended, the tokens made, and when."""

    finish: FinishReason
    produced: int
    first_at: float  # the first token (perf_counter); the start when none came
    last_at: float


@dataclasses.dataclass(frozen=True)
class _MarkerTokens:
    """A thinking format's markers in this model's vocabulary."""

    closing: tuple[int, ...]  # the tokens that end a thought
    shown: frozenset[int]  # control tokens among the markers: rendered, to be told apart

    @classmethod
    def of(cls, llm: llama_cpp.Llama, fmt: thinking.ThinkingFormat,
           calls: Sequence[str] = ()) -> _MarkerTokens:
        """``calls``: the texts a tool call is written with, to be read as well."""
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        shown = {token for marker in (*fmt.markers, *calls)
                 for token in llm.tokenize(marker.encode(), add_bos=False, special=True)
                 if llama_cpp.llama_vocab_is_control(vocab, token)}
        closing = llm.tokenize(fmt.closing.encode(), add_bos=False, special=True)
        return cls(tuple(closing), frozenset(shown))


class ReplyLoop:
    """The decoding of one reply of ``model`` to ``plan``, written into ``pieces``."""

    def __init__(self, llm: llama_cpp.Llama, model: LoadedModel, plan: PromptPlan,
                 sampling: Sampling, pieces: Pieces, *,
                 drafters: speculation.Drafters | None = None) -> None:
        """``drafters``: where drafted tokens come from (None: plain decoding)."""
        self._llm, self._model, self._plan, self._sampling = llm, model, plan, sampling
        self._drafters = drafters if sampling.speculation else None
        self.tally = speculation.Tally()
        self._vocab = llama_cpp.llama_model_get_vocab(llm.model)
        self._fmt = fmt = thinking.format_for(model.template.text)
        calls = plan.tools
        self._marks = _MarkerTokens.of(llm, fmt, calls.format.shown if calls else ())
        inside = thinking.opened(_text_of(llm, plan.tokens[-16:]), fmt)
        self._budget = thinking.budget(sampling.thinking, sampling.thinking_budget)
        self.out = ReplyText(pieces, fmt, inside, (*model.stops, *sampling.stop),
                             stop_on_repeat=model.base_model,
                             calls=calls.format if calls else None,
                             drop_calls=calls is not None and not calls.allowed)
        # A call's arguments follow the functions' schemas: from the first token when the
        # request forces a call (the thought skipped), else once a call has begun. A reply
        # held to a schema follows it from the first token.
        self._grammar = None if calls is None or not calls.allowed else sampler_chain.Grammar(
            calls.grammar, None if calls.forced else tool_calls.trigger_pattern(calls.format))
        held = sampling.schema is not None
        if held:
            self._grammar = sampler_chain.Grammar(json_schema.grammar(sampling.schema or ""))
        self.tokens = list(plan.tokens)
        if inside and (self._budget == 0 or (calls and calls.forced) or held):
            # thinking off (or a call or a schema forced), and the template opened a thought
            self.tokens += self._marks.closing
            self.out.add(fmt.closing, tokens=0)
        self._decoder = PieceDecoder(self._vocab, self._marks.shown)
        self._closed = False  # Fireside has ended the thought once

    def run(self, stopping: Callable[[], bool], first_token: Callable[[], None]) -> Decoded:
        """Decode until the reply ends; ``stopping`` says the user stopped it (checked
        between tokens), ``first_token`` is called once the prompt has been read."""
        self._generator = self._stream(self.tokens)
        self._produced = 0
        self._first_at = self._last_at = time.perf_counter()
        try:
            finish = "stopped" if stopping() else self._decode(stopping, first_token)
        except RuntimeError:
            # llama_decode returns 2 when the abort callback fired mid-batch.
            if not stopping():
                raise
            finish = "stopped"
        finally:
            self._generator.close()
        if self._produced == 0:
            self._first_at = self._last_at = time.perf_counter()
        return Decoded(finish, self._produced, self._first_at, self._last_at)

    def _decode(self, stopping: Callable[[], bool],
                first_token: Callable[[], None]) -> FinishReason:
        while True:
            token = next(self._generator, None)
            if token is None:
                return "length"
            self._last_at = time.perf_counter()
            if self._produced == 0:
                first_token()
                self._first_at = self._last_at
            special = self._special(token)
            if special == "thought":  # it ended inside its thought: an answer follows
                self._close_thought([])
                continue
            if special is not None:
                return special
            self._produced += 1
            self.out.add(self._decoder.decode(token))
            ended = self._ended(self._produced, stopping)
            if ended is not None:
                return ended
            if self._over_budget():
                # The thought has had its tokens: Fireside writes its end into the
                # sequence, and the model goes on with the answer.
                self._close_thought([token])

    def reply(self, decoded: Decoded, started: float, cached: int, restored: int) -> Reply:
        """The whole reply with its figures; ``started``: when the turn began."""
        out = self.out
        out.add(self._decoder.flush(), tokens=0)
        answer, thought = out.finish()
        produced, decode_s = decoded.produced, decoded.last_at - decoded.first_at
        stats = ReplyStats(
            prompt_tokens=len(self.tokens), cached_tokens=cached, restored_tokens=restored,
            tokens=produced, ttft_s=decoded.first_at - started,
            tokens_per_s=(produced - 1) / decode_s if produced > 1 and decode_s > 0 else 0.0,
            finish_reason=decoded.finish, dropped_turns=self._plan.dropped_turns,
            model=self._model.name, thinking_tokens=out.thinking_tokens,
            thinking_s=out.thinking_s, draft_proposed=self.tally.proposed,
            draft_accepted=self.tally.accepted)
        if out.tool_calls and decoded.finish == "stop":
            stats = dataclasses.replace(stats, finish_reason="tool_calls")
        return Reply(answer, stats, thought, out.tool_calls)

    def _special(self, token: int) -> FinishReason | Literal["thought"] | None:
        """What a token that is no text does: end the reply, or end the thought (the
        model ended inside it); None for a token of text."""
        if llama_cpp.llama_vocab_is_eog(self._vocab, token):
            return "stop" if not self.out.in_thought or self._closed else "thought"
        if self._model.base_model and token not in self._marks.shown \
                and llama_cpp.llama_vocab_is_control(self._vocab, token):
            return "stop"  # a turn marker: it has begun writing the user's turn
        return None

    def _over_budget(self) -> bool:
        return self._budget is not None and self.out.in_thought \
            and self.out.thinking_tokens >= self._budget

    def _ended(self, produced: int, stopping: Callable[[], bool]) -> FinishReason | None:
        """Why the reply ends after this token, if it does."""
        if self.out.stopped:
            return "stop"
        if stopping():
            return "stopped"
        if produced >= self._sampling.max_tokens:
            return "length"
        if self._llm.n_tokens + 1 >= self._model.n_ctx:
            return "context"
        return None

    def _close_thought(self, pending: list[int]) -> None:
        """End the thought in the sequence (after ``pending``, a token not yet in it):
        the model goes on with the answer."""
        self._generator.close()
        self.out.add(self._fmt.closing, tokens=0)
        self._closed = True
        self._generator = self._stream(
            [*self._llm._input_ids.tolist(), *pending, *self._marks.closing])

    def _stream(self, prompt: list[int]) -> Tokens:
        sampling = self._sampling
        chain: dict[str, Any] = {
            "top_k": sampling.top_k, "top_p": sampling.top_p, "min_p": sampling.min_p,
            "temp": sampling.temperature, "repeat_penalty": sampling.repeat_penalty,
            "grammar": self._grammar}  # sampler_chain reads a Grammar
        if self._drafters is None:
            return self._llm.generate(prompt, **chain)
        return speculation.stream(self._llm, prompt, self._llm._init_sampler(**chain),
                                  self._drafters, self.tally)


def _text_of(llm: llama_cpp.Llama, tokens: Sequence[int]) -> str:
    return llm.detokenize(list(tokens), special=True).decode("utf-8", "replace")
