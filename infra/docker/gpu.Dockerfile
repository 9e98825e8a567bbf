# GPU image: CUDA PyTorch, DeepSpeed with its ops prebuilt (no JIT build at first use),
# the project. Rollouts go to the vLLM server (vllm.Dockerfile), which pins its own torch.
#   docker build -f infra/docker/gpu.Dockerfile -t agentrl-gpu .
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04

# TOKENIZERS_PARALLELISM is no secret (DL3064 matches its name)
# hadolint ignore=DL3064
ENV DEBIAN_FRONTEND=noninteractive \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    DVC_NO_ANALYTICS=1 \
    MLFLOW_DISABLE_TELEMETRY=true \
    DO_NOT_TRACK=1 \
    TOKENIZERS_PARALLELISM=false \
    # Ampere and Hopper: the ops are compiled for these at build time
    TORCH_CUDA_ARCH_LIST="8.0;8.6;9.0"

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev git ninja-build openssh-client pdsh \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv

WORKDIR /app
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128
# DeepSpeed ops ahead of time: fused/CPU Adam and the transformer-free ops we use
RUN DS_BUILD_FUSED_ADAM=1 DS_BUILD_CPU_ADAM=1 DS_BUILD_UTILS=1 \
    pip install --no-build-isolation deepspeed==0.19.8 \
    && ds_report
COPY pyproject.toml README.md ./
COPY agentrl ./agentrl
RUN pip install .
COPY stages ./stages
COPY flows ./flows
COPY infra ./infra
COPY dvc.yaml params.yaml ./
CMD ["dvc", "repro"]
