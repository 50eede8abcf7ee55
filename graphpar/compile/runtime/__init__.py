"""graphpar.compile.runtime."""
