"""``fireside serve``: the local API in a terminal, with no window, until Ctrl+C."""

from __future__ import annotations

import argparse

from app.cli.terminal import (
    Output,
    Terminated,
    install_signal_handlers,
    load_model,
    restore_signal_handlers,
)
from app.core.fireside import Fireside, SessionSettings
from app.core.models.drafts import choose_draft


def run_serve(args: argparse.Namespace) -> int:
    from app.api.server import LocalServer, ServeError, new_token  # noqa: PLC0415

    out = Output(as_json=False)
    core = Fireside.open(args.models_dir)
    previous = install_signal_handlers()
    try:
        for notice in core.notices:
            out.notice(notice)
        try:
            path = core.startup_model(args.model)
            draft = choose_draft(args.draft, path, core.library.entries) \
                if args.draft else None
        except LookupError as err:
            out.error(str(err))
            return 2
        core.session = SessionSettings(
            draft_model=str(draft) if draft else None,
            sampling={"speculation": False} if args.no_speculation else {})
        model = load_model(core, path, out, draft_required=draft is not None)
        if model is None:
            return 1
        if draft is not None and model.draft is None:
            return 2
        token = args.token
        if token == "":  # --token alone: the one the settings keep, made once
            token = core.settings.api_token or new_token()
            if token != core.settings.api_token:
                core.settings.api_token = token
                core.save_settings()
        try:
            server = LocalServer(core, args.port, token or "")
        except ServeError as err:
            out.error(str(err))
            return 1
        out.note(f"Serving {model.name} at {server.url} (this computer only). "
                 "Ctrl+C stops.")
        if token:
            out.note(f"Requests must carry the token: Authorization: Bearer {token}")
        server.run()
        return 0
    except (KeyboardInterrupt, Terminated):
        return 0
    finally:
        restore_signal_handlers(previous)
        core.close()
        core.exit_if_left_running(0)  # only a served reply keeps the model busy
