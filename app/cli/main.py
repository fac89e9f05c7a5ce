"""The terminal commands of ``fireside``: ``models``, ``search``, ``pull``, ``chat``,
``serve``, ``export``, ``servers`` and ``devices``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from app.core.options import FLASH_ATTENTION, KV_CACHE_BYTES, checked_gpu_layers
from app.core.reply.thinking import THINKING_CHOICES


class _VersionAction(argparse.Action):
    """``--version``: the installed version is read only when asked (it is not free)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from app import __version__  # noqa: PLC0415 - importlib.metadata is slow to load

        print(f"Fireside {__version__}")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fireside", description="Chat with local GGUF language models, privately.",
        epilog="fireside MODEL.gguf opens the window (or the one already open) on that "
               "model, and adds it to the models.")
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("--models-dir", action="append", default=[], type=Path,
                        metavar="DIR", help="an extra folder of GGUF models (repeatable)")
    parser.add_argument("--log-level", default=os.environ.get("FIRESIDE_LOG", "WARNING"),
                        help=argparse.SUPPRESS)
    commands = parser.add_subparsers(dest="command")
    # The order of the commands here is the order `--help` lists them in.
    _add_models(commands)
    _add_hub(commands)
    _add_chat(commands)
    _add_servers(commands)
    _add_serve(commands)
    _add_devices(commands)
    _add_export(commands)
    return parser


_Commands = argparse._SubParsersAction  # argparse names no public type for it


def _add_models(commands: _Commands[argparse.ArgumentParser]) -> None:
    models = commands.add_parser("models", help="list the models Fireside can find")
    models.add_argument("--json", action="store_true", help="one JSON object per model")


def _add_chat(commands: _Commands[argparse.ArgumentParser]) -> None:
    chat = commands.add_parser("chat", help="chat in the terminal")
    chat.add_argument("prompt", nargs="?", help="answer this and exit (else read stdin)")
    chat.add_argument("--model", "-m", help="a .gguf path or a model name from `models`")
    chat.add_argument("--system", help="system prompt")
    _add_sampling(chat)
    _add_loading(chat)
    _add_speculation(chat)
    _add_thinking(chat)
    _add_tools(chat)
    chat.add_argument("--json", action="store_true", help="JSON lines on stdout")
    chat.add_argument("--schema", type=Path, metavar="FILE.json",
                      help="hold every reply to this JSON schema (the reply is JSON)")
    chat.add_argument("--attach", action="append", default=[], type=Path, metavar="PATH",
                      help="a file or folder the replies answer from (repeatable)")
    going_on = chat.add_mutually_exclusive_group()
    going_on.add_argument("--conversation", type=int, metavar="ID",
                          help="go on with this stored conversation (ids: `fireside export "
                               "--all --format json`)")
    going_on.add_argument("--continue", dest="continue_last", action="store_true",
                          help="go on with the most recent conversation")


def _add_sampling(chat: argparse.ArgumentParser) -> None:
    chat.add_argument("--temperature", type=float)
    chat.add_argument("--top-p", type=float)
    chat.add_argument("--top-k", type=int)
    chat.add_argument("--min-p", type=float)
    chat.add_argument("--repeat-penalty", type=float)
    chat.add_argument("--seed", type=int)
    chat.add_argument("--max-tokens", type=int)


def _add_loading(chat: argparse.ArgumentParser) -> None:
    chat.add_argument("--context", type=int, help="context size in tokens")
    chat.add_argument("--threads", type=int, help="threads for generating")
    chat.add_argument("--prompt-threads", type=int, help="threads for reading the prompt")
    chat.add_argument("--batch-size", type=int, help="prompt tokens read at once (default 512)")
    chat.add_argument("--flash-attention", choices=FLASH_ATTENTION,
                      help="auto (default): on where llama.cpp runs it")
    chat.add_argument("--kv-cache", choices=tuple(KV_CACHE_BYTES),
                      help="the KV cache's type: f16 (default), q8_0 or q4_0 (less memory)")
    chat.add_argument("--gpu-layers", metavar="auto|all|off|N",
                      help="layers on the GPU: auto (default: as many as fit), all, off, or N")


