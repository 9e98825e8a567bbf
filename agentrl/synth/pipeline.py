"""Run synthesis for every split: parallel samples, ordered dedup, streaming shard writes.

Samples are made in index order chunks by a process pool and consumed in order, so the
accepted set, the dedup decisions and the bytes written are the same for any number of
workers. Writing streams shard by shard; only curriculum splits are held in memory to sort.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from rich.progress import Progress

from agentrl.config import SPLITS, ConfigError, SplitSection, SynthSection
from agentrl.dataset import split_dir
from agentrl.envs.registry import Registry, load_registry
from agentrl.errors import StageError
from agentrl.synth.sampler import Outcome, Sampler, eligible_families
from agentrl.synth.teacher import TeacherError

CHUNK = 32


class SynthError(StageError):
    """A split could not be filled: its knobs make (almost) every sample fail."""


def content_key(record: dict[str, Any]) -> str:
    """Dedup key: normalised messages and environment state."""
    blob = json.dumps(
        [record["messages"], record["env"] and record["env"]["state"]], sort_keys=True
    )
    return hashlib.sha256(" ".join(blob.lower().split()).encode()).hexdigest()


@dataclass(frozen=True)
class Encoded:
    """A sample serialised where it was made, so the ordered writer only dedups and writes."""

    family: str
    reason: str | None
    line: str = ""
    key: str = ""
    depth: int = 0
    turns: int = 0
    tokens: int = 0
    recovered: bool = False


def encode(outcome: Outcome) -> Encoded:
    record = outcome.record
    if record is None:
        return Encoded(outcome.family, outcome.reason)
    return Encoded(
        family=record["family"],
        reason=None,
        line=json.dumps(record, ensure_ascii=False) + "\n",
        key=content_key(record),
        depth=record["depth"],
        turns=record["meta"]["turns"],
        tokens=record["meta"]["approx_tokens"],
        recovered=record["meta"]["recovery"] is not None,
    )


def build_registry(cfg: SynthSection, params_file: str = "params.yaml") -> Registry:
    """The registry for ``cfg``; bad plugin paths or families become ConfigErrors."""
    registry = load_registry(cfg.envs, cfg.heldout_tool_share, params_file)
    for split, scfg in cfg.splits.items():
        for family in scfg.families or []:
            if family not in registry.envs:
                known = ", ".join(registry.envs)
                raise ConfigError(
                    f"{params_file}: synth.splits.{split}.families: unknown family '{family}' (known: {known})"
                )
        if not eligible_families(registry, split, scfg.families) and scfg.n:
            raise ConfigError(
                f"{params_file}: synth.splits.{split}.families: no family fits this split"
            )
    return registry


_WORKER: dict[str, Any] = {}


def _init_worker(cfg_json: str, seed: int) -> None:
    cfg = SynthSection.model_validate_json(cfg_json)
    _WORKER["sampler"] = Sampler(Registry(cfg.envs, cfg.heldout_tool_share), seed, cfg.teacher)


def _run_chunk(job: tuple[str, str, list[str], int, int]) -> list[Encoded]:
    split, split_json, families, start, stop = job
    cfg = SplitSection.model_validate_json(split_json)
    sampler: Sampler = _WORKER["sampler"]
    return [encode(sampler.sample(split, cfg, families, i)) for i in range(start, stop)]


class ShardWriter:
    """Writes records to ``shard-NNNNN.jsonl`` files of at most ``size`` lines."""

    def __init__(self, directory: Path, size: int):
        self.directory, self.size, self.count, self._file = directory, size, 0, None
        directory.mkdir(parents=True, exist_ok=True)

    def write(self, line: str) -> None:
        if self.count % self.size == 0:
            self.close()
            self._file = (self.directory / f"shard-{self.count // self.size:05d}.jsonl").open(
                "w", encoding="utf-8"
            )
        self._file.write(line)
        self.count += 1

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _outcomes(
    split: str,
    scfg: SplitSection,
    families: list[str],
    sampler: Sampler,
    pool: Any,
    workers: int,
    limit: int,
) -> Iterator[Encoded]:
    """Outcomes in index order; a pool gets a bounded window of chunks ahead of the reader,
    so stopping at the target wastes at most that window."""
    jobs = (
        (split, scfg.model_dump_json(), families, s, min(s + CHUNK, limit))
        for s in range(0, limit, CHUNK)
    )
    if pool is None:
        for job in jobs:
            yield from (
                encode(sampler.sample(split, scfg, families, i)) for i in range(job[3], job[4])
            )
        return
    pending = deque(pool.apply_async(_run_chunk, (job,)) for job in islice(jobs, 2 * workers))
    while pending:
        chunk = pending.popleft().get()
        pending.extend(pool.apply_async(_run_chunk, (job,)) for job in islice(jobs, 1))
        yield from chunk


def _split_stats() -> dict[str, Any]:
    return {
        "n": 0,
        "attempts": 0,
        "families": Counter(),
        "rejections": Counter(),
        "tokens": 0,
        "turns": Counter(),
        "depth": Counter(),
        "recoveries": 0,
        "seconds": 0.0,
    }


def _write_split(
    split: str, cfg: SynthSection, registry: Registry, sampler: Sampler, pool: Any, out_dir: Path
) -> dict[str, Any]:
    """Fill one split: draw in index order, reject and dedup, write (curriculum: sorted)."""
    scfg = cfg.splits[split]
    st = _split_stats()
    started = time.perf_counter()
    writer = ShardWriter(split_dir(out_dir, split), cfg.shard_size)

    def emit(sample: Encoded) -> None:
        writer.write(sample.line)
        st["n"] += 1
        st["families"][sample.family] += 1
        st["tokens"] += sample.tokens
        st["turns"][sample.turns] += 1
        st["depth"][sample.depth] += 1
        st["recoveries"] += sample.recovered

    families = eligible_families(registry, split, scfg.families)
    limit = scfg.n * cfg.max_attempts_factor
    seen: set[str] = set()
    held: list[Encoded] = []  # curriculum splits are sorted before writing
    accepted = 0
    if scfg.n:
        for sample in _outcomes(split, scfg, families, sampler, pool, cfg.workers, limit):
            st["attempts"] += 1
            reason = "duplicate" if sample.reason is None and sample.key in seen else sample.reason
            if reason is not None:
                st["rejections"][reason] += 1
                continue
            seen.add(sample.key)
            accepted += 1
            held.append(sample) if scfg.curriculum else emit(sample)
            if accepted == scfg.n:
                break
    if accepted < scfg.n:
        top = ", ".join(f"{r}={c}" for r, c in st["rejections"].most_common(3))
        raise SynthError(
            f"split '{split}': {accepted} of {scfg.n} samples after {limit} draws ({top})"
        )
    for sample in sorted(held, key=lambda e: e.depth):
        emit(sample)
    for i in range(scfg.copy_items):
        emit(encode(sampler.copy_item(split, i)))
    writer.close()
    st["seconds"] = round(time.perf_counter() - started, 3)
    return st


def synthesize(
    cfg: SynthSection, seed: int, out_dir: Path, registry: Registry, progress: bool = True
) -> dict[str, Any]:
    """Write every configured split under ``out_dir``; return the statistics per split."""
    sampler = Sampler(registry, seed, cfg.teacher)
    if sampler.teacher is not None:
        try:
            sampler.teacher.check()
        except TeacherError as err:
            raise SynthError(str(err)) from err
    pool = None
    if cfg.workers > 1:
        # forkserver: forking a process with live threads (tqdm's monitor, HTTP clients) can deadlock
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["agentrl.synth.sampler"])
        pool = ctx.Pool(cfg.workers, _init_worker, (cfg.model_dump_json(), seed))
    stats: dict[str, Any] = {}
    failed = True
    try:
        with Progress(disable=not progress) as bar:
            splits = [s for s in SPLITS if s in cfg.splits]
            task = bar.add_task("synth", total=len(splits))
            for split in splits:
                bar.update(task, description=f"synth {split}")
                stats[split] = _write_split(split, cfg, registry, sampler, pool, out_dir)
                bar.advance(task)
        failed = False
    finally:
        if pool is not None:
            # close waits for the small look-ahead window; terminate only on failure
            pool.terminate() if failed else pool.close()
            pool.join()
    return stats
