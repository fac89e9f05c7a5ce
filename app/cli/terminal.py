"""``fireside chat``: a terminal chat on the same core as the window.

Plain mode streams the reply as text; ``--json`` writes only JSON lines to stdout
(``model_loaded``, ``delta``, ``reply``, ``chat_cleared``, ``models``, ``error``,
``notice``) for scripts. Everything else (progress, notes) goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from types import FrameType
from typing import Any, TextIO, TypeVar

from app.core import catalog, cpu_backends, settings
from app.core.chat import ChatResult, ChatService, ChatTurn
from app.core.engine import EXIT_CLOSE_S, EXIT_SAVE_S, Engine, EngineError, LoadedModel
from app.core.models import choose_model
from app.core.options import LoadOptions, Sampling
from app.core.store import Store, StoreError, open_store

T = TypeVar("T")


class _Terminated(Exception):
    """SIGTERM or SIGHUP: finish like Ctrl-C at the prompt, saving the reply so far."""


class Output:
    def __init__(self, as_json: bool, out: TextIO = sys.stdout, err: TextIO = sys.stderr):
        self.as_json = as_json
        self.out = out
        self.err = err
        self._lock = threading.Lock()  # pieces arrive on the inference thread

    def event(self, name: str, **fields: Any) -> None:
        if self.as_json:
            self._write(self.out, json.dumps({"event": name, **fields}, ensure_ascii=False)
                        + "\n")

    def text(self, text: str) -> None:
        if not self.as_json:
            self._write(self.out, text)

    def note(self, text: str) -> None:
        self._write(self.err, text + "\n")

    def error(self, message: str) -> None:
        if self.as_json:
            self.event("error", message=message)
        else:
            self.note(f"fireside: {message}")

    def notice(self, message: str) -> None:
        """Something the user should know that does not stop the chat."""
        if self.as_json:
            self.event("notice", message=message)
        else:
            self.note(f"fireside: {message}")

    def _write(self, stream: TextIO, text: str) -> None:
        with self._lock:
            stream.write(text)
            stream.flush()


def run_chat(args: argparse.Namespace) -> int:
    loaded_settings = settings.load()
    prefs = loaded_settings.settings
    out = Output(args.json)
    if loaded_settings.problem:
        out.notice(loaded_settings.problem)
    folders = catalog.default_folders([Path(p) for p in prefs.model_folders], args.models_dir)
    entries = catalog.scan(folders, catalog.app_stores(prefs.disabled_sources))
    try:
        model_path = choose_model(args.model, entries, prefs)
    except LookupError as err:
        out.error(str(err))
        return 2
    load_options, sampling, system_prompt = _model_settings(prefs, model_path, args)

    engine = Engine()
    cpu_notice = cpu_backends.notice()
    if cpu_notice:
        out.notice(cpu_notice)
    status = 0
    try:
        store = open_store()
    except StoreError as err:
        # Still answer (the user asked a question), but say that nothing is kept.
        out.error(f"{err}. This chat will not be saved.")
        store = Store(":memory:")
        status = 1
    if store.notice:
        out.notice(store.notice)
    chat = ChatService(engine, store)
    previous_handlers = _install_signal_handlers()
    try:
        if _load(chat, model_path, load_options, out) is None:
            return 1
        prefs.last_model = str(model_path)
        _remember(prefs)
        session = _Session(chat, out, sampling=sampling, system_prompt=system_prompt,
                           entries=entries, prefs=prefs, args=args)
        if args.prompt is not None:
            session.ask(args.prompt)
        else:
            session.loop()
        return _save_the_rest(chat, out) or status
    except (KeyboardInterrupt, _Terminated):
        _save_the_rest(chat, out)
        return 0
    finally:
        _restore_signal_handlers(previous_handlers)
        engine.close(timeout=EXIT_CLOSE_S)
        store.close()


def _save_the_rest(chat: ChatService, out: Output) -> int:
    """Write what the disk refused earlier; 1 (and a message) if it still cannot."""
    if not chat.unsaved:
        return 0
    count = chat.unsaved
    error = chat.save_unsaved()
    if error is None:
        out.notice("The messages that could not be saved before are saved now.")
        return 0
    out.error(f"{count} message(s) of this chat could not be saved: {error}")
    return 1


def _remember(prefs: settings.Settings) -> None:
    with contextlib.suppress(OSError):  # remembering the last model is only a convenience
        settings.save(prefs)


def _load(chat: ChatService, path: Path, options: LoadOptions,
          out: Output) -> LoadedModel | None:
    def progress(fraction: float) -> None:
        if not out.as_json and sys.stderr.isatty():
            out.err.write(f"\rLoading {path.name}… {fraction:4.0%}")
            out.err.flush()

    future = chat.load_model(path, options, progress)
    try:
        loaded = _wait(future, on_interrupt=chat.engine.cancel_load)
    except EngineError as err:
        out.error(str(err))
        return None
    if not out.as_json and sys.stderr.isatty():
        out.err.write("\r\033[K")
    out.event("model_loaded", model=loaded.name, path=str(loaded.path),
              seconds=round(loaded.seconds, 3))
    if not out.as_json:
        out.note(f"{loaded.name} is ready ({loaded.n_ctx:,}-token context). "
                 "Type /new for a new chat, /model NAME to switch, /quit to leave.")
    return loaded


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


def _model_settings(prefs: settings.Settings, model: Path, args: argparse.Namespace
                    ) -> tuple[LoadOptions, Sampling, str]:
    """The settings a model runs with: the defaults, then its own, then the command line's."""
    load_options = dataclasses.replace(prefs.load_options(model), **_given(
        n_ctx=args.context, n_threads=args.threads))
    sampling = dataclasses.replace(prefs.sampling(model), **_given(
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, min_p=args.min_p,
        repeat_penalty=args.repeat_penalty, seed=args.seed, max_tokens=args.max_tokens))
    system_prompt = args.system if args.system is not None else prefs.system_prompt_for(model)
    return load_options, sampling, system_prompt


