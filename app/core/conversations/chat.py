"""The chat service: conversations, prompt building and streaming, for every face.

One message, end to end: the user message is stored, the prompt is built from the
conversation with the loaded model's template (dropping the oldest turns when the
context is full), the engine streams the reply, and the reply is saved as it grows
and finished with its stats. The window and the terminal both drive this class.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
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
from app.core.options import LoadOptions, Sampling
from app.core.reply import templates, thinking, tool_calls
from app.core.reply.replies import Reply, RunStatus, Thinking, ToolRun
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
    """A reply in progress, with any calls it makes and the replies after them: stop it,
    or wait for its ChatResult (the last reply's)."""

    def __init__(self, conversation_id: int) -> None:
        self.conversation_id = conversation_id
        self.future: Future[ChatResult] = Future()
        self.note: str | None = None  # something a face says quietly once it is done
        self.stopped = threading.Event()  # also cancels a call running or asked
        # Each call's outcome, by name and arguments: a call made again is not run again.
        self.results: dict[tuple[str, str], ToolRun] = {}
        self._handle: ReplyHandle | None = None

    def stop(self) -> None:
        self.stopped.set()
        if self._handle is not None:
            self._handle.stop()

    def _follow(self, handle: ReplyHandle) -> None:
        self._handle = handle
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
    on_piece: Callable[[str], None] | None
    tooling: Tooling | None


@dataclass(frozen=True)
class Tooling:
    """A reply's tools: where they come from, the face's part, how they may be called."""

    box: Toolbox
    hooks: ToolHooks
    choice: str = tool_calls.AUTO


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
    entry: dict[str, Any] = {"role": message.role, "content": message.text}
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
        self._lock = self._held.lock  # replies finish on the inference thread

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

    def _save_question(self, text: str, settings: dict[str, object]) -> tuple[int, str | None]:
        """Store the user's message, or hold it in memory if the disk refuses it."""
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
                        default_title(text), model, settings, text)
                    return self.conversation_id, str(err)
                self.conversation_id = created.id
            conversation_id = self.conversation_id
            if not self._held.holds(conversation_id):  # never write past unsaved messages
                try:
                    self.store.add_message(conversation_id, "user", text)
                except NotFoundError:
                    raise
                except StoreError as err:
                    self._held.hold(conversation_id, "user", text)
                    return conversation_id, str(err)
                return conversation_id, None
            self._held.hold(conversation_id, "user", text)
            error = self.save_unsaved()
            return self._held.saved_id(conversation_id), error

    def conversation(self) -> Conversation | None:
        """The open conversation, if it is saved."""
        if self.conversation_id is None or self.conversation_id < 0:
            return None
        return self.store.get_conversation(self.conversation_id)

    # Replies ----------------------------------------------------------------------

    def send(self, text: str, sampling: Sampling, system_prompt: str = "",
             on_piece: Callable[[str], None] | None = None,
             tooling: Tooling | None = None, *, tools_on: bool = True) -> ChatTurn:
        """Store ``text`` as the user's message and stream the model's reply.

        A disk that refuses to save never stops the reply: what it refused is held in
        memory (``unsaved``), the result says why, and the next save writes it.
        """
        self.save_unsaved()
        # A new conversation keeps the switch its chat had: tools on unless turned off.
        settings: dict[str, object] = {"system_prompt": system_prompt}
        if not tools_on:
            settings["tools"] = False
        conversation_id, error = self._save_question(text, settings)
        return self._reply(conversation_id, sampling, system_prompt, on_piece, error,
                           tooling=tooling)

    def regenerate(self, sampling: Sampling, system_prompt: str = "",
                   on_piece: Callable[[str], None] | None = None,
                   tooling: Tooling | None = None) -> ChatTurn:
        """Replace the last reply (with the calls it made and the replies after them)."""
        conversation_id = self._require_conversation()
        self.save_unsaved()
        history = self._history(conversation_id)
        replies = 0
        while replies < len(history) and history[-1 - replies].role == "assistant":
            replies += 1
        if replies:
            self._held.forget_from(conversation_id, history[-replies])
        return self._reply(conversation_id, sampling, system_prompt, on_piece,
                           self._draft_error(conversation_id), tooling=tooling)

    def edit_last(self, text: str, sampling: Sampling, system_prompt: str = "",
                  on_piece: Callable[[str], None] | None = None,
                  tooling: Tooling | None = None) -> ChatTurn:
        """Replace the last user message (and its reply) and send it again."""
        conversation_id = self._require_conversation()
        self.save_unsaved()
        users = [m for m in self._history(conversation_id) if m.role == "user"]
        if users:
            self._held.forget_from(conversation_id, users[-1])
        return self.send(text, sampling, system_prompt, on_piece, tooling)

    def _draft_error(self, conversation_id: int) -> str | None:
        if not self._held.holds(conversation_id):
            return None
        return self.save_unsaved()

    def _require_conversation(self) -> int:
        if self.conversation_id is None:
            raise PromptTooLong("There is no conversation to continue.")
        return self.conversation_id

    def _reply(self, conversation_id: int, sampling: Sampling, system_prompt: str,
               on_piece: Callable[[str], None] | None, save_error: str | None, *,
               tooling: Tooling | None = None) -> ChatTurn:
        turn = ChatTurn(conversation_id)
        self._step(turn, _Asked(sampling, system_prompt, on_piece, tooling), save_error)
        return turn

    def _step(self, turn: ChatTurn, asked: _Asked, save_error: str | None,
              calls_made: int = 0, calling: ChatResult | None = None) -> None:
        """One reply of the turn (after ``calling``'s calls, if any); if it calls tools,
        they run (as allowed) on a thread of their own and the next reply follows, up to
        the bound on calls."""
        sampling, system_prompt = asked.sampling, asked.system_prompt
        on_piece, tooling = asked.on_piece, asked.tooling
        use = None
        if tooling is not None:
            listed = tooling.box.tools()
            if calling is not None and turn.stopped.is_set():  # while servers started
                turn.future.set_result(calling)
                return
            bound = tooling.box.call_bound
            # A forced choice is the first reply's: after the results the model answers,
            # or calls again of its own accord, as an agent's next step does.
            choice = tooling.choice if calls_made == 0 else tool_calls.AUTO
            if choice not in (tool_calls.AUTO, tool_calls.NONE, tool_calls.REQUIRED,
                              *(t.name for t in listed)):
                choice = tool_calls.AUTO  # its server did not start this time
            if calls_made >= bound:
                choice = tool_calls.NONE
            use = tool_calls.ToolUse(listed, choice) if listed else None
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
        saver = _ReplySaver(self.store, row_id)

        def build(session: Session) -> PromptPlan:
            reserve = min(sampling.max_tokens, session.n_ctx // 4)
            return plan_prompt(session, history, system_prompt, reserve, min_dropped,
                               thinking_choice=sampling.thinking,
                               use=use if session.calls_tools else None)

        def piece(text: str) -> None:
            saver.add(text)
            if on_piece is not None:
                on_piece(text)

        handle = self.engine.generate(build, sampling, piece,
                                      conversation_id if conversation_id > 0 else None)
        turn._follow(handle)

        def finished(done: Future[Reply]) -> None:
            try:
                reply = done.result()
            except BaseException as exc:
                saver.abandon()
                turn.future.set_exception(exc)
                return
            runs = tuple(ToolRun(call, tooling.box.server_of(call.name))
                         for call in reply.tool_calls) if tooling is not None else ()
            if turn.stopped.is_set():  # none of them will run
                runs = tuple(dataclasses.replace(r, status="stopped", result=STOPPED)
                             for r in runs)
            saved = saver.finish(reply, runs)
            message_id = row_id
            if not saved:
                message_id = self._held.hold(conversation_id, "assistant", reply.text,
                                             reply.stats.to_json(), row_id,
                                             thinking=reply.thinking, calls=runs)
            error = None if saved else saver.error or save_error or "The reply was not saved."
            assert message_id is not None
            result = ChatResult(self._held.saved_id(conversation_id), message_id, reply, saved,
                                error)
            if tooling is not None and runs and not turn.stopped.is_set():
                threading.Thread(target=self._run_calls, name="fireside-tool-calls", args=(
                    turn, asked, result, runs, calls_made), daemon=True).start()
                return
            turn.future.set_result(result)

        handle.future.add_done_callback(finished)

    def _run_calls(self, turn: ChatTurn, asked: _Asked, calling: ChatResult,
                   runs: tuple[ToolRun, ...], calls_made: int) -> None:
        """Ask, run and record each call of a reply, then write the next reply (unless
        the user stopped the turn: the calling reply is then its last)."""
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
    """Saves a streaming reply as it grows; a full disk never interrupts the reply."""

    def __init__(self, store: Store, message_id: int | None) -> None:
        self._store = store
        self._message_id = message_id
        self._parts: list[str] = []
        self._thinking: list[str] = []
        self._lock = threading.Lock()
        self._last_save = time.monotonic()
        self.error: str | None = None

    def add(self, text: str) -> None:
        with self._lock:
            (self._thinking if isinstance(text, Thinking) else self._parts).append(text)
            if time.monotonic() - self._last_save < SAVE_INTERVAL_S:
                return
            self._last_save = time.monotonic()
            current, thought = "".join(self._parts), "".join(self._thinking)
        self._try(lambda row: self._store.update_reply(row, current, thought))

    def finish(self, reply: Reply, calls: tuple[ToolRun, ...] = ()) -> bool:
        stats = reply.stats.to_json()
        return self._try(lambda row: self._store.finish_reply(row, reply.text, stats,
                                                             reply.thinking, calls))

    def abandon(self) -> None:
        """The reply failed before any text: remove its empty row."""
        with self._lock:
            text, thought = "".join(self._parts), "".join(self._thinking)
        if text or thought:
            self._try(lambda row: self._store.finish_reply(row, text, {"stopped": True},
                                                           thought))
        else:
            self._try(self._store.delete_messages_from)

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
