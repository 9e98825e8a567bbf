"""The agent loop with a scripted policy (control flow, masks, errors, context limits),
the hf engine with a real tiny model, and the concurrent tool executor."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import TINY_MODEL, ScriptedEngine, oracle_script, read_split
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrl.chat import get_format, render_ids, render_text
from agentrl.config import HarnessSection, ModelSection
from agentrl.envs.registry import Registry
from agentrl.harness.context import OMITTED
from agentrl.harness.engine import Generation, HFEngine, Sampling
from agentrl.harness.executor import InProcessExecutor
from agentrl.harness.loop import Harness
from agentrl.model.build import build_tiny
from agentrl.model.tokenizer import train_tokenizer
from agentrl.tools.executor import ToolSet
from agentrl.tools.schema import Surface, canonical_schema


@pytest.fixture(scope="module")
def setup(dataset: Path):
    fmt = get_format("hermes")
    texts = [render_text(fmt, r["messages"], r["tools"])[0] for r in read_split(dataset, "sft")]
    tokenizer = train_tokenizer(texts, fmt, vocab_size=1024)
    records = [r for r in read_split(dataset, "sft") if r["env"]][:6]
    return fmt, tokenizer, records, Registry()


def harness(setup, engine, **cfg) -> Harness:
    fmt, tokenizer, _, registry = setup
    return Harness(engine, tokenizer, fmt, registry, HarnessSection(**cfg))


def test_oracle_script_succeeds_with_exact_records_and_masks(setup) -> None:
    fmt, tokenizer, records, _ = setup
    engine = ScriptedEngine(tokenizer, [oracle_script(fmt, r) for r in records])
    episodes = harness(setup, engine, context_limit=4096, max_turns=10).run(records)
    assert all(e.success and e.grounded and e.end_reason == "answer" for e in episodes)
    for episode, emitted_ids in zip(episodes, engine.emitted, strict=True):
        emitted = iter(emitted_ids)
        (segment,) = episode.segments
        policy = [i for i, m in enumerate(segment.loss_mask) if m]
        # every policy token is exactly an engine token, in order, with its logprob
        runs, run = [], [policy[0]]
        for i in policy[1:]:
            if i == run[-1] + 1:
                run.append(i)
            else:
                runs.append(run)
                run = [i]
        runs.append(run)
        assert len(runs) == len(episode.turns)
        for run in runs:
            assert [segment.ids[i] for i in run] == next(emitted)
            assert all(segment.logprobs[i] == -0.5 for i in run)
        # everything else is inserted: prompt, tool responses, turn markers
        inserted = tokenizer.decode(
            [t for t, m in zip(segment.ids, segment.loss_mask, strict=True) if not m]
        )
        assert "<tool_response>" in inserted and "<tool_call>" not in inserted
        assert episode.retokenize_mismatches == 0


def test_what_a_model_writes_never_crashes_the_batch(setup) -> None:
    _fmt, tokenizer, records, _ = setup
    bad = [
        ['<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>'],
        ['<tool_call>\n{"name": \n</tool_call>'],
        ["<tool_call>\n[1, 2]\n</tool_call>"],
        ['<tool_call>\n{"name": "x", "arguments": "not an object"}\n</tool_call>'],
        ["<tool_call>\n" + "{" * 500],
        ["\u2603 <think><tool_call>hidden</tool_call></think> no answer mark"],
    ]
    engine = ScriptedEngine(tokenizer, bad)
    episodes = harness(setup, engine, max_turns=2, context_limit=4096).run(records[:6])
    assert len(episodes) == 6
    assert not any(e.success for e in episodes)
    errors = [k for e in episodes for t in e.turns for k in t.call_errors]
    assert {"unknown_tool", "parse_error"} <= set(errors)
    assert episodes[-1].end_reason == "answer" and episodes[-1].verdict == "no_answer"


def test_cut_off_generation_gets_an_inserted_end_of_turn(setup) -> None:
    _fmt, tokenizer, records, _ = setup
    engine = ScriptedEngine(tokenizer, [["word " * 50]], stop=False)
    (episode,) = harness(setup, engine, max_turns=1, max_new_tokens=16).run(records[:1])
    segment = episode.segments[0]
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert segment.ids[-1] == end and segment.loss_mask[-1] == 0
    assert sum(segment.loss_mask) == 15 and episode.turns[0].cut_off


@pytest.mark.parametrize("strategy", ["none", "window"])
def test_peak_context_never_exceeds_the_limit(setup, strategy: str) -> None:
    fmt, tokenizer, records, _ = setup
    # the model keeps calling a real tool of its task; responses pile up
    scripts = [[oracle_script(fmt, r)[0]] for r in records]
    engine = ScriptedEngine(tokenizer, scripts)
    limit = (
        max(
            len(tokenizer(render_text(fmt, r["messages"][:1], r["tools"], True)[0])["input_ids"])
            for r in records
        )
        + 200
    )
    episodes = harness(
        setup,
        engine,
        context=strategy,
        context_limit=limit,
        max_new_tokens=64,
        max_turns=12,
        window_keep=1,
    ).run(records)
    assert all(e.peak_context <= limit for e in episodes)
    if strategy == "none":
        assert {e.end_reason for e in episodes} == {"context_limit"}
        assert all(len(e.segments) == 1 for e in episodes)
    else:
        compacted = [e for e in episodes if e.compactions]
        assert compacted
        for e in compacted:
            assert len(e.segments) == e.compactions + 1
            later = tokenizer.decode(e.segments[1].ids)
            assert OMITTED in later
            assert (
                e.segments[1].loss_mask[: e.segments[1].prompt_len]
                == [0] * e.segments[1].prompt_len
            )


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.text(max_size=200), min_size=1, max_size=3))
def test_fuzzed_model_outputs_run_through_the_loop(setup, texts: list[str]) -> None:
    _fmt, tokenizer, records, _ = setup
    engine = ScriptedEngine(tokenizer, [texts])
    (episode,) = harness(setup, engine, max_turns=3, context_limit=4096).run(records[:1])
    assert episode.done and episode.end_reason in {"answer", "max_turns", "context_limit"}
    for segment in episode.segments:
        assert len(segment.ids) == len(segment.loss_mask) == len(segment.logprobs)


def test_hf_engine_logprobs_match_a_forward_pass_and_are_seeded(setup) -> None:
    fmt, tokenizer, records, _ = setup
    model = build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=0)
    engine = HFEngine(model, tokenizer)
    prompts = [
        tokenizer(render_text(fmt, r["messages"][:1], r["tools"], True)[0])["input_ids"]
        for r in records[:3]
    ]
    sampling = Sampling(max_new_tokens=12, temperature=1.0, seed=7)
    first, again = engine.generate(prompts, sampling), engine.generate(prompts, sampling)
    assert [g.ids for g in first] == [g.ids for g in again]
    for prompt, gen in zip(prompts, first, strict=True):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + gen.ids])).logits[0, len(prompt) - 1 : -1]
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(gen.ids)[:, None])[:, 0]
        assert torch.allclose(expected, torch.tensor(gen.logprobs), atol=1e-4)


def test_harness_and_engine_say_where_their_time_went(setup) -> None:
    _fmt, tokenizer, records, _ = setup
    engine = HFEngine(build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=0), tokenizer)
    runner = harness(setup, engine, max_turns=2, max_new_tokens=8, context_limit=4096)
    started = time.perf_counter()
    episodes = runner.run(records[:3], samples=2)
    wall = time.perf_counter() - started
    assert len(episodes) == 6 and all(e.done for e in episodes)
    assert engine.seconds["prefill"] > 0 and engine.seconds["decode"] > 0
    assert set(runner.seconds) >= {"generate", "verify"}  # tools only if a call parsed
    generate = runner.seconds["generate"]
    assert engine.seconds["prefill"] + engine.seconds["decode"] <= generate <= wall
    assert sum(runner.seconds.values()) <= wall


def test_executor_runs_episodes_concurrently_and_times_out() -> None:
    def wait(seconds: float) -> str:
        """Sleep.

        Args:
            seconds: How long.
        """
        time.sleep(seconds)
        return "done"

    tools = ToolSet({"wait": wait}, {"wait": Surface.canonical(canonical_schema(wait))})
    executor = InProcessExecutor(workers=16, timeout_s=1.0)
    started = time.perf_counter()
    results = executor.run([(tools, [("wait", {"seconds": 0.5})]) for _ in range(8)])
    assert time.perf_counter() - started < 2.0  # 8 x 0.5 s serially would be 4 s
    assert all(r[0].text == "done" for r in results)
    (slow,) = executor.run([(tools, [("wait", {"seconds": 3.0})])])
    assert slow[0].error == "timeout" and "timed out after 1 s" in slow[0].text
    executor.close()


def test_rollout_cli_writes_trajectories_and_rejects_a_bad_strategy_or_turn_budget(
    setup, dataset: Path, tmp_path: Path
) -> None:
    import json
    import subprocess
    import sys

    from conftest import small_params, write_params

    _fmt, tokenizer, _records, _ = setup
    model_dir = tmp_path / "models" / "tiny"
    build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=0).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "synth").symlink_to(dataset)
    params = small_params()
    params["model"] = TINY_MODEL
    params["base"]["paths"] = {"data": str(tmp_path / "data")}
    tight = {"name": "tight", "harness": {"max_turns": 1}, "splits": ["test"]}
    params["eval"] = {"tasks": 3, "variants": [{"name": "greedy", "splits": ["test"]}, tight]}
    write_params(tmp_path / "params.yaml", params)
    out = tmp_path / "runs" / "test.jsonl"
    command = [sys.executable, "-m", "agentrl.cli", "rollout", "--model", str(model_dir)]
    command += ["--split", "test", "--n", "3", "--samples", "2", "--out", str(out)]
    command += ["--params", str(tmp_path / "params.yaml")]
    done = subprocess.run([*command, "--context", "window"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    episodes = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(episodes) == 6 and "grounded_success" in done.stdout
    assert all(len(s["ids"]) == len(s["loss_mask"]) for e in episodes for s in e["segments"])
    bad = subprocess.run([*command, "--context", "telepathy"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--context: 'telepathy'" in bad.stderr
    unknown = subprocess.run([*command, "--variant", "psychic"], capture_output=True, text=True)
    assert (
        unknown.returncode == 2 and "--variant: 'psychic' is not an eval variant" in unknown.stderr
    )
    cut = subprocess.run([*command, "--variant", "tight"], capture_output=True, text=True)
    assert cut.returncode == 2, cut.stderr[-2000:]
    assert "eval.variants.tight.harness.max_turns: 1, but test's expert trajectories" in cut.stderr


class RuleEngine:
    """A control-flow policy over prompt text: a summary when asked for one, else a call."""

    def __init__(self, tokenizer: Any, call: str, summary: str):
        self.tokenizer, self.call, self.summary = tokenizer, call, summary
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        from agentrl.harness.context import SUMMARY_REQUEST

        out = []
        for prompt in prompts:
            tail = self.tokenizer.decode(prompt[-200:])
            text = self.summary if SUMMARY_REQUEST in tail else self.call
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.end]
            out.append(Generation(ids, [-0.25] * len(ids), True))
        return out


def test_summary_restarts_from_the_task_and_a_trained_summary(setup) -> None:
    fmt, tokenizer, records, _ = setup
    record = records[0]
    summary = "Found nothing final yet; remaining: call the tool again."
    engine = RuleEngine(tokenizer, oracle_script(fmt, record)[0], summary)
    prompt = len(
        tokenizer(render_text(fmt, record["messages"][:1], record["tools"], True)[0])["input_ids"]
    )
    limit = prompt + 400
    (episode,) = harness(
        setup, engine, context="summary", context_limit=limit, max_new_tokens=64, max_turns=12
    ).run([record])
    assert episode.compactions >= 2 and len(episode.segments) == episode.compactions + 1
    assert episode.peak_context <= limit
    first, second = episode.segments[0], episode.segments[1]
    summary_ids = tokenizer(summary, add_special_tokens=False)["input_ids"]
    policy = [t for t, m in zip(first.ids, first.loss_mask, strict=True) if m]
    assert policy[-len(summary_ids) - 1 : -1] == summary_ids  # trained like any turn
    restarted = tokenizer.decode(second.ids[: second.prompt_len])
    assert "Progress so far:" in restarted and summary in restarted
    assert "<tool_response>" not in restarted
    assert sum(second.loss_mask[: second.prompt_len]) == 0


def test_prefix_cache_equals_a_full_prefill_and_empties_on_new_weights(setup) -> None:
    fmt, tokenizer, records, _ = setup
    model = build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=0)
    cached, plain = (HFEngine(model, tokenizer, bucket=4, prefix_cache=c) for c in (True, False))
    prompts = [render_ids(tokenizer, fmt, r["messages"][:1], r["tools"], True)[0] for r in records]
    appended = tokenizer("<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n")
    for turn in range(3):  # each turn extends every prompt by its generation and a response
        sampling = Sampling(max_new_tokens=16, seed=turn)
        a, b = cached.generate(prompts, sampling), plain.generate(prompts, sampling)
        for ga, gb in zip(a, b, strict=True):
            assert ga.ids == gb.ids and ga.logprobs == pytest.approx(gb.logprobs, abs=1e-4)
        prompts = [p + g.ids + appended["input_ids"] for p, g in zip(prompts, a, strict=True)]
    assert cached.cache.reused_tokens > 0 and plain.cache is None
    kept = cached.cache.entries[0]
    longer = [*kept.ids, 5]
    assert cached.cache.lookup(longer) is kept
    with torch.no_grad():
        next(model.parameters()).add_(0.01)  # an optimizer step, in place
    assert cached.cache.lookup(longer) is None and cached.cache.entries == []


def test_shared_prompts_and_prefixes_are_prefilled_once_and_sample_as_without_sharing(
    setup,
) -> None:
    fmt, tokenizer, records, _ = setup
    model = build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=0)
    shared, plain = (HFEngine(model, tokenizer, bucket=4, prefix_cache=c) for c in (True, False))
    unique = [render_ids(tokenizer, fmt, r["messages"][:1], r["tools"], True)[0] for r in records]
    prompts = [p for p in unique[:3] for _ in range(4)]  # 3 tasks x G=4
    sampling = Sampling(max_new_tokens=12, seed=7)
    a, b = shared.generate(prompts, sampling), plain.generate(prompts, sampling)
    for ga, gb in zip(a, b, strict=True):
        assert ga.ids == gb.ids and ga.logprobs == pytest.approx(gb.logprobs, abs=1e-4)
    # every copy skipped all but its last prompt token
    assert shared.cache.reused_tokens == sum(len(p) - 1 for p in prompts)
    # distinct prompts over one system prompt (tasks over the same tools) share it
    head = unique[0][:-3]
    distinct = [[*head, token, *unique[0][-3:]] for token in (5, 6, 7)]
    before = shared.cache.reused_tokens
    a, b = shared.generate(distinct, sampling), plain.generate(distinct, sampling)
    for ga, gb in zip(a, b, strict=True):
        assert ga.ids == gb.ids and ga.logprobs == pytest.approx(gb.logprobs, abs=1e-4)
    assert shared.cache.reused_tokens - before == 3 * len(head)


def test_adaptive_restarts_later_than_a_fixed_threshold_and_never_when_the_rest_fits(
    setup,
) -> None:
    fmt, tokenizer, records, _ = setup
    record = records[0]
    summary = "Found nothing final yet; remaining: call the tool again."
    prompt = len(
        tokenizer(render_text(fmt, record["messages"][:1], record["tools"], True)[0])["input_ids"]
    )
    limit = prompt + 500
    runs = {}
    for strategy in ("summary", "adaptive"):
        engine = RuleEngine(tokenizer, oracle_script(fmt, record)[0], summary)
        (runs[strategy],) = harness(
            setup, engine, context=strategy, context_limit=limit, max_new_tokens=64, max_turns=14
        ).run([record])
        assert runs[strategy].peak_context <= limit
    fixed, adaptive = runs["summary"], runs["adaptive"]
    assert 1 <= adaptive.compactions < fixed.compactions
    assert adaptive.peak_context > fixed.peak_context  # it uses the room it has
    # with turns enough for the rest of the episode inside the limit, no restart at all
    engine = RuleEngine(tokenizer, oracle_script(fmt, record)[0], summary)
    (short,) = harness(
        setup, engine, context="adaptive", context_limit=limit, max_new_tokens=64, max_turns=2
    ).run([record])
    assert short.compactions == 0 and short.end_reason == "max_turns"


def test_self_check_asks_once_and_the_second_answer_counts(setup) -> None:
    from agentrl.harness.context import CHECK_REQUEST

    fmt, tokenizer, records, _ = setup
    scripts = [oracle_script(fmt, r) for r in records]
    engine = ScriptedEngine(tokenizer, scripts)  # repeats its last turn: the same answer
    episodes = harness(setup, engine, context_limit=4096, max_turns=12, self_check=True).run(
        records
    )
    for episode, script in zip(episodes, scripts, strict=True):
        assert episode.success and episode.end_reason == "answer"
        assert len(episode.turns) == len(script) + 1
        asked = [m for m in episode.messages if m["content"] == CHECK_REQUEST]
        assert len(asked) == 1 and asked[0]["role"] == "user"
        (segment,) = episode.segments
        request_ids = tokenizer(CHECK_REQUEST, add_special_tokens=False)["input_ids"]
        start = next(
            i
            for i in range(len(segment.ids))
            if segment.ids[i : i + len(request_ids)] == request_ids
        )
        assert segment.loss_mask[start : start + len(request_ids)] == [0] * len(request_ids)


def test_docker_sandbox_that_cannot_start_is_a_clear_error_observation() -> None:
    from agentrl.envs.families.python_exec import PythonEnv
    from agentrl.tools.sandboxes import SandboxSpec

    box = PythonEnv().bind({}, SandboxSpec("docker", "agentrl-sandbox-missing:none"))
    tools = ToolSet(
        box.functions(), {"run_python": Surface.canonical(canonical_schema(box.run_python))}
    )
    observation = tools.call("run_python", {"code": "print(1)"})
    box.close()
    assert not observation.ok and "docker" in observation.text
    with pytest.raises(ValueError, match="unknown sandbox 'vm'"):
        SandboxSpec("vm", "x")


def test_hf_engine_stops_on_a_stop_string_and_keeps_its_tokens(setup) -> None:
    fmt, tokenizer, records, _ = setup
    model = build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=3)
    engine = HFEngine(model, tokenizer, prefix_cache=False)
    prompt = render_ids(tokenizer, fmt, records[0]["messages"][:1], records[0]["tools"], True)[0]
    (free,) = engine.generate([prompt], Sampling(max_new_tokens=12, seed=1))
    stop = tokenizer.decode(free.ids[4:6])
    assert stop.strip()
    (stopped,) = engine.generate([prompt], Sampling(max_new_tokens=12, seed=1, stop=(stop,)))
    assert free.ids[: len(stopped.ids)] == stopped.ids and len(stopped.ids) <= 6
    assert stop in tokenizer.decode(stopped.ids) and not stopped.stopped


def test_a_prompt_samples_the_same_whichever_prompts_share_its_bucket(setup) -> None:
    fmt, tokenizer, records, _ = setup
    model = build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=0)
    prompts = [render_ids(tokenizer, fmt, r["messages"][:1], r["tools"], True)[0] for r in records]
    sampling = Sampling(max_new_tokens=16, seed=11)
    whole = HFEngine(model, tokenizer, bucket=len(prompts), prefix_cache=False)
    split = HFEngine(model, tokenizer, bucket=2, prefix_cache=False)
    a, b = whole.generate(prompts, sampling), split.generate(prompts, sampling)
    for ga, gb in zip(a, b, strict=True):
        assert ga.ids == gb.ids and ga.logprobs == pytest.approx(gb.logprobs, abs=1e-4)
    # the same prompt at the same position of another call, among other prompts
    others = [prompts[0], *[p[:-1] for p in prompts[1:]]]
    assert whole.generate(others, sampling)[0].ids == a[0].ids
    assert len({tuple(g.ids) for g in a}) == len(a)  # and every prompt its own stream


def test_sampled_rows_follow_the_softmax_and_never_pick_an_excluded_token() -> None:
    from agentrl.harness.engine import prompt_streams, sample_rows

    probs = torch.tensor([0.1, 0.0, 0.6, 0.3])
    scores = probs.log().expand(4, 4)  # the 0 stands for a token top-p removed (-inf)
    streams = prompt_streams(seed=3, count=4)
    draws = torch.stack([sample_rows(scores, streams) for _ in range(5000)])
    share = torch.bincount(draws.flatten(), minlength=4) / draws.numel()
    assert share[1] == 0 and torch.allclose(share, probs, atol=0.012), share
    # a row's draws come from its own stream only
    again = prompt_streams(seed=3, count=4)
    alone = [sample_rows(scores[:1], again[2:3]) for _ in range(50)]
    assert torch.equal(torch.cat(alone), draws[:50, 2])
