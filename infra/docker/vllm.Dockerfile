# vLLM rollout server: its own image, since vLLM pins its own torch and transformers.
# Dev mode exposes /collective_rpc and /reset_prefix_cache, which the openai engine calls
# (harness.engine_reload: vllm) to reload weights after each update.
#   docker build -f infra/docker/vllm.Dockerfile -t agentrl-vllm .
FROM vllm/vllm-openai:v0.33.0

ENV VLLM_SERVER_DEV_MODE=1
# the policy directory is mounted at /models/policy (models/sft, then each rl checkpoint)
CMD ["/models/policy", "--served-model-name", "policy", "--host", "0.0.0.0", "--port", "8000", \
     "--dtype", "bfloat16", "--enable-prefix-caching"]
