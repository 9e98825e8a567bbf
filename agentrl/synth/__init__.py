"""MidTool-style synthesis: tool pool -> tasks -> executed trajectories -> layered
verification -> dedup -> JSONL shards per split."""
