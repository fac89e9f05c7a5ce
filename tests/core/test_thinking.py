"""Thinking: told apart from the answer as it streams, bounded, switched off, stored.

The parser is tested with hypothesis on every way a reply can be cut into pieces; the
rest on the real bundled model given QwQ's real template, which opens a thought in
its generation prompt (the model then starts every reply mid-thought).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.conversations import export
from app.core.conversations.store import MIGRATIONS, Store
from app.core.fireside import Fireside, SessionSettings
from app.core.llama.engine import Engine
from app.core.options import LoadOptions, Sampling
from app.core.reply import templates, thinking
from app.core.reply.pieces import Pieces, Taken
from app.core.reply.reply_text import ReplyText
from app.core.reply.thinking import HARMONY, MISTRAL, THINK, UNMARKED, ThoughtSplitter
from tests.core.helpers import ask, user
from tests.gguf_files import copy_with_metadata
from tests.reference import Reference, cut_as_a_base_model

LONG_THOUGHT = "Write a long story about a dragon who loves tea."


def run_splitter(pieces: list[str], fmt: thinking.ThinkingFormat,
                 inside: bool = False) -> tuple[str, str]:
    splitter = ThoughtSplitter(fmt, inside)
    thought: list[str] = []
    answer: list[str] = []
    for is_thought, text in [p for piece in pieces for p in splitter.feed(piece)] \
            + splitter.flush():
        (thought if is_thought else answer).append(text)
    return "".join(thought).rstrip(), "".join(answer)


def cut(text: str, points: list[int]) -> list[str]:
    points = sorted({p % (len(text) + 1) for p in points})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]


REPLIES = [
    (THINK, False, "<think>\nThe user greets me.\n</think>\n\nHello there!",
     "The user greets me.", "Hello there!"),
    (THINK, True, "Mid-thought already.\n</think>\n\nThe answer.",
     "Mid-thought already.", "The answer."),
    (MISTRAL, False, "[THINK]Count: 1, 2, 3.[/THINK]Three.", "Count: 1, 2, 3.", "Three."),
    (HARMONY, False, "<|channel|>analysis<|message|>Easy sum.<|end|><|start|>assistant"
     "<|channel|>final<|message|>2 + 2 = 4", "Easy sum.", "2 + 2 = 4"),
    (UNMARKED, False, "<think>a fine-tune's thought</think>Answer", "a fine-tune's thought",
     "Answer"),
    (UNMARKED, False, "Use the <think> tag like this: <think>x</think>",
     "", "Use the <think> tag like this: <think>x</think>"),
    (THINK, False, "No thought at all, <b>bold</b> < 3.", "",
     "No thought at all, <b>bold</b> < 3."),
]


@pytest.mark.parametrize(("fmt", "inside", "text", "thought", "answer"), REPLIES)
def test_a_whole_reply_is_split_into_its_thought_and_its_answer(
        fmt: thinking.ThinkingFormat, inside: bool, text: str, thought: str,
        answer: str) -> None:
    assert run_splitter([text], fmt, inside) == (thought, answer)


@settings(max_examples=300, deadline=None)
@given(case=st.sampled_from(REPLIES), points=st.lists(st.integers(0, 200), max_size=12))
def test_a_tag_split_across_pieces_is_never_shown(
        case: tuple[thinking.ThinkingFormat, bool, str, str, str], points: list[int]) -> None:
    """However the reply is cut (``<th`` + ``ink>``), the parts are those of the whole."""
    fmt, inside, text, thought, answer = case
    assert run_splitter(cut(text, points), fmt, inside) == (thought, answer)


def test_the_template_says_how_a_model_thinks_and_how_to_switch_it_off() -> None:
    fixtures = Path(__file__).parents[1] / "fixtures" / "templates"
    qwen3 = (fixtures / "qwen3.jinja").read_text()
    gpt_oss = (fixtures / "gpt-oss.jinja").read_text()
    assert thinking.format_for(qwen3) is THINK
    assert thinking.format_for(gpt_oss) is HARMONY
    assert thinking.format_for((fixtures / "llama-3.1.jinja").read_text()) is UNMARKED
    assert thinking.template_variables(qwen3, "off") == {"enable_thinking": False}
    assert thinking.template_variables(qwen3, "on") == {"enable_thinking": True}
    assert thinking.template_variables(gpt_oss, "high") == {"reasoning_effort": "high"}
    assert thinking.template_variables(gpt_oss, "off") == {"reasoning_effort": "low"}
    # Qwen3 switched off closes the thought in its own prompt: the reply starts outside.
    template = templates.ChatTemplate("Qwen3", "override", qwen3, "", "", True, False)
    for choice, inside in (("off", False), ("on", False)):
        prompt = "".join(s.text for s in templates.render(
            template, user("Hi"), extra=thinking.template_variables(qwen3, choice)))
        assert thinking.opened(prompt, THINK) is inside


# -- on the real model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def engine(thinking_model_path: Path) -> Iterator[Engine]:
    engine = Engine()
    engine.load(thinking_model_path).result(timeout=120)
    yield engine
    engine.close()


def greedy(**fields: object) -> Sampling:
    return Sampling(temperature=0.0, seed=1, **{"max_tokens": 160, **fields})  # type: ignore[arg-type]


def test_a_thinking_model_streams_its_thought_apart_from_its_answer(engine: Engine) -> None:
    assert engine.loaded is not None and engine.loaded.thinks
    taken: list[Taken] = []
    reply = ask(engine, user(LONG_THOUGHT), greedy(thinking_budget=40), taken=taken)
    thought = "".join(batch.thought for batch in taken)
    answer = "".join(batch.answer for batch in taken)
    assert reply.thinking and reply.text, reply
    assert thought.strip() == reply.thinking and answer == reply.text
    # Thinking comes first, then the answer, and no tag is ever shown: once a face has
    # taken some of the answer, no more thought comes.
    began = next(i for i, batch in enumerate(taken) if batch.answer)
    assert not any(batch.thought for batch in taken[began + 1:])
    assert "think>" not in reply.text and "think>" not in reply.thinking
    assert 0 < reply.stats.thinking_tokens <= reply.stats.tokens
    assert reply.stats.thinking_s > 0


@pytest.mark.parametrize("budget", [0, 10, 50])
def test_a_thinking_budget_ends_the_thought_and_an_answer_follows(engine: Engine,
                                                                   budget: int) -> None:
    unbounded = ask(engine, user(LONG_THOUGHT), greedy(max_tokens=120))
    assert unbounded.stats.thinking_tokens > 60  # it would think on past every budget here
    reply = ask(engine, user(LONG_THOUGHT), greedy(thinking_budget=budget))
    assert reply.stats.thinking_tokens <= budget + 2
    assert reply.text.strip(), "an answer follows the thought Fireside ended"
    assert reply.stats.tokens > reply.stats.thinking_tokens


def test_thinking_off_gives_an_answer_without_a_thought(engine: Engine) -> None:
    reply = ask(engine, user(LONG_THOUGHT), greedy(thinking="off"))
    assert reply.thinking == "" and reply.stats.thinking_tokens == 0
    assert reply.text.strip()


def test_the_thought_is_stored_exported_and_never_the_title(thinking_model_path: Path,
                                                             tmp_path: Path) -> None:
    core = Fireside.open([thinking_model_path.parent])
    try:
        core.session = SessionSettings(sampling={"temperature": 0.0, "seed": 1,
                                                 "max_tokens": 80, "thinking_budget": 20})
        core.load(thinking_model_path).result(timeout=120)
        result = core.send(LONG_THOUGHT).result().future.result(timeout=120)
        assert result.reply.thinking
        stored = core.store.messages(result.conversation_id)[-1]
        assert (stored.thinking, stored.text) == (result.reply.thinking, result.reply.text)
        conversation = core.store.get_conversation(result.conversation_id)
        assert conversation is not None
        assert result.reply.thinking[:20] not in conversation.title
        markdown = export.export_markdown(core.store, [result.conversation_id])
        assert "<details><summary>Thinking</summary>" in markdown
        assert markdown.index(result.reply.thinking) < markdown.index(result.reply.text)
        exported = json.loads(export.export_json(core.store, [result.conversation_id]))
        reply = json.dumps(exported)
        assert result.reply.thinking.split("\n")[0] in reply
        # Search finds what was said, not what was thought.
        said = (result.reply.text + LONG_THOUGHT).lower()
        only_thought = [w for w in result.reply.thinking.lower().split()
                        if w.isalpha() and len(w) > 3 and w not in said]
        assert only_thought
        assert core.store.list_conversations(only_thought[0]) == []
        assert core.store.list_conversations("dragon")
        # The next turn goes on with the template deciding what of the thought to keep.
        again = core.send("And then?").result().future.result(timeout=120)
        assert again.reply.text.strip()
    finally:
        core.close()


BASE_LOOPS = [
    # (pieces as a base model writes them, what the reply is)
    (["Hi there.\nHow are", " you?\nHi there.\nMore"], "Hi there.\nHow are you?"),
    # A sentence again in a later line: that line is cut before it.
    (["I love this app a lot. It works.\n", "Truly. I love this app a lot. And"],
     "I love this app a lot. It works.\nTruly."),
    # One sentence again and again in a line that never ends.
    (["The cat sat on the mat. The cat sat ", "on the mat. The cat"],
     "The cat sat on the mat."),
    # Short sentences may come twice; a line's last words count once it is complete.
    (["No. Yes. No. I see it", " now.\nI see it now.", "\nok"], "No. Yes. No. I see it now."),
    (["Ends without a newline."], "Ends without a newline."),
]


@pytest.mark.parametrize(("pieces", "reply"), BASE_LOOPS)
def test_a_base_models_reply_ends_before_a_line_or_sentence_it_repeats(
        pieces: list[str], reply: str) -> None:
    shown = Pieces()  # what a face takes
    out = ReplyText(shown, stop_on_repeat=True)
    for piece in pieces:
        out.add(piece)
    answer, _ = out.finish()
    assert answer == reply and shown.take().answer == reply
    assert out.stopped is (reply != "".join(pieces))


def test_a_base_model_stops_at_a_blank_line_a_turn_marker_or_a_line_it_repeats(
        gemma_path: Path, reference: Reference) -> None:
    engine = Engine()
    try:
        model = engine.load(gemma_path).result(timeout=120)
        assert model.base_model and "\n\n" in model.stops
        assert "<start_of_turn>user" in model.stops
        for prompt in ("Hello!", "Dear friend,", "What is the capital of France?"):
            unbounded = Sampling(temperature=0.0, seed=1, max_tokens=200)
            # Whatever this CPU's words are: llama-cpp-python's own continuation, cut
            # where a blank line, a turn marker or a repeated line begins.
            raw = reference.reply(gemma_path, prompt, unbounded)
            reply = ask(engine, user(prompt), unbounded)
            assert reply.text == cut_as_a_base_model(raw, model.stops)
            lines = [line.strip() for line in reply.text.splitlines() if line.strip()]
            assert len(lines) == len(set(lines)) and "\n\n" not in reply.text
            if reply.text != raw.strip():
                assert reply.stats.finish_reason == "stop" and reply.stats.tokens < 200
    finally:
        engine.close()


def test_a_database_from_before_thinking_opens_with_its_messages(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:
        MIGRATIONS[0](db)
        db.execute("INSERT INTO conversations (title, model, created_at, updated_at)"
                   " VALUES ('Old', 'm', 1, 1)")
        db.execute("INSERT INTO messages (conversation_id, role, text, created_at)"
                   " VALUES (1, 'user', 'kept', 1)")
        db.execute("PRAGMA user_version = 1")
    with Store(path) as store:
        [message] = store.messages(1)
        assert (message.text, message.thinking) == ("kept", "")


def test_a_broken_template_in_a_model_file_falls_back_and_says_so(smollm2_path: Path,
                                                                   tmp_path: Path) -> None:
    broken = copy_with_metadata(smollm2_path, tmp_path / "broken-template.gguf",
                                {"tokenizer.chat_template": "{% for m in messages %}{{ m."})
    engine = Engine()
    try:
        model = engine.load(broken, LoadOptions()).result(timeout=120)
        assert model.template.problem and model.notice
        assert "cannot be used" in model.notice and "ChatML" in model.notice
        reply = ask(engine, user("Hello"))
        assert reply.text.strip()  # chats go on in the built-in format, never silently
    finally:
        engine.close()
