"""rlcore: declarative, reproducible reinforcement learning; the library the stages, DVC and the flows run."""
