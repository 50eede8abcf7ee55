"""IR dumps: writers of ``step_parallel_begin_*.ir`` / ``*_execute_*.ir``, their reader, and their JSON views."""
