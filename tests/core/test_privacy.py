"""Nothing leaves the machine: a whole window session and a whole terminal session
under strace open no IP socket.

strace sees every system call of every thread and child process, the native libraries'
(llama.cpp, SQLite) included, so this covers more than Python's own socket module. Each
test first checks that the trace really holds the session: the files it must have
opened (the model, the database) are in it, so "no IP socket" is a finding, not an
empty log.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from app.core import paths, settings
from app.core.conversations.store import Store
from app.core.remote import servers
from tests.core.helpers import PROBE
from tests.gguf_files import tiny_model
from tests.loopback_hub import LoopbackHub
from tests.model_server import llama_server

CALL = re.compile(r"^\d+\s+(?:<\.\.\. )?(\w+)[\( ]")
CONNECT = re.compile(r"\bconnect\(\d+, \{sa_family=AF_INET6?,")


DRIVER = Path(__file__).resolve().parents[1] / "ui" / "app_driver.py"


def _traced(log: Path, *args: str, stdin: str | None = None,
            program: tuple[str, ...] = ("-m", "app"),
            extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    strace = shutil.which("strace")
    if strace is None:
        pytest.fail("strace is not installed: the privacy proof needs it "
                    "(packaging/system-deps.sh installs it)")
    return subprocess.run(
        [strace, "-f", "--seccomp-bpf", "-qq", "-e", "trace=network,openat", "-e", "signal=none",
         "-o", str(log), sys.executable, *program, *args],
        input=stdin, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen", **(extra_env or {})})


def _internet_calls(lines: list[str]) -> list[str]:
    return [line for line in lines if "AF_INET" in line]


def _opened(lines: list[str], path: Path | str) -> bool:
    """The traced process (any thread of it) opened ``path``."""
    return any("openat(" in line and f'"{path}"' in line for line in lines)


@pytest.mark.slow
def test_a_whole_window_session_opens_no_network_connection(
        tmp_path: Path, gemma_path: Path) -> None:
    prefs = settings.load().settings
    prefs.temperature, prefs.max_tokens = 0.0, 8
    settings.save(prefs)
    log = tmp_path / "window.strace"
    result = _traced(log, "--session", PROBE, str(gemma_path), program=(str(DRIVER),))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["ask", "switch", "ask", "quit"]
    store = Store()
    conversation, = store.list_conversations()
    replies = [m for m in store.messages(conversation.id) if m.role == "assistant"]
    assert len(replies) == 2 and all(m.text for m in replies)
    assert settings.load().settings.last_model == str(gemma_path), "the model was switched"
    lines = log.read_text().splitlines()
    assert _opened(lines, gemma_path) and _opened(lines, store.path), "the trace missed it"
    assert not _internet_calls(lines), "IP network calls were made:\n" + "\n".join(
        _internet_calls(lines))


@pytest.mark.slow
def test_a_whole_terminal_session_opens_no_network_connection(
        tmp_path: Path, smollm2_path: Path, gemma_path: Path) -> None:
    greedy = ("--temperature", "0", "--max-tokens", "8")
    session = f"Hello!\n/model {gemma_path}\n{PROBE}\n/new\nThanks.\n/quit\n"
    database = paths.database_path()  # where every session keeps its conversations
    steps = [  # each with a file the traced process must have opened
        ("models", ("models",), None, gemma_path),
        ("one-shot chat", ("chat", "--json", "--model", str(smollm2_path), *greedy, PROBE),
         None, smollm2_path),
        ("interactive chat", ("chat", "--json", "--model", str(smollm2_path), *greedy),
         session, gemma_path),
        ("export", ("export", "--all", "--format", "json"), None, database),
    ]
    seen: dict[str, list[str]] = {}
    for name, args, stdin, opened in steps:
        log = tmp_path / f"{name}.strace"
        result = _traced(log, *args, stdin=stdin)
        assert result.returncode == 0, f"{name}: {result.stderr[-2000:]}"
        seen[name] = log.read_text().splitlines()
        assert _opened(seen[name], opened), f"{name}: the trace missed the session"
        if name == "interactive chat":  # the session really switched model and answered
            stream = [json.loads(line) for line in result.stdout.splitlines()]
            assert [e["event"] for e in stream].count("model_loaded") == 2
            assert sum(e["event"] == "reply" and bool(e["text"]) for e in stream) == 3
    exported = json.loads(result.stdout)["conversations"]
    assert len(exported) == 3  # one-shot, and the session's two chats

    calls = {name: sorted({m.group(1) for line in lines if (m := CALL.match(line))})
             for name, lines in seen.items()}
    internet = {name: _internet_calls(lines) for name, lines in seen.items()}
    assert not any(internet.values()), (
        "IP network calls were made: "
        + json.dumps({k: v for k, v in internet.items() if v}, indent=1)
        + f"\nall network calls seen: {calls}")


@pytest.mark.slow
def test_with_a_server_added_the_only_connections_go_to_that_server(
        tmp_path: Path, smollm2_path: Path) -> None:
    with llama_server(smollm2_path) as server:
        port = urlsplit(server.url).port
        prefs = settings.load().settings
        prefs.servers = [servers.Server("box", server.url).to_json()]
        settings.save(prefs)
        remote = servers.display_name(servers.RemoteModel("box", str(smollm2_path)))
        log = tmp_path / "remote.strace"
        result = _traced(log, "chat", "--json", "--max-tokens", "8", "--model", remote, PROBE)
    assert result.returncode == 0, result.stderr[-2000:]
    stream = [json.loads(line) for line in result.stdout.splitlines()]
    assert any(e["event"] == "reply" and e["text"] for e in stream)
    lines = log.read_text().splitlines()
    connects = [line for line in lines if CONNECT.search(line)]
    assert connects, "the trace missed the connection to the server"
    elsewhere = [line for line in connects
                 if f"sin_port=htons({port})" not in line or '"127.0.0.1"' not in line]
    assert not elsewhere, "connections to other places:\n" + "\n".join(elsewhere)


@pytest.mark.slow
def test_fireside_serving_listens_on_loopback_only_and_connects_nowhere(
        tmp_path: Path, smollm2_path: Path) -> None:
    import openai
    import psutil

    from tests.model_server import free_port

    port = free_port()
    log = tmp_path / "serve.strace"
    strace = shutil.which("strace")
    assert strace is not None
    traced = subprocess.Popen(
        [strace, "-f", "--seccomp-bpf", "-qq", "-e", "trace=network,openat", "-e",
         "signal=none", "-o", str(log), sys.executable, "-m", "app", "serve", "--port",
         str(port), "--model", str(smollm2_path)],
        stderr=subprocess.PIPE, text=True)
    try:
        assert traced.stderr is not None
        for line in traced.stderr:  # the model loads, then it serves
            if "Serving" in line:
                break
        with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none") as api:
            answer = api.chat.completions.create(
                model="any", messages=[{"role": "user", "content": PROBE}], max_tokens=8)
        assert answer.choices[0].message.content
    finally:
        for child in psutil.Process(traced.pid).children():
            child.terminate()  # the traced Fireside: it stops as on Ctrl+C
        assert traced.wait(timeout=60) == 0
    lines = log.read_text().splitlines()
    assert _opened(lines, smollm2_path), "the trace missed the session"
    binds = [line for line in lines if re.search(r"\bbind\(\d+, \{sa_family=AF_INET", line)]
    assert len(binds) == 1 and f"sin_port=htons({port})" in binds[0] \
        and 'inet_addr("127.0.0.1")' in binds[0], binds
    bound = re.search(r"\bbind\((\d+),", binds[0])
    listening = {m.group(1) for line in lines if (m := re.search(r"\blisten\((\d+),", line))}
    assert bound is not None and listening == {bound.group(1)}  # that socket and no other
    connects = [line for line in lines if CONNECT.search(line)]
    assert not connects, "Fireside connected somewhere:\n" + "\n".join(connects)


def test_the_hub_is_asked_only_what_the_user_asked_and_offline_not_at_all(
        tmp_path: Path, hub_server: LoopbackHub, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fireside search`` and ``pull --dry-run`` connect to the Hub (and the host its
    files come from) and nowhere else, with requests only for what was asked: none of
    the library's own fetches. With Offline on, not even that."""
    hub_server.add("t/Tiny-GGUF", {"tiny-Q8_0.gguf": tiny_model(tmp_path, megabytes=2)})
    ports = {hub_server.hub.server_address[1], hub_server.cdn.server_address[1]}
    environment = {"HF_ENDPOINT": hub_server.endpoint}
    monkeypatch.delenv("HF_HUB_DISABLE_TELEMETRY", raising=False)  # Fireside turns it off
    for name, args in (("search", ("search", "tiny")),
                       ("plan", ("pull", "t/Tiny-GGUF", "--dry-run", "--json"))):
        log = tmp_path / f"{name}.strace"
        result = _traced(log, *args, extra_env=environment)
        assert result.returncode == 0, result.stderr[-2000:]
        connects = [line for line in log.read_text().splitlines() if CONNECT.search(line)]
        assert connects, f"{name}: the trace missed the connection to the Hub"
        elsewhere = [line for line in connects if '"127.0.0.1"' not in line
                     or not any(f"sin_port=htons({port})" in line for port in ports)]
        assert not elsewhere, f"{name} connected elsewhere:\n" + "\n".join(elsewhere)
    assert [path.split("?")[0] for path in hub_server.api_paths] == [
        "/api/models", "/api/models/t/Tiny-GGUF",
        f"/t/Tiny-GGUF/resolve/{hub_server.repos['t/Tiny-GGUF'].commit}/tiny-Q8_0.gguf"]

    prefs = settings.load().settings
    prefs.offline = True
    settings.save(prefs)
    log = tmp_path / "offline.strace"
    result = _traced(log, "search", "tiny", extra_env=environment)
    assert result.returncode == 1 and "Fireside is offline" in result.stderr
    assert not _internet_calls(log.read_text().splitlines())
