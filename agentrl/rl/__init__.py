"""Agentic RL: advantages, losses and the trainer on DeepSpeed."""
