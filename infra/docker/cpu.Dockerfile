# CPU image: the default profile end to end (dvc repro), the Prefect worker of the compose
# stack and the MLflow server (psycopg2 for its postgres backend).
#   docker build -f infra/docker/cpu.Dockerfile -t agentrl-cpu .
FROM python:3.11-slim-bookworm

# TOKENIZERS_PARALLELISM is no secret (DL3064 matches its name)
# hadolint ignore=DL3064
ENV PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    DVC_NO_ANALYTICS=1 \
    MLFLOW_DISABLE_TELEMETRY=true \
    DO_NOT_TRACK=1 \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    TOKENIZERS_PARALLELISM=false

# git: DVC and the lineage tags read the repository
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
# torch first, from the CPU index: an unpinned resolve pulls a multi-GB CUDA build
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
COPY pyproject.toml README.md ./
COPY agentrl ./agentrl
RUN pip install . psycopg2-binary==2.9.10
COPY stages ./stages
COPY flows ./flows
COPY dvc.yaml params.yaml ./

RUN useradd --create-home --uid 1000 agentrl && chown -R agentrl /app
USER 1000
CMD ["dvc", "repro"]
