"""The bottom of graphpar.compile: a Cell tree as pure state, tracing it, the lowering interpreter, step parts."""