def _add_speculation(command: argparse.ArgumentParser) -> None:
    command.add_argument("--draft", metavar="MODEL",
                         help="a small model of the same vocabulary (a .gguf path or a model "
                              "name) that drafts tokens for the model to check")
    command.add_argument("--no-speculation", action="store_true",
                         help="no speculative decoding (slower where replies repeat "
                              "their input)")


def _add_thinking(chat: argparse.ArgumentParser) -> None:
    chat.add_argument("--thinking", choices=THINKING_CHOICES,
                      help="a thinking model's thinking: on, off, or gpt-oss's effort")
    chat.add_argument("--thinking-budget", type=int, metavar="N",
                      help="end a thought after N tokens, so that the answer comes")
    chat.add_argument("--hide-thinking", action="store_true",
                      help="print only the answer, not the thinking before it")


def _add_tools(chat: argparse.ArgumentParser) -> None:
    chat.add_argument("--tools", type=Path, metavar="MCP.JSON",
                      help="tool servers the model may call, as the mcpServers JSON of "
                           "Claude Desktop, LM Studio or Cursor")
    chat.add_argument("--allow-tools", action="store_true",
                      help="run every tool call without asking (for runs without a person)")
    chat.add_argument("--tool-choice", default="auto", metavar="auto|required|none|NAME",
                      help="whether the model may, must or must not call a tool, or which")


def _add_hub(commands: _Commands[argparse.ArgumentParser]) -> None:
    search = commands.add_parser("search", help="search the Hugging Face Hub for GGUF models "
                                 "(connects to the Hub, or HF_ENDPOINT)")
    search.add_argument("text", nargs="?", default="", help="words in the repository's name")
    search.add_argument("--sort", choices=["downloads", "likes", "recent"],
                        default="downloads")
    search.add_argument("--json", action="store_true", help="one JSON object per repository")
    pull = commands.add_parser("pull", help="download a model from the Hub into Fireside's "
                               "models folder (resumes where it stopped)")
    pull.add_argument("ref", metavar="OWNER/REPO[:QUANT]",
                      help="a repository, and a quantization (default: the one that fits "
                           "this machine best)")
    pull.add_argument("--file", metavar="NAME", help="the repository's file to download")
    pull.add_argument("--dry-run", action="store_true",
                      help="say what would be downloaded and whether it fits; download no "
                           "weights")
    pull.add_argument("--json", action="store_true",
                      help="events as JSON lines: plan, progress, downloaded or error")


def _add_servers(commands: _Commands[argparse.ArgumentParser]) -> None:
    servers = commands.add_parser("servers", help="model servers to chat with beside local "
                                  "models (OpenAI-compatible: llama-server, vLLM, Ollama…)")
    what = servers.add_subparsers(dest="action", required=True)
    add = what.add_parser("add", help="add a server (Fireside connects to it only when asked)")
    add.add_argument("name", help="a name for it, e.g. big-box")
    add.add_argument("url", help="its API's address, e.g. http://192.168.1.20:8080/v1")
    add.add_argument("--key-env", metavar="VAR",
                     help="the environment variable that holds its key (Fireside never "
                          "stores the key)")
    listed = what.add_parser("list", help="the servers added and the models each serves")
    listed.add_argument("--json", action="store_true", help="one JSON object per server")
    remove = what.add_parser("remove", help="forget a server")
    remove.add_argument("name")


