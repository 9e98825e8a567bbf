# vLLM rollout server: its own image, since vLLM pins its own torch and transformers. It
# starts through infra/vllm_serve.sh, the launch command of the tests and of `make vllm`'s
# venv: dev mode (/collective_rpc reload_weights, /reset_prefix_cache, which rl calls after
# every update with harness.engine_reload: vllm) and a copy of the model with its output
# head untied (agentrl/model/untie.py says why).
#   docker build -f infra/docker/vllm.Dockerfile -t agentrl-vllm .
FROM vllm/vllm-openai:v0.33.0

COPY infra/vllm_serve.sh /opt/agentrl/infra/vllm_serve.sh
COPY agentrl/model/untie.py /opt/agentrl/agentrl/model/untie.py
ENV VLLM_PYTHON=python3 \
    VLLM_HOST=0.0.0.0 \
    VLLM_DTYPE=bfloat16
# the repository is mounted at /workspace, as in the gpu-worker: rl's weight snapshots
# (/workspace/checkpoints/rl/serving) are at the same path for both
ENTRYPOINT ["/opt/agentrl/infra/vllm_serve.sh"]
CMD ["/workspace/models/sft", "8000", "--enable-prefix-caching"]
