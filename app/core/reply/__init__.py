"""What a reply is made of: chat templates, a reasoning model's thinking, the text that
ends a reply, how each model family writes a tool call, the JSON schemas a reply can be
held to, the filter chain that turns pieces into a reply's thought and answer, and the
finished reply with its figures.

Plain text work: imports nothing else of the core.
"""
