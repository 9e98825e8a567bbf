"""Chat and tool-call formats: Jinja templates stored with the tokenizer, a renderer to
token ids with an assistant mask, and a parser from model text back to tool calls."""

from agentrl.chat.formats import FORMATS, ChatFormat, get_format
from agentrl.chat.parse import Parsed, ParsedCall, parse
from agentrl.chat.render import render_ids, render_text

__all__ = [
    "FORMATS",
    "ChatFormat",
    "Parsed",
    "ParsedCall",
    "get_format",
    "parse",
    "render_ids",
    "render_text",
]
