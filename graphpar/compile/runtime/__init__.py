"""The programs a Cell runs (train step, forward, per-rank calls) and their steps bound to live state."""
