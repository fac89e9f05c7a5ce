"""The chat's messages on screen: a message's widget (message_widget) with its text
(message_text), a reply as it streams (live_reply), its thought (thinking_view), its
tool calls (tool_call_view) and its sources (sources_line); the column that builds only
the messages in view (message_column); Markdown made safe to show (markdown).

It may import the core's types, never the rest of the window: the transcript
(app/ui/transcript.py) holds these widgets and speaks for them to the chat.
"""
