"""Per-kind sharding rules (see ``graphpar.planner.dims``): graphpar ops and raw jax primitives."""
