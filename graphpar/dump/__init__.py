"""IR dumps: writers of ``step_parallel_begin_*.ir`` / ``*_execute_*.ir`` and their reader."""
