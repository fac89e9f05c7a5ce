"""Fireside's core: models, inference, conversations. Never imports Qt.

``fireside.Fireside`` is the one object every face builds on. It owns the backend
(``llama.engine.Engine``: one inference thread, the loaded model and its single
sequence), the conversation store, the model library, settings as a reply or a load
uses them, the queue of actions on the model's sequence, and shutdown. The faces
(``app.ui``, ``app.cli``, ``app.api``) only adapt what it hands out to their own events.

The rooms, from the top down; each imports only rooms below it (the import contracts in
pyproject.toml check it):

- ``fireside``: the one object; ``backends``: the local engine and the servers' models
  behind one ``Backend``;
- ``conversations/``: the chat service, the store, export, the local API's requests;
- ``tools/``: the MCP servers the user added, as tools a reply may call;
- ``llama/``: llama.cpp: the engine thread, sampling, saved states, devices, offload;
- ``models/``: GGUF headers, the catalog of model files, the library and its watcher;
- ``settings``: the one settings object;
- ``remote/``: the servers the user added, their keys, and their backend;
- ``backend``: the ``Backend`` interface and the thread that makes one;
- ``reply/``: templates, thinking, stop text, tool-call formats, the reply's text;
- ``options``, ``paths``: plain values, and where files live.
"""
