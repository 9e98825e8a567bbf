"""Chat formats: agreement with transformers' apply_chat_template on every split, masks,
and a parser that never raises (hypothesis, over 10,000 generated inputs)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import read_split
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.chat import FORMATS, get_format, parse, render_ids, render_text
from agentrl.chat.render import render_assistant, render_call
from agentrl.config import SPLITS
from agentrl.envs.world import SYLLABLES
from agentrl.model.tokenizer import check_tokenizer, train_tokenizer


@pytest.fixture(scope="module", params=sorted(FORMATS))
def fmt_tok(request, dataset: Path):
    fmt = get_format(request.param)
    texts = [
        render_text(fmt, r["messages"], r["tools"])[0] for r in read_split(dataset, "midtrain")
    ]
    return fmt, train_tokenizer(texts, fmt, vocab_size=1024)


def test_tokenizer_has_the_format_tokens(fmt_tok) -> None:
    fmt, tok = fmt_tok
    assert check_tokenizer(tok, fmt) == []
    assert tok.encode("12345", add_special_tokens=False) == [
        tok.convert_tokens_to_ids(d) for d in "12345"
    ]


def test_syllable_tokens_split_names_at_syllables_and_leave_other_words(dataset: Path) -> None:
    fmt = get_format("hermes")
    texts = [
        render_text(fmt, r["messages"], r["tools"])[0] for r in read_split(dataset, "midtrain")
    ]
    tok = train_tokenizer(texts, fmt, vocab_size=1024, syllables=SYLLABLES)

    def pieces(text: str) -> list[str]:
        return [tok.decode([i]) for i in tok.encode(text, add_special_tokens=False)]

    # the same syllable tokens in prose and in a JSON string, never a merge across two
    assert pieces("of Ponero?")[-4:] == ["Po", "ne", "ro", "?"]
    assert pieces('{"item": "moju"}')[-3:-1] == ["mo", "ju"]
    assert "".join(pieces("Update the age")) == "Update the age"
    assert "te" not in pieces("Update") and "ge" not in pieces("age")  # not a name: no split


def test_renderer_agrees_with_apply_chat_template_on_every_split(fmt_tok, dataset: Path) -> None:
    fmt, tok = fmt_tok
    checked = 0
    for split in SPLITS:
        for record in read_split(dataset, split)[:40]:
            tools = record["tools"] or None
            ids, mask = render_ids(tok, fmt, record["messages"], tools)
            out = tok.apply_chat_template(
                record["messages"],
                tools=tools,
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
            )
            assert list(out["input_ids"]) == ids, record["id"]
            assert list(out["assistant_masks"]) == mask, record["id"]
            prompt_ids, _ = render_ids(
                tok, fmt, record["messages"][:1], tools, add_generation_prompt=True
            )
            assert (
                tok.apply_chat_template(
                    record["messages"][:1],
                    tools=tools,
                    add_generation_prompt=True,
                    tokenize=True,
                    return_dict=True,
                )["input_ids"]
                == prompt_ids
            )
            checked += 1
    assert checked >= 7 * 5


def test_a_call_message_a_server_parsed_renders_as_the_model_wrote_it(fmt_tok) -> None:
    """vLLM's tool parsers keep the newline the model wrote before ``<tool_call>`` in the
    message's content; a client sends that message back, and it must render as the turn the
    model wrote (and as the parser's own stripped content renders), or the next turn
    conditions on text the model never saw."""
    fmt, tok = fmt_tok
    call = {"type": "function", "function": {"name": "f", "arguments": {"n": 1}}}
    one = render_call(fmt, "f", {"n": 1})
    written = f"I need f.\n{one}\n{one}<|im_end|>"  # what the model wrote: two calls
    content = written[: written.index("<tool_call>")]  # what vLLM's hermes parser returns
    assert parse(written, fmt).content == "I need f."  # what ours returns
    for kept in (content, "I need f."):
        messages = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": kept, "tool_calls": [call, call]},
            {"role": "tool", "content": "1"},
            {"role": "tool", "content": "2"},
        ]
        assert render_assistant(fmt, messages[1]) == written
        ids, _ = render_ids(tok, fmt, messages)
        templated = tok.apply_chat_template(messages, tokenize=True, return_dict=True)
        assert list(templated["input_ids"]) == ids


def test_mask_covers_exactly_what_the_assistant_wrote(fmt_tok, dataset: Path) -> None:
    fmt, tok = fmt_tok
    for record in read_split(dataset, "sft")[:30]:
        ids, mask = render_ids(tok, fmt, record["messages"], record["tools"])
        written = "".join(
            render_assistant(fmt, m) for m in record["messages"] if m["role"] == "assistant"
        )
        assert tok.decode([i for i, m in zip(ids, mask, strict=True) if m]) == written
        assert "<tool_response>" not in tok.decode([i for i, m in zip(ids, mask, strict=True) if m])


def test_consecutive_tool_results_share_one_user_turn() -> None:
    messages = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "a", "arguments": {}}},
                {"type": "function", "function": {"name": "b", "arguments": {}}},
            ],
        },
        {"role": "tool", "content": "1"},
        {"role": "tool", "content": "2"},
    ]
    text, _ = render_text(get_format("hermes"), messages)
    assert text.endswith(
        "<|im_start|>user\n<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n"
    )
    assert text.count("<|im_start|>user") == 2


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {
                "type": "object",
                "properties": {
                    "n": {"type": "integer"},
                    "x": {"type": "number"},
                    "s": {"type": "string"},
                    "b": {"type": "boolean"},
                    "l": {"type": "array"},
                },
            },
        },
    }
]


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_calls_in_reasoning_or_prose_are_not_calls(name: str) -> None:
    fmt = get_format(name)
    call = render_call(fmt, "f", {"n": 1})
    assert parse(f"<think>\nmaybe\n{call}\n</think>\nNo call needed. Answer: 3", fmt).calls == []
    assert parse(f"I could write {call} but I will not.", fmt).calls == []
    parsed = parse(f"<think>plan</think>\n{call}<|im_end|>", fmt, TOOLS)
    assert [c.name for c in parsed.calls] == ["f"] and parsed.errors == []


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_truncated_and_malformed_calls_are_errors(name: str) -> None:
    fmt = get_format(name)
    call = render_call(fmt, "f", {"n": 1, "s": "hello"})
    for cut in range(len("<tool_call>") + 1, len(call) - 1):
        parsed = parse("ok\n" + call[:cut], fmt, TOOLS)
        assert parsed.calls == [] and parsed.errors, call[:cut]
    assert parse("<tool_call>\n{not json}\n</tool_call>", fmt).errors


names = st.from_regex(r"[a-z][a-zA-Z0-9_]{0,12}", fullmatch=True)
safe_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="<>\r"), max_size=30
).filter(lambda s: s == s.strip() and s != "")
values = {
    "n": st.integers(-(10**9), 10**9),
    "x": st.floats(allow_nan=False, allow_infinity=False, width=32).filter(
        lambda v: not float(v).is_integer()
    ),
    "s": safe_text,
    "b": st.booleans(),
    "l": st.lists(st.integers(0, 99), max_size=4),
}


@settings(max_examples=300, deadline=None)
@given(name=names, args=st.fixed_dictionaries({}, optional=values))
@pytest.mark.parametrize("fmt_name", sorted(FORMATS))
def test_render_then_parse_gives_the_call_back(fmt_name: str, name: str, args: dict) -> None:
    fmt = get_format(fmt_name)
    tools = [{"type": "function", "function": {**TOOLS[0]["function"], "name": name}}]
    message = {
        "role": "assistant",
        "content": "thinking",
        "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}],
    }
    parsed = parse(render_assistant(fmt, message), fmt, tools)
    assert parsed.errors == []
    assert parsed.content == "thinking"
    assert [(c.name, c.arguments) for c in parsed.calls] == [(name, args)]


FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<|im_end|>",
    "<function=f>",
    "</function>",
    "<parameter=n>",
    "</parameter>",
    "\n",
    '{"name": "f", "arguments": {',
    "}",
    "[[[[",
    '"',
    "\\u0000",
    "{",
    "\ud7ff",
]
chunks = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=20)), max_size=40).map(
    "".join
)


@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=chunks, fmt_name=st.sampled_from(sorted(FORMATS)))
def test_parser_never_raises(text: str, fmt_name: str) -> None:
    parsed = parse(text, get_format(fmt_name), TOOLS)
    assert isinstance(parsed.content, str)
    assert all(isinstance(c.arguments, dict) for c in parsed.calls)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_parser_survives_huge_and_deeply_nested_input(name: str) -> None:
    fmt = get_format(name)
    deep = (
        "<tool_call>\n"
        + '{"name": "f", "arguments": '
        + "[" * 100_000
        + "]" * 100_000
        + "}\n</tool_call>"
    )
    assert parse(deep, fmt, TOOLS).errors
    huge = ("x" * 1_000_000) + "\n" + render_call(fmt, "f", {"n": 1})
    assert [c.name for c in parse(huge, fmt, TOOLS).calls] == ["f"]
    assert parse(None, fmt).calls == [] and parse(b"\xff", fmt).calls == []
    assert json.dumps(parse("\ud800<tool_call>", fmt).errors) is not None
