"""Model servers the user added: the list of servers, the keys kept for them, and the
backend that streams a reply from one behind the same interface as the local engine.

May import the backend interface, the reply's text and the shared types; never the
model library, llama.cpp or conversations.
"""
