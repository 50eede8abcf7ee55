"""Per-kind sharding rules (see ``graphpar.parallel.dims``): graphpar ops and raw jax primitives."""
