"""From a planned graph to a program: the Lowered/Compiled stages, the orchestrator, the compile cache."""
