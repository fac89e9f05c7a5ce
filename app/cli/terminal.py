"""``fireside chat``: a terminal chat on the same core as the window.

Plain mode streams the reply as text; ``--json`` writes only JSON lines to stdout
(``model_loaded``, ``delta``, ``reply``, ``chat_cleared``, ``models``, ``error``,
``notice``, ``tool_call``, ``tool_result``) for scripts. Everything else (progress,
notes, a tool call's question) goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from types import FrameType
from typing import Any, TextIO, TypeVar

from app.core.backend import EngineError, LoadedModel
from app.core.conversations.chat import (
    ALLOW_ALWAYS,
    ALLOW_ONCE,
    DENY,
    ChatResult,
    ChatTurn,
    ToolHooks,
)
from app.core.conversations.notices import Level
from app.core.conversations.store import StoreError
from app.core.fireside import EXIT_SAVE_S, Fireside, SessionSettings
from app.core.models.drafts import choose_draft
from app.core.options import DEFAULT_BATCH
from app.core.reply import json_schema, tool_calls
from app.core.reply.pieces import Pieces
from app.core.reply.replies import ToolRun
from app.core.tools import mcp_tools

T = TypeVar("T")


# Thinking is printed dim on a terminal (SGR 2), then back to normal for the answer.
_DIM, _UNDIM = "\x1b[2m", "\x1b[22m"


class Terminated(Exception):
    """SIGTERM or SIGHUP: finish like Ctrl-C at the prompt, saving the reply so far."""


class Output:
    def __init__(self, as_json: bool, out: TextIO = sys.stdout, err: TextIO = sys.stderr):
        self.as_json = as_json
        self.out = out
        self.err = err
        self.hide_thinking = False
        self._lock = threading.Lock()  # the reply is written on a thread of its own
        self._in_thought = False

    def event(self, event: str, /, **fields: Any) -> None:
        if self.as_json:
            self._write(self.out, json.dumps({"event": event, **fields}, ensure_ascii=False)
                        + "\n")

    def text(self, text: str) -> None:
        if self.as_json:
            return
        if self._in_thought:  # the answer begins below the thought
            self._in_thought = False
            self._write(self.out, (_UNDIM if self._styled() else "") + "\n\n")
        self._write(self.out, text)

    def thought(self, text: str) -> None:
        """A piece of thinking: dimmed on a terminal, apart from the answer."""
        if self.as_json or self.hide_thinking:
            return
        start = "" if self._in_thought else (_DIM if self._styled() else "")
        self._in_thought = True
        self._write(self.out, start + text)

    def end_reply(self) -> None:
        if self._in_thought:
            self._in_thought = False
            self._write(self.out, _UNDIM if self._styled() else "")
        self.text("\n")

    def _styled(self) -> bool:
        return bool(getattr(self.out, "isatty", lambda: False)())

    def note(self, text: str) -> None:
        self._write(self.err, text + "\n")

    def error(self, message: str) -> None:
        self._tell("error", message)

    def notice(self, message: str) -> None:
        """Something the user should know that does not stop the chat."""
        self._tell("notice", message)

    def tell(self, level: Level, message: str) -> None:
        """One of the core's notices: an info is a note on stderr, a warning a notice,
        an error an error (events with --json)."""
        if level == "info":
            self.note(message)
        else:
            self._tell("notice" if level == "warning" else "error", message)

    def _tell(self, event: str, message: str) -> None:
        if self.as_json:
            self.event(event, message=message)
        else:
            self.note(f"fireside: {message}")

    def _write(self, stream: TextIO, text: str) -> None:
        with self._lock:
            stream.write(text)
            stream.flush()


def run_chat(args: argparse.Namespace) -> int:
    out = Output(args.json)
    core = Fireside.open(args.models_dir)
    status = 1  # an exception on its way out
    try:
        status = _chat(core, args, out)
    finally:
        core.close()
        core.exit_if_left_running(status)
    return status


def _chat(core: Fireside, args: argparse.Namespace, out: Output) -> int:
    status = _report_startup(core, out)
    try:
        model_path = core.startup_model(args.model)
        draft = choose_draft(args.draft, model_path, core.library.entries) \
            if args.draft else None
    except LookupError as err:
        out.error(str(err))
        return 2
    schema, schema_problem = _read_schema(args)
    if schema_problem:
        out.error(schema_problem)
        return 2
    tools_problem = _use_tools(core, args, out)
    if tools_problem:
        out.error(tools_problem)
        return 2
    core.session = _session_settings(args, draft)
    if schema is not None:  # every reply of the session is held to it
        core.session.sampling["schema"] = schema
    out.hide_thinking = args.hide_thinking
    previous_handlers = install_signal_handlers()
    try:
        loaded = load_model(core, model_path, out, draft_required=draft is not None)
        if loaded is None:
            return 1
        if draft is not None and loaded.draft is None:
            return 2  # refused, and told: the speed asked for is not there
        if (args.conversation is not None or args.continue_last) and \
                not _go_on(core, args.conversation, out):
            return 2
        if args.attach and not _attach(core, args.attach, out):
            return 2
        if args.prompt is None and not out.as_json:
            out.note("Type /new for a new chat, /model NAME to switch, /quit to leave.")
        session = _TerminalChat(core, out, _ToolAsker(out, args.allow_tools)
                                if args.tools else None)
        if args.prompt is not None:
            session.ask(args.prompt)
        else:
            session.loop()
        return _save_the_rest(core, out) or status
    except (KeyboardInterrupt, Terminated):
        _save_the_rest(core, out)
        return 0
    finally:
        restore_signal_handlers(previous_handlers)


def _attach(core: Fireside, paths: Sequence[Path], out: Output) -> bool:
    """Bring the documents in and wait for their indexing, showing it; False (told) if
    a path does not exist. A file that cannot be read is told and left out."""
    try:
        core.attach(paths)
    except ValueError as err:
        out.error(str(err))
        return False
    shown = ""
    while not core.documents.idle(timeout=0.5):
        progress = core.documents.progress()
        line = f"Reading {Path(progress.path).name}: {progress.done}/{progress.total} files"
        if progress.active and line != shown:
            out.event("indexing", path=progress.path, done=progress.done,
                      total=progress.total, passages=progress.passages)
            if not out.as_json and sys.stderr.isatty():
                print(f"\r{line}", end="", file=sys.stderr, flush=True)
            shown = line
    if shown and not out.as_json and sys.stderr.isatty():
        print(file=sys.stderr)
    for problem in core.documents.progress().problems:
        out.notice(problem)
    return True


def _report_startup(core: Fireside, out: Output) -> int:
    """Say what went wrong before the chat began; 1 if nothing of it will be kept."""
    for notice in core.notices:
        out.notice(notice)
    status = 0
    if core.store_error:
        # Still answer (the user asked a question), but say that nothing is kept.
        out.error(f"{core.store_error}. This chat will not be saved.")
        status = 1
    if core.settings.servers:  # their models can be chosen too
        core.library.ask_servers()
        for listing in core.library.listings:
            if listing.problem:
                out.notice(listing.problem)
    return status


def _session_settings(args: argparse.Namespace, draft: Path | None) -> SessionSettings:
    """The command line's choices, for this session only: the saved settings stay as
    they are."""
    return SessionSettings(
        tool_choice=args.tool_choice, n_ctx=args.context, n_threads=args.threads,
        system_prompt=args.system,
        flash_attention=args.flash_attention, kv_cache=args.kv_cache,
        batch_size=args.batch_size, prompt_threads=args.prompt_threads,
        gpu_layers=args.gpu_layers, draft_model=str(draft) if draft else None,
        sampling={"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
                  "min_p": args.min_p, "repeat_penalty": args.repeat_penalty,
                  "seed": args.seed, "max_tokens": args.max_tokens,
                  "thinking": args.thinking, "thinking_budget": args.thinking_budget,
                  "speculation": False if args.no_speculation else None})


def _read_schema(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """``--schema``'s JSON schema (json_schema.check's text), or why it cannot be used."""
    path: Path | None = args.schema
    if path is None:
        return None, None
    if args.tools is not None:
        return None, ("--schema and --tools cannot go together: a reply is held either to "
                      "a tool call or to the schema.")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, f"{path} does not exist."
    except (OSError, UnicodeDecodeError) as err:
        return None, f"{path} cannot be read: {err}"
    try:
        return json_schema.check(json.loads(text)), None
    except json_schema.SchemaError as err:
        return None, f"The schema in {path} cannot be held: {err}"
    except ValueError as err:
        return None, f"{path} is not JSON: {err}"


def _use_tools(core: Fireside, args: argparse.Namespace, out: Output) -> str | None:
    """The servers of ``--tools`` for this session, started now; why not, if they cannot
    be used. Without ``--tools`` the terminal calls no tool."""
    if args.tools is None:
        if args.tool_choice != tool_calls.AUTO or args.allow_tools:
            return "--tool-choice and --allow-tools go with --tools FILE."
        return None
    try:
        config = json.loads(args.tools.read_text(encoding="utf-8"))
        servers = mcp_tools.read_config(config)
    except (OSError, ValueError, mcp_tools.McpError) as err:
        return f"The tool servers in {args.tools} cannot be used: {err}"
    core.toolbox.session_servers = config["mcpServers"]
    listed = core.toolbox.tools()
    problems = core.toolbox.take_problems()
    if len(problems) == len(servers):
        return " ".join(problems)
    for problem in problems:  # the others' tools are there
        out.notice(problem)
    for server in servers:
        if server.disabled:
            out.notice(f"The tool server '{server.name}' is disabled in {args.tools.name}: "
                       "it is not started.")
    names = [t.name for t in listed]
    if args.tool_choice not in (tool_calls.AUTO, tool_calls.NONE, tool_calls.REQUIRED, *names):
        return (f"--tool-choice {args.tool_choice}: no tool has that name "
                f"(the servers have {', '.join(names) or 'none'}).")
    return None


def _go_on(core: Fireside, conversation_id: int | None, out: Output) -> bool:
    """Open a stored conversation (the most recent if None) for the chat to go on with."""
    if conversation_id is None:
        latest = core.conversations()
        if not latest:
            out.error("There is no conversation to continue yet.")
            return False
        conversation_id = latest[0].id
    history = core.open_conversation(conversation_id).result()
    conversation = core.conversation()
    if history is None or conversation is None:
        out.error(f"There is no conversation with id {conversation_id}. "
                  "`fireside export --all --format json` lists them.")
        return False
    out.event("conversation_opened", id=conversation_id, title=conversation.title,
              messages=len(history))
    if not out.as_json:
        out.note(f"Going on with “{conversation.title}” ({len(history)} messages).")
    return True


def _save_the_rest(core: Fireside, out: Output) -> int:
    """Write what the disk refused earlier; 1 (and a message) if it still cannot."""
    count = core.chat.unsaved
    if not count:
        return 0
    error = core.chat.save_unsaved()
    if error is None:
        out.notice("The messages that could not be saved before are saved now.")
        return 0
    out.error(f"{count} message(s) of this chat could not be saved: {error}")
    return 1


def load_model(core: Fireside, path: Path, out: Output,
               draft_required: bool = False) -> LoadedModel | None:
    """Load ``path`` and say so; None (told) if it failed. With ``draft_required`` a
    draft model refused is told as an error: the caller ends the session."""
    def progress(fraction: float) -> None:
        if not out.as_json and sys.stderr.isatty():
            out.err.write(f"\rLoading {path.name}… {fraction:4.0%}")
            out.err.flush()

    try:
        loaded = _wait(core.load(path, progress), on_interrupt=core.cancel_load)
    except EngineError as err:
        out.error(str(err))
        return None
    if not out.as_json and sys.stderr.isatty():
        out.err.write("\r\033[K")
    options = loaded.options
    out.event("model_loaded", model=loaded.name, path=str(loaded.path),
              seconds=round(loaded.seconds, 3), base_model=loaded.base_model,
              flash_attention=options.flash_attention, kv_cache=options.kv_cache,
              batch_size=options.batch_size or DEFAULT_BATCH,
              threads=loaded.n_threads, prompt_threads=options.prompt_threads or loaded.n_threads,
              draft=loaded.draft, **_placement(loaded))
    if draft_required and loaded.draft is None:
        out.error(loaded.notice or f"{loaded.name} loaded without its draft model.")
        return loaded
    if loaded.notice:
        out.notice(loaded.notice)
    if not out.as_json:
        where = f", {loaded.placement.where}" if loaded.placement else ""
        drafted = f", drafted by {loaded.draft}" if loaded.draft else ""
        out.note(f"{loaded.name} is ready ({loaded.n_ctx:,}-token context{where}{drafted}).")
    return loaded


def _placement(model: LoadedModel | None) -> dict[str, object]:
    """Where a local model's layers are, for the JSON events."""
    plan = model.placement if model else None
    if plan is None:
        return {}
    return {"gpu_layers": plan.gpu_layers, "n_layers": plan.n_layers, "device": plan.device}


