"""The local engine and the servers' models behind one ``Backend``: the core and the chat
service see one model at a time, wherever it runs.

Loading a server's model leaves the local model loaded (switching back is instant);
a load that fails leaves the model in use as it was, on either side.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

from app.core.backend import (
    Backend,
    KeptStates,
    LoadedModel,
    PromptBuilder,
    ReplyHandle,
)
from app.core.options import LoadOptions, Sampling
from app.core.remote import servers
from app.core.reply.pieces import Pieces


class Backends:
    def __init__(self, local: Backend, remote: Backend) -> None:
        self.local = local
        self.remote = remote
        self._active = local

    @property
    def loaded(self) -> LoadedModel | None:
        return self._active.loaded

    def load(self, path: Path | str, options: LoadOptions | None = None,
             on_progress: Callable[[float], None] | None = None) -> Future[LoadedModel]:
        side = self.remote if servers.on_server(path) else self.local
        done: Future[LoadedModel] = Future()

        def finished(load: Future[LoadedModel]) -> None:
            try:
                model = load.result()
            except BaseException as exc:  # handed on as it came
                done.set_exception(exc)
                return
            self._active = side  # before anyone waiting on the load hears of it
            done.set_result(model)

        side.load(path, options, on_progress).add_done_callback(finished)
        return done

    def cancel_load(self) -> None:
        self.local.cancel_load()
        self.remote.cancel_load()

    def clear(self) -> Future[None]:
        return self._active.clear()

    def tokenize(self, text: str) -> Future[list[int]] | None:
        """The loaded model's tokens for ``text``, on its own thread; None where the
        tokenizer is a server's."""
        tokenize = getattr(self._active, "tokenize", None)
        return tokenize(text) if callable(tokenize) else None

    def generate(self, build: PromptBuilder, sampling: Sampling, owner: int | None = None,
                 pieces: Pieces | None = None) -> ReplyHandle:
        return self._active.generate(build, sampling, owner, pieces)

    def stop(self) -> None:
        self.local.stop()
        self.remote.stop()

    def kept_states(self) -> KeptStates:
        return self.local.kept_states()  # a server keeps its own

    def clear_states(self) -> Future[None]:
        return self.local.clear_states()

    def forget_states(self, owner: int) -> Future[None]:
        return self.local.forget_states(owner)

    def close(self, timeout: float = 2.0) -> bool:
        deadline = time.monotonic() + timeout
        for side in (self.remote, self.local):
            side.close(0)  # both begin closing now
        return all([side.close(max(0.0, deadline - time.monotonic()))
                    for side in (self.local, self.remote)])
