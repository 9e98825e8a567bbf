"""GPU profiles: partial params files (``infra/profiles/*.yaml``) merged over params.yaml,
so a profile changes knobs, never code paths."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from agentrl.atomic import write_text_atomic
from agentrl.config import ConfigError, load_params


def merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overlay`` laid over it: mappings merge key by key, anything else
    (lists included) is replaced."""
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def apply_profile(profile: Path, params: Path, out: Path) -> None:
    """Write ``out`` = ``params`` + ``profile``, validated before anything is written."""
    if not profile.is_file():
        raise ConfigError(f"{profile}: profile not found")
    overlay = yaml.safe_load(profile.read_text()) or {}
    if not isinstance(overlay, dict):
        raise ConfigError(f"{profile}: a profile is a mapping of params sections")
    merged = merge(yaml.safe_load(params.read_text()), overlay)
    text = f"# {params} with the profile {profile} applied (agentrl profile)\n"
    text += yaml.safe_dump(merged, sort_keys=False)
    tmp = out.with_name(f".{out.name}.check")
    tmp.write_text(text)
    try:
        load_params(tmp)
    except ConfigError as err:
        raise ConfigError(f"{profile} over {params}: {str(err).split(': ', 1)[1]}") from err
    finally:
        tmp.unlink()
    write_text_atomic(out, text)