def _wait(future: Future[T], on_interrupt: Callable[[], object]) -> T:
    """Wait for ``future``; a first Ctrl-C calls ``on_interrupt`` and keeps waiting (a
    stopped reply or a cancelled load ends within a token), a second one leaves."""
    interrupted = False
    while True:
        try:
            return future.result()
        except KeyboardInterrupt:
            if interrupted:
                raise
            interrupted = True
            on_interrupt()


class _ToolAsker:
    """The terminal's part in tool calls: each shown (``tool_call`` and ``tool_result``
    events with --json), and allowed by the person at the keyboard, by --allow-tools,
    or else denied: a tool never runs unasked."""

    def __init__(self, out: Output, allow_all: bool) -> None:
        self.out = out
        self.allow_all = allow_all
        self._announced: set[str] = set()

    def hooks(self) -> ToolHooks:
        return ToolHooks(self.ask, self.shown)

    def ask(self, run: ToolRun) -> Future[str]:
        answer: Future[str] = Future()
        if self.allow_all:
            answer.set_result(ALLOW_ONCE)
        elif self.out.as_json or not sys.stdin.isatty():
            self.out.notice(f"{run.call.name} was not run: no one is at the keyboard to "
                            "allow it. --allow-tools lets tools run without asking.")
            answer.set_result(DENY)
        else:
            self.out.note(f"Allow {run.call.name}{_shown_arguments(run)}? "
                          "[o]nce / [a]lways / [n]o")
            self.out._write(self.out.err, "> ")
            choice = sys.stdin.readline().strip().lower()[:1]
            answer.set_result({"o": ALLOW_ONCE, "y": ALLOW_ONCE, "a": ALLOW_ALWAYS}.get(
                choice, DENY))
        return answer

    def shown(self, run: ToolRun) -> None:
        if run.call.id not in self._announced:
            self._announced.add(run.call.id)
            self.out.event("tool_call", id=run.call.id, name=run.call.name,
                           arguments=_arguments(run), server=run.server)
            if not self.out.as_json:
                self.out.note(f"[calling {run.call.name}{_shown_arguments(run)}]")
        if run.status in ("asking", "running"):
            return
        self.out.event("tool_result", id=run.call.id, name=run.call.name, status=run.status,
                       output=run.result)
        if not self.out.as_json:
            first = run.result.splitlines()[0] if run.result else ""
            self.out.note(f"[{run.call.name}: {run.status}] {first[:200]}")


