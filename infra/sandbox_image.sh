#!/usr/bin/env bash
# Build the docker sandbox's image without a registry: debootstrap a minimal Debian root
# with python3 (from the mirror apt already uses), cache it as a tarball, `docker import` it.
#   sudo bash infra/sandbox_image.sh [TAG]     # default agentrl-sandbox:latest
# Needs root, debootstrap and a running dockerd. The tarball lives in
# ${AGENTRL_CACHE:-~/.cache/agentrl}; delete it to rebuild from the mirror.
set -euo pipefail
tag=${1:-agentrl-sandbox:latest}
suite=${DEBIAN_SUITE:-bookworm}
cache=${AGENTRL_CACHE:-$HOME/.cache/agentrl}/sandbox-rootfs-$suite.tar
if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag: present"
  exit 0
fi
if [ ! -s "$cache" ]; then
  mirror=${DEBIAN_MIRROR:-$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)}
  if [ -z "$mirror" ]; then
    mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list)
  fi
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant=minbase --include=python3-minimal "$suite" "$root/fs" "$mirror" >"$root/log" \
    || { tail -20 "$root/log" >&2; exit 1; }
  mkdir -p "$(dirname "$cache")"
  tar -C "$root/fs" -cf "$cache.tmp" . && mv "$cache.tmp" "$cache"
fi
docker import --change 'CMD ["python3"]' --change 'USER 65534' "$cache" "$tag" >/dev/null
echo "$tag: imported from $cache"
