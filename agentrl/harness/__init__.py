"""The agent harness: batched multi-turn rollouts with tools, context management and
token-exact trajectory records (what rl trains on and eval scores)."""
