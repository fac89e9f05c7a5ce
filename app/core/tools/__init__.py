"""Tools a conversation can use: the toolbox of MCP servers the user added, started on
first use, and the MCP client that speaks to them.

May import the reply's tool-call formats, settings, the keyring's keeper of keys
(remote.secrets) and the shared types.
"""
