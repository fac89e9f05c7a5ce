"""``fireside servers add|list|remove``: the model servers the user chats with beside the
local models, and what each one serves (``fireside models`` lists those too)."""

from __future__ import annotations

import argparse
import json
import sys

from app.core import settings
from app.core.models.library import ModelLibrary
from app.core.remote import servers
from app.core.remote.servers import Listing


def print_listing(listing: Listing, models_only: bool = False) -> None:
    server = listing.server
    if not models_only:
        key = f", key from ${server.key_env}" if server.key_env else ""
        print(f"{server.name}  {server.url}{key}")
    if listing.problem:
        print(f"    unreachable: {listing.problem}")
    for model in listing.models:
        context = f"  ({model.context_length:,} ctx)" if model.context_length else ""
        print(f"{servers.display_name(model)}{context}" if models_only
              else f"    {model.id}{context}")


def run_servers(args: argparse.Namespace) -> int:
    loaded = settings.load()
    if loaded.problem:
        print(f"fireside: {loaded.problem}", file=sys.stderr)
    prefs = loaded.settings
    if args.action == "add":
        try:
            added = servers.add(prefs, args.name, args.url, key_env=args.key_env)
        except ValueError as err:
            print(f"fireside: {err}", file=sys.stderr)
            return 2
        for note in added.notes:
            print(f"fireside: warning: {note}", file=sys.stderr)
        settings.save(prefs)
        print(f"Added {added.server.name}. `fireside servers list` asks it for its models.")
        return 0
    if args.action == "remove":
        if not servers.remove(prefs, args.name):
            print(f"fireside: no server called “{args.name}”", file=sys.stderr)
            return 2
        settings.save(prefs)
        print(f"Removed {args.name}.")
        return 0
    known = servers.added(prefs.servers)
    if not known:
        if not args.json:  # --json: JSON lines only, here none
            print("No servers added. Add one with `fireside servers add NAME URL`.")
        return 0
    library = ModelLibrary(prefs)
    library.ask_servers()
    for listing in library.listings:
        if args.json:
            print(json.dumps({**listing.server.to_json(),
                              "models": [m.to_json() for m in listing.models],
                              "error": listing.problem}, ensure_ascii=False))
        else:
            print_listing(listing)
    return 0
