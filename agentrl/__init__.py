"""agentrl: train tool-using LLM agents with RL as a reproducible pipeline."""
