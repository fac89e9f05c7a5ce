"""llama.cpp on this machine: the engine (the one inference thread that owns the loaded
model and its one sequence), its sampler chain and detokenizer, speculative decoding
(drafts from the conversation or a draft model, checked in one pass), the sequence's saved
states in memory and on disk, the devices and how a model's layers are placed on them,
the memory a model takes, and the checks and libraries that make llama.cpp run here.

May import the model library (``models``), the reply's text (``reply``), the backend
interface and the shared types; never conversations, tools or a face.
"""
