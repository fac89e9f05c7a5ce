"""The chat service: conversations, prompt building and streaming, for every face.

One message, end to end: the user message is stored, the prompt is built from the
conversation with the loaded model's template (dropping the oldest turns when the
context is full), the engine writes the reply into the turn's ``pieces``, which a face
takes from on its own thread, and the turn's own thread saves the reply as it grows and
finishes it with its stats. The window and the terminal both drive this class.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.backend import (
    Backend,
    EngineError,
    LoadedModel,
    PromptPlan,
    PromptTooLong,
    ReplyHandle,
    Session,
)
from app.core.conversations.store import (
    Conversation,
    Message,
    NotFoundError,
    Store,
    StoreError,
    default_title,
)
from app.core.conversations.unsaved import UnsavedMessages
from app.core.documents.shelf import Given
from app.core.options import LoadOptions, Sampling
from app.core.reply import templates, thinking, tool_calls
from app.core.reply.pieces import Mark, Pieces
from app.core.reply.replies import Reply, RunStatus, ToolRun
from app.core.tools.mcp_tools import MAX_RESULT_CHARS, McpError
from app.core.tools.toolbox import Toolbox

logger = logging.getLogger(__name__)

SAVE_INTERVAL_S = 0.5  # a streaming reply reaches the disk at least this often


@dataclass(frozen=True)
class ChatResult:
    conversation_id: int  # negative while the disk has refused to create the conversation
    message_id: int  # negative while the reply waits in memory to be saved
    reply: Reply
    saved: bool  # False when the disk refused the final save (the text is still shown)
    save_error: str | None = None  # why it was not saved, for the user


class ChatTurn:
    """A reply in progress, with any calls it makes and the replies after them: take its
    text as it streams (``pieces``, the replies one after another), stop it, or wait for
    its ChatResult (the last reply's)."""

    def __init__(self, conversation_id: int) -> None:
        self.conversation_id = conversation_id
        self.future: Future[ChatResult] = Future()
        self.pieces = Pieces()
        self.future.add_done_callback(lambda _done: self.pieces.end())
        self.note: str | None = None  # something a face says quietly once it is done
        # The passages (or whole files) of the documents the reply was given, best first.
        self.sources: tuple[dict[str, Any], ...] = ()
        self.stopped = threading.Event()  # also cancels a call running or asked
        # Each call's outcome, by name and arguments: a call made again is not run again.
        self.results: dict[tuple[str, str], ToolRun] = {}
        self._handle: ReplyHandle | None = None
        self._saver: _ReplySaver | None = None

    def stop(self) -> None:
        self.stopped.set()
        if self._handle is not None:
            self._handle.stop()

    def leave(self) -> None:
        """Leaving before the turn ended (a busy machine can take longer to stop than
        leaving allows): its reply's text so far is saved as stopped. Its own end, if it
        still comes before the store closes, saves over it."""
        if self._saver is not None and not self.future.done():
            self._saver.keep_as_stopped()

    def _follow(self, handle: ReplyHandle, saver: _ReplySaver) -> None:
        self._handle, self._saver = handle, saver
        if self.stopped.is_set():
            handle.stop()


# What the user answers when a tool is called.
ALLOW_ONCE, ALLOW_ALWAYS, DENY = "once", "always", "deny"


@dataclass(frozen=True)
class ToolHooks:
    """How a face takes part in the calls of a reply: it is asked before a tool runs
    (``ask`` answers ALLOW_ONCE, ALLOW_ALWAYS or DENY, at once or later) and shown each
    call as it changes (asking, running, then its result)."""

    ask: Callable[[ToolRun], Future[str]]
    shown: Callable[[ToolRun], None] = lambda run: None


@dataclass(frozen=True)
class _Asked:
    """What a turn's replies are written with, the first and those after its calls."""

    sampling: Sampling
    system_prompt: str
    tooling: Tooling | None


@dataclass(frozen=True)
class Tooling:
    """A reply's tools: where they come from, the face's part, how they may be called."""

    box: Toolbox
    hooks: ToolHooks
    choice: str = tool_calls.AUTO


@dataclass(frozen=True)
class _Step:
    """One reply of a turn, as its thread follows it."""

    turn: ChatTurn
    asked: _Asked
    handle: ReplyHandle
    saver: _ReplySaver
    conversation_id: int
    row_id: int | None  # its row in the store; None while the disk refuses it
    save_error: str | None
    calls_made: int


def _tool_use(tooling: Tooling, listed: Sequence[tool_calls.Tool],
              calls_made: int) -> tool_calls.ToolUse | None:
    """The tools a reply may call, and how, after ``calls_made`` calls in its turn."""
    # A forced choice is the first reply's: after the results the model answers, or
    # calls again of its own accord, as an agent's next step does.
    choice = tooling.choice if calls_made == 0 else tool_calls.AUTO
    if choice not in (tool_calls.AUTO, tool_calls.NONE, tool_calls.REQUIRED,
                      *(t.name for t in listed)):
        choice = tool_calls.AUTO  # its server did not start this time
    if calls_made >= tooling.box.call_bound:
        choice = tool_calls.NONE
    return tool_calls.ToolUse(tuple(listed), choice) if listed else None


def plan_prompt(session: Session, history: Sequence[Message], system_prompt: str,
                reserve: int, min_dropped: int = 0, *,
                thinking_choice: str = "on", use: tool_calls.ToolUse | None = None) -> PromptPlan:
    """Fit the conversation into the context, dropping its oldest turns if needed.

    A turn is a user message and the replies after it (with the calls they made and
    the tools' results). The system prompt and the newest user message always stay.
    Once turns must be dropped, a quarter of the context is freed at once, so the next
    turns reuse the cached prefix instead of shifting the window by one turn every time.
    ``use``: the tools the reply may call (a model Fireside runs itself).
    """
    turns = _turns(history)
    budget = session.n_ctx - reserve
    # The template's own thinking switch; earlier thoughts go back as it decides.
    variables = thinking.template_variables(session.template.text, thinking_choice)

    def plan(dropped: int) -> PromptPlan:
        messages = [entry for turn in turns[dropped:] for m in turn
                    for entry in _for_template(m)]
        system = [{"role": "system", "content": system_prompt}] if system_prompt else []
        calls = None
        generic = tool_calls.generic_messages(messages, None)
        if session.calls_tools and (use is not None or any(m.calls for m in history)):
            segments, _, calls = tool_calls.render(session.template, [*system, *messages], use,
                                              variables, check=lambda typed: _typed_only(
                                                  session, typed))
        else:
            segments = templates.render(session.template, generic,
                                        system_prompt=system_prompt or None, extra=variables)
        # A server applies its own template to plain messages: earlier thoughts stay here.
        plain = ({"role": m["role"], "content": m["content"]} for m in generic)
        return PromptPlan(session.encode(segments), dropped, (*system, *plain), tools=calls)

    dropped = min(min_dropped, len(turns) - 1)
    kept = plan(dropped)
    if len(kept.tokens) <= budget:
        return kept
    target = budget - session.n_ctx // 4
    while dropped < len(turns) - 1:
        dropped += 1
        kept = plan(dropped)
        if len(kept.tokens) <= target:
            return kept
    tokens = kept.tokens
    if len(tokens) <= budget:
        return kept
    raise PromptTooLong(
        f"This message is too long for the model's context: it needs {len(tokens):,} tokens "
        f"and {reserve:,} more for the reply, but the context holds {session.n_ctx:,}. "
        f"Shorten it, or raise the context size in settings.")


def _typed_only(session: Session, strings: list[str]) -> None:
    """A tool server's names, descriptions and results are printed by a native template
    as its own text: one holding the model's control tokens goes the generic way,
    where it stays typed text."""
    if tool_calls.holding_control_tokens(session.encode, strings) is not None:
        raise templates.TemplateError("a tool's text holds control tokens")


def _for_template(message: Message) -> list[dict[str, Any]]:
    """A stored message as templates take it: a reply that called tools is followed by
    the tools' results."""
    # The documents given with a user message go before it, as the model saw them then:
    # the conversation's prefix stays the same from turn to turn.
    content = f"{message.attached}\n\n{message.text}" if message.attached else message.text
    entry: dict[str, Any] = {"role": message.role, "content": content}
    if message.thinking:
        entry["thinking"] = message.thinking
    if not message.calls:
        return [entry]
    entry["tool_calls"] = [run.call for run in message.calls]
    return [entry, *(run.message for run in message.calls)]


def _turns(history: Sequence[Message]) -> list[list[Message]]:
    turns: list[list[Message]] = []
    for message in history:
        if message.role == "system":
            continue
        if message.role == "user" or not turns:
            turns.append([message])
        else:
            turns[-1].append(message)
    return turns


class ChatService:
    def __init__(self, engine: Backend, store: Store) -> None:
        self.engine = engine
        self.store = store
        self.conversation_id: int | None = None
        # What a full disk refused, per conversation; written again at the next save.
        self._held = UnsavedMessages(store)
        self._lock = self._held.lock  # replies finish on their turns' threads

    # Models -----------------------------------------------------------------------

    @property
    def model(self) -> LoadedModel | None:
        return self.engine.loaded

    def load_model(self, path: Path | str, options: LoadOptions | None = None,
                   on_progress: Callable[[float], None] | None = None) -> Future[LoadedModel]:
        """Switch model; the open conversation stays and continues with the new one."""
        return self.engine.load(path, options, on_progress)

    # Conversations ----------------------------------------------------------------

    def new_chat(self) -> Future[None]:
        """Start over: the sequence's history is cleared, the model stays loaded."""
        self.save_unsaved()
        self.conversation_id = None
        return self.engine.clear()

    def open(self, conversation_id: int) -> list[Message]:
        """Open a conversation; its messages, including any not saved yet."""
        self.save_unsaved()
        history = self._history(conversation_id)
        self.conversation_id = conversation_id
        return history

    def history(self) -> list[Message]:
        """The open conversation's messages, including any not saved yet."""
        if self.conversation_id is None:
            return []
        return self._history(self.conversation_id)

    @property
    def unsaved(self) -> int:
        """How many messages wait in memory because the disk refused them."""
        return self._held.count

    def save_unsaved(self) -> str | None:
        """Write what the disk refused before; returns why not if it still cannot."""
        with self._lock:
            error = self._held.write()
            if self.conversation_id is not None:
                self.conversation_id = self._held.saved_id(self.conversation_id)
            return error

    def _history(self, conversation_id: int) -> list[Message]:
        """The stored messages with the unsaved ones in their place."""
        return self._held.merged(conversation_id)

    def _save_question(self, text: str, settings: dict[str, object],
                       given: Given | None = None) -> tuple[int, str | None]:
        """Store the user's message (with the documents it is given), or hold it in
        memory if the disk refuses it."""
        attached, sources = (given.text, given.sources) if given else ("", ())
        with self._lock:
            model = self.model.name if self.model else ""
            if self.conversation_id is None:
                try:
                    created = self.store.create_conversation(default_title(text), model,
                                                             settings)
                except NotFoundError:
                    raise
                except StoreError as err:
                    self.conversation_id = self._held.hold_conversation(
                        default_title(text), model, settings, text, attached=attached,
                        sources=sources)
                    return self.conversation_id, str(err)
                self.conversation_id = created.id
            conversation_id = self.conversation_id
            if not self._held.holds(conversation_id):  # never write past unsaved messages
                try:
                    self.store.add_message(conversation_id, "user", text, attached=attached,
                                           sources=sources)
                except NotFoundError:
                    raise
                except StoreError as err:
                    self._held.hold(conversation_id, "user", text, attached=attached,
                                    sources=sources)
                    return conversation_id, str(err)
                return conversation_id, None
            self._held.hold(conversation_id, "user", text, attached=attached, sources=sources)
            error = self.save_unsaved()
            return self._held.saved_id(conversation_id), error

    def conversation(self) -> Conversation | None:
        """The open conversation, if it is saved."""
        if self.conversation_id is None or self.conversation_id < 0:
            return None
        return self.store.get_conversation(self.conversation_id)

    # Replies ----------------------------------------------------------------------

    def send(self, text: str, sampling: Sampling, system_prompt: str = "",
             tooling: Tooling | None = None, *, tools_on: bool = True,
             stopped: bool = False, given: Given | None = None) -> ChatTurn:
        """Store ``text`` as the user's message and stream the model's reply; with
        ``stopped`` (an action after it wants the model now) the reply is stopped before
        its first token; ``given``: what the reply is given of the documents.

        A disk that refuses to save never stops the reply: what it refused is held in
        memory (``unsaved``), the result says why, and the next save writes it.
        """
        self.save_unsaved()
        # A new conversation keeps the switch its chat had: tools on unless turned off.
        settings: dict[str, object] = {"system_prompt": system_prompt}
        if not tools_on:
            settings["tools"] = False
        conversation_id, error = self._save_question(text, settings, given)
        turn = self._reply(conversation_id, _Asked(sampling, system_prompt, tooling), error,
                           stopped)
        turn.sources = given.sources if given else ()
        return turn

    def regenerate(self, sampling: Sampling, system_prompt: str = "",
                   tooling: Tooling | None = None, *, stopped: bool = False) -> ChatTurn:
        """Replace the last reply (with the calls it made and the replies after them)."""
        conversation_id = self._require_conversation()
        self.save_unsaved()
        history = self._history(conversation_id)
        replies = 0
        while replies < len(history) and history[-1 - replies].role == "assistant":
            replies += 1
        if replies:
            self._held.forget_from(conversation_id, history[-replies])
        return self._reply(conversation_id, _Asked(sampling, system_prompt, tooling),
                           self._draft_error(conversation_id), stopped)

    def edit_last(self, text: str, sampling: Sampling, system_prompt: str = "",
                  tooling: Tooling | None = None, *, stopped: bool = False,
                  given: Given | None = None) -> ChatTurn:
        """Replace the last user message (and its reply) and send it again."""
        conversation_id = self._require_conversation()
        self.save_unsaved()
        users = [m for m in self._history(conversation_id) if m.role == "user"]
        if users:
            self._held.forget_from(conversation_id, users[-1])
        return self.send(text, sampling, system_prompt, tooling, stopped=stopped, given=given)

    def _draft_error(self, conversation_id: int) -> str | None:
        if not self._held.holds(conversation_id):
            return None
        return self.save_unsaved()

    def _require_conversation(self) -> int:
        if self.conversation_id is None:
            raise PromptTooLong("There is no conversation to continue.")
        return self.conversation_id

    def _reply(self, conversation_id: int, asked: _Asked, save_error: str | None,
               stopped: bool = False) -> ChatTurn:
        turn = ChatTurn(conversation_id)
        if stopped:
            turn.stop()
        self._step(turn, asked, save_error)
        return turn

    def _step(self, turn: ChatTurn, asked: _Asked, save_error: str | None,
              calls_made: int = 0, calling: ChatResult | None = None) -> None:
        """One reply of the turn (after ``calling``'s calls, if any), followed on a thread
        of its own, which saves it as it grows; if it calls tools, they run (as allowed)
        there and the next reply follows, up to the bound on calls."""
        use = None
        if asked.tooling is not None:
            listed = asked.tooling.box.tools()
            if calling is not None and turn.stopped.is_set():  # while servers started
                turn.future.set_result(calling)
                return
            use = _tool_use(asked.tooling, listed, calls_made)
        conversation_id = self._held.saved_id(turn.conversation_id)
        history = self._history(conversation_id)
        min_dropped = _last_dropped(history, self.model)
        row_id: int | None = None
        if not self._held.holds(conversation_id):  # never write past unsaved messages
            try:
                row_id = self.store.begin_reply(conversation_id).id
            except NotFoundError:
                raise
            except StoreError as err:
                save_error = str(err)
        sampling, system_prompt = asked.sampling, asked.system_prompt

        def build(session: Session) -> PromptPlan:
            reserve = min(sampling.max_tokens, session.n_ctx // 4)
            return plan_prompt(session, history, system_prompt, reserve, min_dropped,
                               thinking_choice=sampling.thinking,
                               use=use if session.calls_tools else None)

        saver = _ReplySaver(self.store, row_id, turn.pieces)
        handle = self.engine.generate(build, sampling,
                                      conversation_id if conversation_id > 0 else None,
                                      turn.pieces)
        turn._follow(handle, saver)
        step = _Step(turn, asked, handle, saver, conversation_id, row_id, save_error,
                     calls_made)
        threading.Thread(target=self._finish, args=(step,), name="fireside-reply",
                         daemon=True).start()

    def _finish(self, step: _Step) -> None:
        """The turn's thread: save the reply as it grows, then as it ended; run its
        calls, if it made any, and the reply after them."""
        turn, tooling = step.turn, step.asked.tooling
        step.saver.follow(step.handle.future)
        try:
            reply = step.handle.future.result()
        except BaseException as exc:
            step.saver.abandon()
            turn.future.set_exception(exc)
            return
        runs = tuple(ToolRun(call, tooling.box.server_of(call.name))
                     for call in reply.tool_calls) if tooling is not None else ()
        if turn.stopped.is_set():  # none of them will run
            runs = tuple(dataclasses.replace(r, status="stopped", result=STOPPED)
                         for r in runs)
        saved = step.saver.finish(reply, runs)
        message_id = step.row_id
        if not saved:
            message_id = self._held.hold(step.conversation_id, "assistant", reply.text,
                                         reply.stats.to_json(), step.row_id,
                                         thinking=reply.thinking, calls=runs)
        error = None if saved else (step.saver.error or step.save_error
                                    or "The reply was not saved.")
        assert message_id is not None
        result = ChatResult(self._held.saved_id(step.conversation_id), message_id, reply,
                            saved, error)
        if runs and not turn.stopped.is_set():
            self._run_calls(turn, step.asked, result, runs, step.calls_made)
            return
        turn.future.set_result(result)

    def _run_calls(self, turn: ChatTurn, asked: _Asked, calling: ChatResult,
                   runs: tuple[ToolRun, ...], calls_made: int) -> None:
        """Ask, run and record each call of a reply, then write the next reply (unless
        the user stopped the turn: the calling reply is then its last). On the turn's
        thread."""
        assert asked.tooling is not None
        message_id = calling.message_id
        try:
            done: list[ToolRun] = []
            repeated = 0
            for run in runs:
                key = (run.call.name, _normal(run.call.arguments))
                earlier = turn.results.get(key)
                if earlier is not None:  # a loop: the model is told, the tool not run again
                    repeated += 1
                    done.append(_shown(asked.tooling.hooks, dataclasses.replace(
                        earlier, call=run.call, result=f"{earlier.result}\n[{REPEATED}]")))
                else:
                    done.append(_run_one(run, asked.tooling, turn.stopped,
                                         self._result_limit()))
                    turn.results[key] = done[-1]
                with self._lock:
                    self._record_calls(turn.conversation_id, message_id,
                                       (*done, *runs[len(done):]))
            if turn.stopped.is_set():
                turn.future.set_result(calling)
                return
            bound = asked.tooling.box.call_bound
            made_now = bound if repeated == len(runs) else calls_made + len(runs)
            self._step(turn, asked, calling.save_error, made_now, calling)
        except (EngineError, StoreError) as exc:  # the face hears of it from the turn
            turn.future.set_exception(exc)
        except Exception as exc:
            logger.exception("the reply after the tool calls failed")
            turn.future.set_exception(EngineError(
                f"The reply after the tool calls could not be written: {exc}"))

    def _result_limit(self) -> int:
        """Characters of a tool's output the model reads: within a third of a small
        context or so (about 3.5 characters a token), so the reply after it fits."""
        model = self.model
        n_ctx = model.n_ctx if model is not None else MAX_RESULT_CHARS
        return min(MAX_RESULT_CHARS, max(2_000, n_ctx))

    def _record_calls(self, conversation_id: int, message_id: int,
                      runs: tuple[ToolRun, ...]) -> None:
        if message_id < 0 or self._held.holds(conversation_id):
            self._held.set_calls(conversation_id, message_id, runs)
            return
        try:
            self.store.set_calls(message_id, runs)
        except NotFoundError:
            pass  # the conversation was deleted meanwhile
        except StoreError as err:
            logger.warning("tool calls not saved: %s", err)
            self._held.set_calls(conversation_id, message_id, runs)


STOPPED = "The user stopped the reply."
REPEATED = ("This call was made before in this reply with the same arguments; it was "
            "not run again. Answer the user with what you have.")


def _normal(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments or "{}"), sort_keys=True)
    except ValueError:
        return arguments


def _run_one(run: ToolRun, tooling: Tooling, stopped: threading.Event,
             limit: int) -> ToolRun:
    """One call: allowed (asked if need be), run, and what the model is told."""
    box, hooks, name = tooling.box, tooling.hooks, run.call.name
    if stopped.is_set():
        return _shown(hooks, dataclasses.replace(run, status="stopped", result=STOPPED))
    if not run.server:
        return _shown(hooks, dataclasses.replace(run, status="failed",
                                                 result=f"There is no tool named {name}."))
    if not box.always_allowed(run.server, name):
        answer = hooks.ask(_shown(hooks, run))
        while True:
            try:
                decision = answer.result(timeout=0.1)
                break
            except TimeoutError:
                if stopped.is_set():
                    answer.cancel()
                    return _shown(hooks, dataclasses.replace(run, status="stopped",
                                                             result=STOPPED))
        if decision == DENY:
            return _shown(hooks, dataclasses.replace(
                run, status="denied", result=f"The user did not allow {name} to run."))
        if decision == ALLOW_ALWAYS:
            box.allow_always(run.server, name)
    running = _shown(hooks, dataclasses.replace(run, status="running"))
    try:
        output = box.call(run.call, cancel=stopped, limit=limit)
    except McpError as err:
        status: RunStatus = "stopped" if stopped.is_set() else "failed"
        return _shown(hooks, dataclasses.replace(running, status=status, result=str(err)))
    return _shown(hooks, dataclasses.replace(running, status="done", result=output))


def _shown(hooks: ToolHooks, run: ToolRun) -> ToolRun:
    hooks.shown(run)
    return run


def _last_dropped(history: Sequence[Message], model: LoadedModel | None) -> int:
    """Keep dropping as many turns as last time, so the cached prefix stays valid."""
    for message in reversed(history):
        stats = message.reply_stats if message.role == "assistant" else None
        if stats is not None:
            return 0 if model is not None and stats.model != model.name else stats.dropped_turns
    return 0


class _ReplySaver:
    """Saves a streaming reply as it grows, from the turn's pieces, on the turn's thread;
    a full disk never interrupts the reply."""

    def __init__(self, store: Store, message_id: int | None, pieces: Pieces) -> None:
        self._store = store
        self._message_id = message_id
        self._pieces = pieces
        self._mark: Mark = pieces.mark()  # where this reply begins in the turn's text
        self.error: str | None = None

    def follow(self, done: Future[Reply]) -> None:
        """Save the reply every SAVE_INTERVAL_S while it grows, until it ends."""
        saved = ("", "")
        while not wait([done], timeout=SAVE_INTERVAL_S).done:
            current = self._pieces.text_since(self._mark)
            if current != saved:
                saved = current
                self._save_growing(*current)

    def _save_growing(self, text: str, thought: str) -> None:
        self._try(lambda row: self._store.update_reply(row, text, thought))

    def finish(self, reply: Reply, calls: tuple[ToolRun, ...] = ()) -> bool:
        stats = reply.stats.to_json()
        return self._try(lambda row: self._store.finish_reply(row, reply.text, stats,
                                                             reply.thinking, calls))

    def abandon(self) -> None:
        """The reply failed: keep what it wrote, or remove its empty row."""
        if not self.keep_as_stopped():
            self._try(self._store.delete_messages_from)

    def keep_as_stopped(self) -> bool:
        """Save what the reply wrote so far as a stopped reply; False if it wrote nothing."""
        text, thought = self._pieces.text_since(self._mark)
        if not (text or thought):
            return False
        stats = {"finish_reason": "stopped", "stopped": True}
        self._try(lambda row: self._store.finish_reply(row, text, stats, thought))
        return True

    def _try(self, write: Callable[[int], object]) -> bool:
        """Write to the reply's row; False if it has none (held in memory) or the write failed."""
        if self._message_id is None:
            return False
        try:
            write(self._message_id)
        except StoreError as err:
            self.error = str(err)
            logger.warning("reply not saved: %s", err)
            return False
        return True
