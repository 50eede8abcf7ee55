"""graphpar.compile.plans."""
