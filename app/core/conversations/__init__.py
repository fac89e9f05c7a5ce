"""Conversations: the chat service (prompt fitting, a reply's turn, saving it as it
grows), what the user is told once a reply is done, the SQLite store, the queue of what
a full disk refused, export, and requests to the local API in OpenAI's shape.

May import tools, the backend interface, the reply's text and the shared types; never
llama.cpp itself, so conversations run the same on any backend.
"""
