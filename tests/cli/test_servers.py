"""Model servers added in the terminal, asked for their models: a real llama-cpp-python
server on loopback, a real wrong key, a real port where nothing listens."""

from __future__ import annotations

import configparser
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import keyring
import pytest
from keyrings.alt.file import PlaintextKeyring

from app.core import paths, settings
from app.core.remote import secrets, servers
from tests.cli.test_commands import events, fireside
from tests.model_server import free_port, llama_server

KEY = "fireside-test-key-7f3a"


@pytest.fixture(scope="module")
def served(smollm2_path: Path, gemma_path: Path) -> Iterator[str]:
    """SmolLM2 and Gemma 3 behind a key, on loopback."""
    with llama_server([smollm2_path, gemma_path], api_key=KEY) as server:
        yield server.url


def listed(*args: str) -> list[dict[str, Any]]:
    result = fireside("servers", "list", "--json", *args)
    assert result.returncode == 0, result.stderr
    return events(result.stdout)


def test_a_server_added_in_the_terminal_lists_its_models_beside_the_local_ones(
        served: str, smollm2_path: Path, gemma_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BIG_BOX_KEY", KEY)
    added = fireside("servers", "add", "big box", served, "--key-env", "BIG_BOX_KEY")
    assert added.returncode == 0 and "Added big box" in added.stdout, added.stderr
    assert "warning" not in added.stderr  # loopback: nothing travels
    [server] = listed()
    assert server["name"] == "big box" and server["error"] is None
    assert [m["id"] for m in server["models"]] == [str(smollm2_path), str(gemma_path)]

    models = events(fireside("models", "--json").stdout)
    remote = [m for m in models if m.get("server") == "big box"]
    assert [m["id"] for m in remote] == [str(smollm2_path), str(gemma_path)]
    assert any(m.get("architecture") == "gemma3" for m in models)  # the local ones stay
    plain = fireside("models").stdout
    assert "SmolLM2-135M-Instruct.Q4_1 on big box" in plain.splitlines()
    assert f"{gemma_path.stem} on big box" in plain.splitlines()

    # The key stays in the environment: Fireside wrote only the variable's name.
    stored = paths.settings_path().read_text(encoding="utf-8")
    assert KEY not in stored and json.loads(stored)["servers"] == [
        {"name": "big box", "url": served, "key_env": "BIG_BOX_KEY"}]

    removed = fireside("servers", "remove", "big box")
    assert removed.returncode == 0 and listed() == []
    assert fireside("servers", "list").stdout.startswith("No servers added.")


@pytest.fixture
def keyring_file(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A real keyring backend (keyrings.alt's file, under the test's home) for this
    process and the commands it runs."""
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyrings.alt.file.PlaintextKeyring")
    before = keyring.get_keyring()
    backend = PlaintextKeyring()
    keyring.set_keyring(backend)
    yield Path(backend.file_path)
    keyring.set_keyring(before)


def test_removing_a_server_in_the_terminal_takes_its_key_out_of_the_keyring(
        keyring_file: Path) -> None:
    prefs = settings.load().settings
    # As Settings → Servers adds one: the key goes to the keyring, its place to settings.
    added = servers.add(prefs, "keyed box", "http://127.0.0.1:8080/v1", key=KEY)
    settings.save(prefs)
    assert added.server.key_store == "keyring"
    assert PlaintextKeyring().get_password(secrets.SERVICE, "keyed box") == KEY
    assert len(kept_keys(keyring_file)) == 1

    removed = fireside("servers", "remove", "keyed box")
    assert removed.returncode == 0 and "Removed keyed box" in removed.stdout, removed.stderr
    assert listed() == []
    assert PlaintextKeyring().get_password(secrets.SERVICE, "keyed box") is None
    assert kept_keys(keyring_file) == []


def kept_keys(path: Path) -> list[str]:
    """The keys Fireside has in the keyring's file, by server (as the file escapes it)."""
    stored = configparser.RawConfigParser()
    stored.read(path, encoding="utf-8")
    return stored.options(secrets.SERVICE) if stored.has_section(secrets.SERVICE) else []


def test_a_wrong_or_missing_key_is_named_and_the_key_never_shown(
        served: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fireside("servers", "add", "keyed", served, "--key-env", "KEYED_KEY")
    fireside("servers", "add", "keyless", served)
    monkeypatch.setenv("KEYED_KEY", "not-" + KEY)
    result = fireside("servers", "list")
    assert result.returncode == 0
    assert "keyed at" in result.stdout and "refused the key (HTTP 401)" in result.stdout
    assert "Check the key in KEYED_KEY" in result.stdout
    assert "It needs a key" in result.stdout  # the one added without a key
    assert KEY not in result.stdout + result.stderr
    monkeypatch.delenv("KEYED_KEY")
    keyed = next(s for s in listed() if s["name"] == "keyed")
    assert "KEYED_KEY" in keyed["error"] and "is not set" in keyed["error"]


def test_a_server_that_is_not_there_is_said_quickly_and_the_rest_still_listed(
        served: str, monkeypatch: pytest.MonkeyPatch, smollm2_path: Path) -> None:
    monkeypatch.setenv("GOOD_KEY", KEY)
    fireside("servers", "add", "gone", f"http://127.0.0.1:{free_port()}/v1")
    fireside("servers", "add", "good", served, "--key-env", "GOOD_KEY")
    by_name = {s["name"]: s for s in listed()}
    assert "Could not connect to gone" in by_name["gone"]["error"]
    assert "Connection refused" in by_name["gone"]["error"]
    assert str(smollm2_path) in [m["id"] for m in by_name["good"]["models"]]
    models = fireside("models")
    assert models.returncode == 0 and "unreachable: Could not connect to gone" in models.stdout


class _NotAnApi(http.server.BaseHTTPRequestHandler):
    """A web server that is not an OpenAI API: a page where the models should be."""

    def do_GET(self) -> None:
        body = b"<html><body>Welcome to my router</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_web_server_that_is_not_an_api_is_told_apart(tmp_path: Path) -> None:
    page = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotAnApi)
    threading.Thread(target=page.serve_forever, daemon=True).start()
    try:
        fireside("servers", "add", "router", f"http://127.0.0.1:{page.server_port}")
        [server] = listed()
        assert server["url"].endswith("/v1")  # the API's usual place, added for the user
        assert "did not answer as an OpenAI-compatible server" in server["error"]
    finally:
        page.shutdown()
        page.server_close()


@pytest.mark.parametrize(("args", "message"), [
    (["x", "ftp://example.org/v1"], "is not a server address"),
    (["x", "http://user:pw@10.0.0.2/v1"], "not in the address"),
    (["", "http://10.0.0.2/v1"], "A server's name"),
    (["x", "http://10.0.0.2/v1", "--key-env", "NOT A NAME"], "not an environment variable"),
])
def test_an_unusable_server_is_refused_with_a_sentence(args: list[str], message: str) -> None:
    result = fireside("servers", "add", *args)
    assert result.returncode == 2 and message in result.stderr
    assert not paths.settings_path().exists() or \
        json.loads(paths.settings_path().read_text())["servers"] == []


def test_plain_http_to_another_network_is_warned_of_and_names_are_unique() -> None:
    added = fireside("servers", "add", "far", "http://93.184.215.14:8080/v1")
    assert added.returncode == 0 and "travel unencrypted" in added.stderr
    quiet = fireside("servers", "add", "lan", "http://192.168.1.20:8080/v1")
    assert quiet.returncode == 0 and "warning" not in quiet.stderr
    again = fireside("servers", "add", "far", "https://example.org/v1")
    assert again.returncode == 2 and "already a server called “far”" in again.stderr
    assert fireside("servers", "remove", "nobody").returncode == 2


def test_addresses_that_stay_private_are_told_apart() -> None:
    assert not servers.travels_unencrypted("http://127.0.0.1:8080/v1")
    assert not servers.travels_unencrypted("http://localhost:8080/v1")
    assert not servers.travels_unencrypted("http://[::1]:8080/v1")
    assert not servers.travels_unencrypted("http://10.1.2.3/v1")
    assert not servers.travels_unencrypted("https://api.example.org/v1")
    assert servers.travels_unencrypted("http://api.example.org/v1")
    assert servers.travels_unencrypted("http://8.8.8.8/v1")


def test_the_terminal_chats_with_a_servers_model_and_a_local_one_goes_on(
        served: str, smollm2_path: Path, gemma_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOX_KEY", KEY)
    fireside("servers", "add", "box", served, "--key-env", "BOX_KEY")
    remote = servers.display_name(servers.RemoteModel("box", str(smollm2_path)))
    gemma = servers.display_name(servers.RemoteModel("box", str(gemma_path)))
    script = "\n".join(["Name a colour.", "/model SmolLM2-135M-Instruct", "And another?",
                        f"/model {remote}", "One more?", f"/model {gemma}",
                        "And a last one?"]) + "\n"
    result = fireside("chat", "--json", "--temperature", "0", "--max-tokens", "12",
                      "--model", remote, stdin=script)
    assert result.returncode == 0, result.stderr
    stream = events(result.stdout)
    said = [e["model"] for e in stream if e["event"] == "model_loaded"]
    used = [remote, "SmolLM2-135M-Instruct", remote, gemma]
    assert said == used
    replies = [e for e in stream if e["event"] == "reply"]
    assert len(replies) == 4 and all(r["text"] for r in replies)
    # What streamed is what was kept, on the server's models as on the local one.
    deltas = "".join(e["text"] for e in stream if e["event"] == "delta")
    assert deltas == "".join(r["text"] for r in replies)
    exported = fireside("export", "--format", "json")
    messages = json.loads(exported.stdout)["conversations"][0]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"] * 4
    assert [m["stats"]["model"] for m in messages[1::2]] == used
    assert KEY not in exported.stdout


def test_choosing_a_server_that_does_not_answer_says_why_and_the_local_model_stays(
        smollm2_path: Path) -> None:
    fireside("servers", "add", "gone", f"http://127.0.0.1:{free_port()}/v1")
    result = fireside("chat", "--json", "--max-tokens", "8", "--model", "gone", "Hi")
    assert result.returncode == 2
    stream = events(result.stdout)
    said = " ".join(e.get("message", "") for e in stream)
    assert "Could not connect to gone" in said


def test_a_server_that_stops_answering_mid_reply_is_cut_after_the_wait_set(
        smollm2_path: Path) -> None:
    prefs = settings.load().settings
    # Long enough for the first piece on a busy machine (it counts before it too).
    prefs.server_timeout_s = 8.0
    settings.save(prefs)
    with llama_server(smollm2_path) as server:
        fireside("servers", "add", "box", server.url)
        remote = servers.display_name(servers.RemoteModel("box", str(smollm2_path)))
        chat = subprocess.Popen(
            [sys.executable, "-m", "app", "chat", "--json", "--max-tokens", "500", "--model",
             remote, "Write a long story about a lighthouse keeper."],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert chat.stdout is not None
        while json.loads(chat.stdout.readline())["event"] != "delta":
            pass
        os.kill(server.process.pid, signal.SIGSTOP)  # alive, connected, silent
        # Read on from the same buffered stream: lines it already holds are not lost.
        deadline = threading.Timer(120, chat.kill)
        deadline.start()
        try:
            rest = chat.stdout.read()
            chat.wait()
        finally:
            deadline.cancel()
            os.kill(server.process.pid, signal.SIGCONT)
    stream = events(rest)
    reply = next((e for e in stream if e["event"] == "reply"), None)
    assert reply is not None, rest
    assert reply["finish_reason"] == "cut" and reply["text"]
    error = next(e for e in stream if e["event"] == "error")["message"]
    assert "box" in error and "did not answer in time" in error
    assert "reply so far is kept" in error
    exported = json.loads(fireside("export", "--format", "json").stdout)
    [_question, kept] = exported["conversations"][0]["messages"]
    assert kept["text"].startswith(reply["text"][:20]) and kept["stats"]["finish_reason"] == "cut"


class _Misbehaving(http.server.BaseHTTPRequestHandler):
    """What a real server cannot be made to do: answer busy, or answer nonsense."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._send(200, "application/json",
                   json.dumps({"object": "list", "data": [
                       {"id": "busy", "object": "model", "created": 0, "owned_by": "x"},
                       {"id": "garbled", "object": "model", "created": 0, "owned_by": "x"}]}))

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["model"] == "busy":
            self._send(429, "application/json", json.dumps({"error": {
                "message": "too many requests", "type": "rate_limit"}}), {"Retry-After": "0"})
        else:
            self._send(200, "text/event-stream", "data: {this is not json\n\n")

    def _send(self, status: int, kind: str, text: str,
              headers: dict[str, str] | None = None) -> None:
        data = text.encode()
        self.send_response(status)
        for name, value in {"Content-Type": kind, "Content-Length": str(len(data)),
                            **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def test_a_busy_server_and_a_garbled_stream_are_said_plainly() -> None:
    tiny = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Misbehaving)
    threading.Thread(target=tiny.serve_forever, daemon=True).start()
    try:
        fireside("servers", "add", "tiny", f"http://127.0.0.1:{tiny.server_port}/v1")
        said = {}
        for model in ("busy", "garbled"):
            result = fireside("chat", "--json", "--model", f"{model} on tiny", "Hello")
            said[model] = [e["message"] for e in events(result.stdout)
                           if e["event"] == "error"]
    finally:
        tiny.shutdown()
        tiny.server_close()
    assert any("tiny" in m and "is busy (HTTP 429)" in m for m in said["busy"]), said
    assert any("did not answer as an OpenAI-compatible server" in m
               for m in said["garbled"]), said
