"""init stage: tokenizer + small causal LM from config, or a real HF model.

    python stages/init.py             # what `dvc repro init` runs

`model.source: tiny` trains a byte-level BPE on the first `model.tokenizer_samples`
midtrain records (rendered in `model.format`) and builds a Qwen2/Llama model from the
sizes in params. Any other source is an HF id or path, loaded with our chat template
(GPU profiles). Writes `models/base/` in save_pretrained form, plus run.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agentrl.atomic import atomic_dir
from agentrl.chat import get_format, render_text
from agentrl.config import load_params
from agentrl.dataset import iter_records
from agentrl.envs.world import SYLLABLES
from agentrl.model.build import build_tiny, load_hf
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
            model, tokenizer = load_hf(cfg.source, fmt)
        n_params = sum(p.numel() for p in model.parameters())
        run.log_metrics({"parameters": n_params, "vocab_size": len(tokenizer)})
        with atomic_dir(out) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            run.write_run_file(tmp)
        print(
            f"init: {cfg.source} model, {n_params:,} parameters, vocabulary {len(tokenizer)} -> {out}"
        )


if __name__ == "__main__":
    run_stage(main)
