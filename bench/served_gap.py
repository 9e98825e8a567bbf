"""How closely a vLLM server's log-probs follow the trainer's, per served dtype: the two
numbers ``rl.sync_tolerance`` must sit between.

    make vllm
    python bench/served_gap.py --project . --model sft --moved rl --probes 8

PROJECT holds a params.yaml, data/synth and models/<model> and models/<moved> (two saved
models of one architecture, e.g. the sft and rl stages' outputs). For each ``--dtypes``
entry the script starts vLLM on models/<model> through infra/vllm_serve.sh
(``VLLM_DTYPE``) and, on the first turn of ``--probes`` rl tasks, prints the mean
|served - trained| log-prob of the tokens the server samples (``served_gap``, the check
rl runs at start) against:

- the same weights, as the trainer of each ``base.precision`` computes them (fp32, and
  bf16 autocast over float32 masters): what a server that holds the trainer's weights
  shows;
- models/<moved>, in fp32: what a server that missed a reload shows.

The tolerance must lie above the first kind and below the second. Simplification: the
"missed reload" is the whole distance between two checkpoints of the pipeline (all the rl
steps), not one step's update.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from statistics import fmean, pstdev

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from async_rl import served, start_vllm  # noqa: E402

from agentrl.chat import get_format  # noqa: E402
from agentrl.config import load_params  # noqa: E402
from agentrl.dataset import iter_records  # noqa: E402
from agentrl.harness.build import openai_engine  # noqa: E402
from agentrl.model.build import load_model_dir  # noqa: E402
from agentrl.rl.weight_sync import served_gap  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--project", type=Path, default=ROOT)
    parser.add_argument("--model", default="sft")
    parser.add_argument("--moved", default="rl")
    parser.add_argument("--probes", type=int, default=8)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--port", type=int, default=8123)
    args = parser.parse_args()
    params = load_params(args.project / "params.yaml")
    fmt = get_format(params.model.format)
    held, tokenizer = load_model_dir(args.project / "models" / args.model, fmt)
    moved, _ = load_model_dir(args.project / "models" / args.moved, fmt)
    records = list(iter_records(args.project / "data" / "synth", "rl", args.probes))
    chunk = params.rl.logprob_chunk
    rows = []
    for dtype in args.dtypes:
        os.environ["VLLM_DTYPE"] = dtype
        log = args.project / "checkpoints" / f"served_gap_{dtype}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        server = start_vllm(args.project / "models" / args.model, args.port, log)
        try:
            engine = openai_engine(served(params.harness, args.port), tokenizer)
            cases = {"same weights, fp32 trainer": (held, "fp32"),
                     "same weights, bf16 trainer": (held, "bf16"),
                     f"models/{args.moved} (missed reload)": (moved, "fp32")}  # fmt: skip
            for name, (model, precision) in cases.items():
                gaps = [served_gap(engine, model, tokenizer, fmt, r, chunk, precision)
                        for r in records]  # fmt: skip
                rows.append((dtype, name, fmean(gaps), pstdev(gaps), max(gaps)))
                print(f"{dtype:9s} {name:34s} mean {fmean(gaps):.2e} max {max(gaps):.2e}",
                      flush=True)  # fmt: skip
            engine.close()
        finally:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=120)
    print(f"\n| served dtype | against | mean gap ({args.probes} probes) | sd | max |")
    print("|---|---|---|---|---|")
    for dtype, name, mean, sd, top in rows:
        print(f"| {dtype} | {name} | {mean:.2e} | {sd:.2e} | {top:.2e} |")


if __name__ == "__main__":
    main()