def _add_serve(commands: _Commands[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve", help="serve a model to other apps on this computer (OpenAI-compatible API "
        "at http://127.0.0.1:8484/v1), with no window")
    serve.add_argument("--port", type=int, help="the port (default 8484, else the next free)")
    serve.add_argument("--model", "-m", help="a .gguf path or a model name from `models`")
    _add_speculation(serve)
    serve.add_argument("--token", nargs="?", const="", metavar="TOKEN",
                       help="require this token of every request; alone: the token kept in "
                            "the settings (made once)")


def _add_devices(commands: _Commands[argparse.ArgumentParser]) -> None:
    devices = commands.add_parser("devices", help="the devices llama.cpp can run models on, "
                                  "with their memory")
    devices.add_argument("--json", action="store_true", help="one JSON object per device")


def _add_export(commands: _Commands[argparse.ArgumentParser]) -> None:
    export = commands.add_parser("export", help="write conversations to stdout")
    export.add_argument("id", nargs="?", type=int, help="a conversation id (default: latest)")
    export.add_argument("--all", action="store_true", help="every conversation")
    export.add_argument("--format", choices=["md", "json"], default="md")


def _validate(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    checks: list[tuple[str, Callable[[float], bool], str]] = [
        ("temperature", lambda v: v >= 0, "--temperature must be 0 or more"),
        ("top_p", lambda v: 0 < v <= 1, "--top-p must be in (0, 1]"),
        ("top_k", lambda v: v >= 0, "--top-k must be 0 or more"),
        ("min_p", lambda v: 0 <= v <= 1, "--min-p must be in [0, 1]"),
        ("max_tokens", lambda v: v > 0, "--max-tokens must be positive"),
        ("context", lambda v: 256 <= v <= 1 << 20, "--context must be 256 to 1048576"),
        ("threads", lambda v: v > 0, "--threads must be positive"),
        ("prompt_threads", lambda v: v > 0, "--prompt-threads must be positive"),
        ("batch_size", lambda v: 32 <= v <= 8192, "--batch-size must be 32 to 8192"),
        ("thinking_budget", lambda v: v >= 0, "--thinking-budget must be 0 or more"),
    ]
    for name, ok, message in checks:
        value = getattr(args, name, None)
        if value is not None and not ok(value):
            parser.error(message)
    if args.gpu_layers is not None and checked_gpu_layers(args.gpu_layers) is None:
        parser.error(f"--gpu-layers must be auto, all, off or a number of layers, "
                     f"not {args.gpu_layers!r}")


def _model_file(parser: argparse.ArgumentParser, argv: Sequence[str]
                ) -> tuple[list[str], Path | None]:
    """``fireside MODEL.gguf`` (what a file manager runs): the command line without the
    file, and the file. argparse alone would take the file for a command's name."""
    commands = next(a.choices for a in parser._actions if isinstance(a, _Commands))
    # What follows an option that takes a value (or the start of one's name) is its value.
    valued = [name for a in parser._actions if a.nargs != 0 for name in a.option_strings]
    words = list(argv)
    at = 0
    while at < len(words):
        word = words[at]
        if len(word) > 2 and any(name.startswith(word) for name in valued):
            at += 2
        elif word.startswith("-"):
            at += 1
        elif word in commands or not _names_a_file(word):
            break  # a command, or a mistyped one that argparse will name
        else:
            return [*words[:at], *words[at + 1:]], Path(word)
    return words, None


def _names_a_file(word: str) -> bool:
    return word.lower().endswith(".gguf") or os.sep in word or "/" in word \
        or os.path.exists(word)


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line, read and checked; logging set up for the level it asks for."""
    parser = _parser()
    words, model_file = _model_file(parser, sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(words)
    args.open = model_file
    if model_file is not None and args.command is not None:
        parser.error(f"{model_file} is a model file for the window; the terminal's "
                     f"commands take one as --model")
    level = args.log_level.upper()
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    if level == "WARNING":
        # llama.cpp warns about quirks of model files that users cannot act on.
        logging.getLogger("fireside.llama").setLevel(logging.ERROR)
    if args.command == "chat":
        _validate(parser, args)
    if args.command == "serve" and args.port is not None and not 1 <= args.port <= 65535:
        parser.error("--port must be 1 to 65535")
    return args


def run(args: argparse.Namespace) -> int:
    """Run a terminal command (``models``, ``search``, ``pull``, ``chat``, ``export``...)."""
    if args.command == "models":
        return _models(args)
    if args.command == "export":
        return _export(args)
    if args.command == "devices":
        return _devices(args)
    if args.command == "serve":
        from app.cli.serve import run_serve  # noqa: PLC0415

        return run_serve(args)
    if args.command == "servers":
        from app.cli.servers import run_servers  # noqa: PLC0415

        return run_servers(args)
    if args.command in ("search", "pull"):
        from app.cli import hub  # noqa: PLC0415

        return hub.run_search(args) if args.command == "search" else hub.run_pull(args)
    from app.cli.terminal import run_chat  # noqa: PLC0415 - loads llama only when chatting

    return run_chat(args)


def chat_instead_of_window(args: argparse.Namespace) -> int:
    """A terminal chat with the saved settings: for a build that has no window."""
    for name in ("prompt", "model", "system", "temperature", "top_p", "top_k", "min_p",
                 "repeat_penalty", "seed", "max_tokens", "context", "threads",
                 "prompt_threads", "batch_size", "flash_attention", "kv_cache", "gpu_layers",
                 "thinking",
                 "thinking_budget", "conversation", "draft", "no_speculation"):
        setattr(args, name, None)
    if args.open is not None:  # the file the window would have opened
        args.model = str(args.open)
    args.hide_thinking = False
    args.continue_last = False
    args.json = False
    args.schema = args.tools = None
    args.tool_choice, args.allow_tools, args.attach = "auto", False, []
    args.command = "chat"
    return run(args)


def _models(args: argparse.Namespace) -> int:
    from app.core import settings  # noqa: PLC0415
    from app.core.models.catalog import SERVER_PREFIX  # noqa: PLC0415
    from app.core.models.library import ModelLibrary  # noqa: PLC0415

    loaded = settings.load()
    if loaded.problem:
        print(f"fireside: {loaded.problem}", file=sys.stderr)
    library = ModelLibrary(loaded.settings, args.models_dir)
    library.rescan()
    library.ask_servers()  # none unless the user added one
    entries = [e for e in library.entries if not e.source.startswith(SERVER_PREFIX)]
    listings = library.listings
    from app.cli.servers import print_listing  # noqa: PLC0415

    if args.json:
        from app.core.llama import devices, offload  # noqa: PLC0415 - loads llama.cpp

        hardware = devices.survey()
        for entry in entries:
            record = entry.to_json()
            plan = offload.would_go(entry, loaded.settings.load_options(entry.path), hardware)
            if plan is not None:
                record |= {"gpu_layers": plan.gpu_layers, "n_layers": plan.n_layers}
            print(json.dumps(record, ensure_ascii=False))
        for listing in listings:
            for model in listing.models:
                print(json.dumps(model.to_json(), ensure_ascii=False))
            if listing.problem:
                print(json.dumps({"server": listing.server.name, "error": listing.problem},
                                 ensure_ascii=False))
        return 0
    for listing in listings:
        print_listing(listing, models_only=True)
    if not entries:
        from app.core import paths  # noqa: PLC0415

        print(f"No models found. Put .gguf files in {paths.models_dir()}")
        return 0
    for entry in entries:
        if entry.error:
            print(f"{entry.name}  —  unusable: {entry.error}\n    {entry.path}")
            continue
        size = f"{entry.size_bytes / 1e6:,.0f} MB"
        details = ", ".join(str(x) for x in (
            "embedding model" if entry.embedding else None,
            "base model" if entry.base_model else None, entry.architecture,
            entry.size_label, entry.quantization, size) if x)
        context = f"{entry.context_length:,} ctx" if entry.context_length else ""
        print(f"{entry.name}  ({details}{', ' + context if context else ''})\n    {entry.path}")
    return 0


def _devices(args: argparse.Namespace) -> int:
    from app.core.llama import devices, memory  # noqa: PLC0415 - loads llama.cpp

    found = devices.list_devices()
    if args.json:
        for device in found:
            print(json.dumps(device.to_json(), ensure_ascii=False))
        return 0
    for device in found:
        print(f"{device.name}  ({device.backend}, {device.kind}): {device.description}\n"
              f"    {memory.format_bytes(device.free)} free of "
              f"{memory.format_bytes(device.total)}")
    problem = devices.gpu_support()
    if problem:
        print(f"Models run on the CPU: {problem}.")
    return 0


def _export(args: argparse.Namespace) -> int:
    from app.core.conversations import export  # noqa: PLC0415
    from app.core.conversations.store import StoreError, open_store  # noqa: PLC0415

    try:
        store = open_store()
    except StoreError as err:
        print(f"fireside: {err}", file=sys.stderr)
        return 1
    if store.notice:
        print(f"fireside: {store.notice}", file=sys.stderr)
    try:
        conversations = store.list_conversations()
        if args.all:
            ids = [c.id for c in conversations]
        elif args.id is not None:
            if store.get_conversation(args.id) is None:
                print(f"fireside: no conversation with id {args.id}", file=sys.stderr)
                return 2
            ids = [args.id]
        else:
            ids = [conversations[0].id] if conversations else []
        writer = export.export_json if args.format == "json" else export.export_markdown
        sys.stdout.write(writer(store, ids))
        return 0
    finally:
        store.close()
