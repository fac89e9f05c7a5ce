"""Documents brought into a chat: files read into sections (text, Markdown, code, HTML,
PDF, Word), cut into passages along their structure, kept in Fireside's database with
their vectors and words, and found again by meaning and by words together, so a reply
can be given a document whole or its most relevant passages, with their sources.

May import llama.cpp's embedding context (``llama``), the model library, settings and
the shared types; never conversations, tools or a face.
"""
