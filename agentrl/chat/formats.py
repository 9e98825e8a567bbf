"""The two tool-call formats and their Jinja chat templates.

``hermes`` (Qwen2.5): ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``;
tool results go in ``<tool_response>`` blocks inside one user turn (consecutive results
merged). ``xml`` (Qwen3-Coder): ``<function=NAME>`` with one ``<parameter=ARG>`` block per
argument, values written raw for strings and as JSON otherwise, and read back by the
schema's types. Both list the tool schemas compactly in the system turn, one JSON per line
(the system prompt was ~60% of each sample with indented schemas).

The templates wrap assistant turns in ``{% generation %}`` so that transformers'
``return_assistant_tokens_mask`` agrees with our renderer's mask.
"""

from __future__ import annotations

from dataclasses import dataclass

IM_START, IM_END, END_OF_TEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"
TOOL_CALL, TOOL_CALL_END = "<tool_call>", "</tool_call>"
TOOL_RESPONSE, TOOL_RESPONSE_END = "<tool_response>", "</tool_response>"
THINK, THINK_END = "<think>", "</think>"

_HEAD = r"""
{%- set ns = namespace(system='') -%}
{%- if messages and messages[0]['role'] == 'system' -%}{%- set ns.system = messages[0]['content'] -%}{%- endif -%}
{%- if tools or ns.system -%}
{{- '<|im_start|>system\n' + ns.system -}}
{%- if tools -%}
{%- if ns.system -%}{{- '\n\n' -}}{%- endif -%}
{{- '# Tools\n<tools>' -}}
{%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\n</tools>' -}}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if message['role'] == 'user' -%}
{{- '<|im_start|>user\n' + message['content'] + '<|im_end|>\n' -}}
{%- elif message['role'] == 'assistant' -%}
{{- '<|im_start|>assistant\n' -}}
{%- generation -%}
{{- message['content'] or '' -}}
{%- for call in (message['tool_calls'] or []) -%}
{%- set fn = call['function'] -%}
{%- if not loop.first or (message['content'] and not message['content'].endswith('\n')) -%}{{- '\n' -}}{%- endif -%}
"""

_TAIL = r"""
{%- endfor -%}
{{- '<|im_end|>' -}}
{%- endgeneration -%}
{{- '\n' -}}
{%- elif message['role'] == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}{{- '<|im_start|>user\n' -}}{%- else -%}{{- '\n' -}}{%- endif -%}
{{- '<tool_response>\n' + message['content'] + '\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}
"""

_HERMES_CALL = r"""
{{- '<tool_call>\n{"name": ' + (fn['name'] | tojson) + ', "arguments": ' -}}
{%- if fn['arguments'] is string -%}{{- fn['arguments'] -}}{%- else -%}{{- fn['arguments'] | tojson -}}{%- endif -%}
{{- '}\n</tool_call>' -}}
"""

_XML_CALL = r"""
{{- '<tool_call>\n<function=' + fn['name'] + '>\n' -}}
{%- for key, value in (fn['arguments'] | items) -%}
{{- '<parameter=' + key + '>\n' -}}
{%- if value is string -%}{{- value -}}{%- else -%}{{- value | tojson -}}{%- endif -%}
{{- '\n</parameter>\n' -}}
{%- endfor -%}
{{- '</function>\n</tool_call>' -}}
"""


@dataclass(frozen=True)
class ChatFormat:
    name: str
    template: str
    special_tokens: tuple[str, ...]  # control tokens: never produced by BPE merges
    added_tokens: tuple[str, ...]  # format markers kept whole (not special: decoded as text)


FORMATS = {
    "hermes": ChatFormat(
        "hermes",
        (_HEAD + _HERMES_CALL + _TAIL).strip(),
        (END_OF_TEXT, IM_START, IM_END),
        (TOOL_CALL, TOOL_CALL_END, TOOL_RESPONSE, TOOL_RESPONSE_END, THINK, THINK_END),
    ),
    "xml": ChatFormat(
        "xml",
        (_HEAD + _XML_CALL + _TAIL).strip(),
        (END_OF_TEXT, IM_START, IM_END),
        (
            TOOL_CALL,
            TOOL_CALL_END,
            TOOL_RESPONSE,
            TOOL_RESPONSE_END,
            THINK,
            THINK_END,
            "<function=",
            "</function>",
            "<parameter=",
            "</parameter>",
        ),
    ),
}


def get_format(name: str) -> ChatFormat:
    if name not in FORMATS:
        raise KeyError(f"unknown chat format '{name}' (known: {', '.join(FORMATS)})")
    return FORMATS[name]
