"""Evaluation: first-turn format checks now; the full eval runner comes with the eval stage."""