def _given(**values: Any) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


class _Session:
    def __init__(self, chat: ChatService, out: Output, *, sampling: Any, system_prompt: str,
                 entries: list[catalog.ModelEntry], prefs: settings.Settings,
                 args: argparse.Namespace) -> None:
        self.chat = chat
        self.args = args
        self.out = out
        self.sampling = sampling
        self.system_prompt = system_prompt
        self.entries = entries
        self.prefs = prefs

    def ask(self, text: str) -> None:
        try:
            turn = self.chat.send(text, self.sampling, self.system_prompt, self._piece)
        except (EngineError, StoreError) as err:
            self.out.error(str(err))
            return
        self._finish(turn)

    def _piece(self, text: str) -> None:
        self.out.event("delta", text=text)
        self.out.text(text)

    def _finish(self, turn: ChatTurn) -> None:
        try:
            result: ChatResult = _wait(turn.future, on_interrupt=turn.stop)
        except (KeyboardInterrupt, _Terminated):
            turn.stop()
            # Give the reply a moment to be saved before leaving.
            with contextlib.suppress(Exception):  # leaving anyway
                turn.future.result(timeout=EXIT_SAVE_S)
            raise
        except EngineError as err:
            self.out.error(str(err))
            return
        stats = result.reply.stats
        self.out.text("\n")
        self.out.event("reply", text=result.reply.text, prompt_tokens=stats.prompt_tokens,
                       cached_tokens=stats.cached_tokens, tokens=stats.tokens,
                       ttft_s=round(stats.ttft_s, 4), tokens_per_s=round(stats.tokens_per_s, 2),
                       stopped=stats.stopped, finish_reason=stats.finish_reason,
                       dropped_turns=stats.dropped_turns)
        if not self.out.as_json:
            if stats.stopped:
                self.out.note("[stopped]")
            if stats.dropped_turns:
                self.out.note(f"[{stats.dropped_turns} earlier turn(s) left out to fit the "
                              "context]")
        if not result.saved:
            self.out.error(f"This reply could not be saved ({result.save_error}). It is "
                           "kept in memory and saved as soon as the disk has room.")

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
            self.chat.new_chat().result()
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
        self.out.event("models", models=[e.to_json() for e in self.entries])
        if not self.out.as_json:
            for entry in self.entries:
                state = f"unusable: {entry.error}" if entry.error else entry.quantization or ""
                self.out.note(f"  {entry.name}  {state}")

    def _switch(self, query: str) -> None:
        try:
            path = choose_model(query or None, self.entries, self.prefs, required=True)
        except LookupError as err:
            self.out.error(str(err))
            return
        load_options, sampling, system_prompt = _model_settings(self.prefs, path, self.args)
        if _load(self.chat, path, load_options, self.out) is not None:
            self.sampling, self.system_prompt = sampling, system_prompt
            self.prefs.last_model = str(path)
            _remember(self.prefs)


def _install_signal_handlers() -> dict[int, Any]:
    def terminate(signum: int, _frame: FrameType | None) -> None:
        raise _Terminated(signal.Signals(signum).name)

    previous: dict[int, Any] = {}
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None:
            previous[signum] = signal.signal(signum, terminate)
    return previous


def _restore_signal_handlers(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
