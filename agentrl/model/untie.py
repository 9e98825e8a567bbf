"""Write a saved model's tied output head out as its own tensor, for a rollout server that
reloads weights in place.

vLLM (0.32, CPU and GPU) ties ``lm_head`` to ``embed_tokens`` once, at start; its in-place
``reload_weights`` materialises a new embedding and leaves the head on the old one, so a
reloaded tied model samples from the new body through the launch-time head (measured: the
log-probs then match neither weights). With ``tie_word_embeddings: false`` and an explicit
``lm_head.weight`` both reload, and the served log-probs equal the trainer's. The function
is the same: the head equals the embedding.

Standalone (stdlib, torch, safetensors), so the vLLM venv runs it before it serves:

    python agentrl/model/untie.py SRC_DIR DST_DIR     # DST_DIR may be SRC_DIR
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

HEAD = "lm_head.weight"
INDEX = "model.safetensors.index.json"


def _embedding_key(keys: list[str]) -> str:
    found = [k for k in keys if k.endswith("embed_tokens.weight")]
    if len(found) != 1:
        raise ValueError(f"expected one *embed_tokens.weight tensor, found {found}")
    return found[0]


def untie_embeddings(src: Path, dst: Path) -> bool:
    """Copy the model in ``src`` to ``dst`` (in place when equal) with an untied head;
    True if it was tied. Single-file and sharded safetensors checkpoints."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    src, dst = Path(src), Path(dst)
    if src.resolve() != dst.resolve():
        shutil.copytree(src, dst, dirs_exist_ok=True)
    config_path = dst / "config.json"
    config = json.loads(config_path.read_text())
    tied = bool(config.get("tie_word_embeddings", False))
    if not tied:
        return False
    if (dst / INDEX).is_file():
        index = json.loads((dst / INDEX).read_text())
        weight_map: dict[str, str] = index["weight_map"]
        file = dst / weight_map[_embedding_key(list(weight_map))]
    else:
        index, weight_map, file = None, {}, dst / "model.safetensors"
    with safe_open(file, "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no __iter__)
        metadata = f.metadata() or {"format": "pt"}
    if HEAD not in tensors:
        tensors[HEAD] = tensors[_embedding_key(list(tensors))].clone()
    tmp = file.with_name(f".{file.name}.tmp")
    save_file(tensors, tmp, metadata=metadata)
    tmp.replace(file)
    if index is not None:
        weight_map[HEAD] = file.name
        (dst / INDEX).write_text(json.dumps(index, indent=2))
    config["tie_word_embeddings"] = False
    config_path.write_text(json.dumps(config, indent=2))
    return True


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python agentrl/model/untie.py SRC_DIR DST_DIR")
    untie_embeddings(Path(sys.argv[1]), Path(sys.argv[2]))
