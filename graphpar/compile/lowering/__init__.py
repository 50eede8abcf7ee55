"""graphpar.compile.lowering."""