def _arguments(run: ToolRun) -> Any:
    try:
        return json.loads(run.call.arguments or "{}")
    except ValueError:
        return run.call.arguments


def _shown_arguments(run: ToolRun) -> str:
    return f"({run.call.arguments})" if run.call.arguments not in ("", "{}") else "()"


class _TerminalChat:
    def __init__(self, core: Fireside, out: Output, tools: _ToolAsker | None = None) -> None:
        self.core = core
        self.out = out
        self.tools = tools.hooks() if tools is not None else None

    def ask(self, text: str) -> None:
        try:
            turn = self.core.send(text, tools=self.tools).result()
        except (EngineError, StoreError) as err:
            self.out.error(str(err))
            return
        writer = threading.Thread(target=self._show, args=(turn.pieces,),
                                  name="fireside-terminal-writer", daemon=True)
        writer.start()
        self._finish(turn, writer)

    def _show(self, pieces: Pieces) -> None:
        """The reply's text as it comes, on a thread of its own: a slow reader (a pipe
        into a slow program) takes larger batches and never slows the model."""
        for taken in pieces:
            if taken.thought:
                self.out.event("thinking_delta", text=taken.thought)
                self.out.thought(taken.thought)
            if taken.answer:
                self.out.event("delta", text=taken.answer)
                self.out.text(taken.answer)

    def _finish(self, turn: ChatTurn, writer: threading.Thread) -> None:
        try:
            result: ChatResult = _wait(turn.future, on_interrupt=turn.stop)
            writer.join()  # the text is all written before what follows it
        except (KeyboardInterrupt, Terminated):
            turn.stop()
            # Give the reply a moment to be saved before leaving.
            with contextlib.suppress(Exception):  # leaving anyway
                turn.future.result(timeout=EXIT_SAVE_S)
            raise
        except (EngineError, StoreError) as err:
            self.out.error(str(err))
            return
        stats = result.reply.stats
        self.out.end_reply()
        self.out.event("reply", text=result.reply.text, thinking=result.reply.thinking,
                       thinking_tokens=stats.thinking_tokens,
                       prompt_tokens=stats.prompt_tokens,
                       cached_tokens=stats.cached_tokens,
                       restored_tokens=stats.restored_tokens, tokens=stats.tokens,
                       ttft_s=round(stats.ttft_s, 4), tokens_per_s=round(stats.tokens_per_s, 2),
                       stopped=stats.stopped, finish_reason=stats.finish_reason,
                       dropped_turns=stats.dropped_turns, sources=list(turn.sources),
                       draft_proposed=stats.draft_proposed,
                       draft_accepted=stats.draft_accepted,
                       **_placement(self.core.model))
        if not self.out.as_json:
            for source in turn.sources:
                where = f", {source['location']}" if source.get("location") else ""
                self.out.note(f"[{source['n']}] {source['path']}{where}")
            if stats.stopped:
                self.out.note("[stopped]")
            if stats.dropped_turns:
                self.out.note(f"[{stats.dropped_turns} earlier turn(s) left out to fit the "
                              "context]")
        for notice in self.core.reply_notices(turn, result):
            hint = " /model switches to another model to go on." \
                if notice.about == "cut" else ""
            self.out.tell(notice.level, notice.text + hint)

    def loop(self) -> None:
        interactive = sys.stdin.isatty() and not self.out.as_json
        while True:
            if interactive:
                self.out._write(self.out.err, "> ")
            line = sys.stdin.readline()
            if not line:
                return
            line = line.rstrip("\n")
            if not line.strip():
                continue
            if not self._command(line):
                return

    def _command(self, line: str) -> bool:
        """Run one input line; False ends the session."""
        command, _, argument = line.strip().partition(" ")
        if command == "/quit":
            return False
        if command == "/new":
            self.core.new_chat().result()
            self.out.event("chat_cleared")
            if not self.out.as_json:
                self.out.note("New chat.")
        elif command == "/models":
            self._list_models()
        elif command == "/model":
            self._switch(argument.strip())
        else:
            self.ask(line)
        return True

    def _list_models(self) -> None:
        entries = self.core.library.entries
        self.out.event("models", models=[e.to_json() for e in entries])
        if not self.out.as_json:
            for entry in entries:
                state = f"unusable: {entry.error}" if entry.error else entry.quantization or ""
                if entry.embedding:  # listed, but /model refuses it
                    state = f"{state}, embedding model" if state else "embedding model"
                self.out.note(f"  {entry.name}  {state}")

    def _switch(self, query: str) -> None:
        try:
            path = self.core.library.choose(query or None, required=True)
        except LookupError as err:
            self.out.error(str(err))
            return
        load_model(self.core, path, self.out)


def install_signal_handlers() -> dict[int, Any]:
    def terminate(signum: int, _frame: FrameType | None) -> None:
        raise Terminated(signal.Signals(signum).name)

    previous: dict[int, Any] = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None:
            previous[signum] = signal.signal(signum, terminate)
    return previous


def restore_signal_handlers(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
