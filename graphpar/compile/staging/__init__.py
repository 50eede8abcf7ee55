"""graphpar.compile.staging."""
