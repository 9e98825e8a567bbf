# The docker sandbox's image (harness.sandbox: docker): python3 and nothing else; the
# sandbox adds --network none, a read-only root, user nobody and resource limits.
#   docker build -f infra/docker/sandbox.Dockerfile -t agentrl-sandbox:latest infra/docker
FROM python:3.11-slim-bookworm
USER 65534
WORKDIR /tmp
CMD ["python3"]
