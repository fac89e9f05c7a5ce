"""Fireside's core: models, inference, conversations. Never imports Qt."""
