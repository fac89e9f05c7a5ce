"""Fireside's core: models, inference, conversations. Never imports Qt.

``fireside.Fireside`` is the one object every face builds on. It owns the backend
(``engine.Engine``: one inference thread, the loaded model and its single sequence),
the conversation store (``store``, with ``unsaved`` holding what a full disk refused),
the model library (``library``), settings as a reply or a load uses them, the queue of
actions on the model's sequence, and shutdown. ``chat.ChatService`` turns a conversation
into a prompt and streams the reply into the store; the faces (``app.ui``, ``app.cli``)
only adapt the core's futures and callbacks to their own events.
"""
