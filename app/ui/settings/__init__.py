"""The settings dialog (dialog.py) and its pages, each a widget in a module of its own:
models_page, replies_page, this_model_page, appearance_page, servers_page, tools_page,
api_page and hardware_page; page_list shows them beside a list of their names, and
form_page and form_parts hold the pieces their rows are made of.

It may import the core and the window's small shared parts (icons, notices, theme), never
the chat (chat_pane, the controllers, the transcript), which opens it.
"""
