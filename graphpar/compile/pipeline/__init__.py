"""graphpar.compile.pipeline."""
