"""Fireside's local OpenAI-compatible API: a face on the core, served on loopback only."""
