"""Execution plans (where arrays live, what is differentiated), their Traced/Planned results, choosing one."""
