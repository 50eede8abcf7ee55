"""Containing tensorstore's reference leak, which made every asynchronous save grow the process by ~20 KB.

The upstream bug (tensorstore 0.1.86, ``python/tensorstore/json_type_caster.cc``): ``JsonToPyObject`` inserts each
key and value of a JSON object with ``PyDict_SetItem(dict, key.release(), value.release())``. ``PyDict_SetItem``
does not steal references, so every key and value of every dict tensorstore hands to Python keeps one reference
too many and is never freed. Orbax calls two such functions on every save (docs/checkpoints.md §4 has the numbers
and a reproducer with orbax alone): ``tensorstore.experimental_collect_matching_metrics`` twice per save (to log
throughput; the bulk of the growth, whatever the model) and ``KvStore.Spec.to_json`` once per array.

graphpar contains the first: orbax's ``get_tensorstore_raw_bytes`` is given the same sum read from tensorstore's
Prometheus text export, which returns plain strings. :func:`contain` installs it once, when graphpar creates its
checkpointer, and only while a probe shows the leak, so a fixed tensorstore gets orbax's own code back. The
per-array part cannot be avoided from outside tensorstore and is left to the upstream fix.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

_installed = threading.Lock()
_done = False


def json_conversion_leaks() -> bool:
    """Whether tensorstore's JSON-to-Python conversion keeps an extra reference to the values of a dict: a
    nested dict held only by its parent shows a reference count of 3 (parent, argument, leak) instead of 2."""
    import tensorstore as ts

    probe = ts.Spec({"driver": "zarr", "kvstore": {"driver": "memory"}}).to_json()
    return sys.getrefcount(probe["kvstore"]) > 2


def raw_bytes(direction: Any) -> int:
    """Orbax's ``get_tensorstore_raw_bytes``: the bytes tensorstore's kvstore drivers read or wrote so far, summed
    over the drivers, from the Prometheus export (strings; no dict crosses the leaking conversion)."""
    import tensorstore as ts

    suffix = "_bytes_written" if direction.value == "write" else "_bytes_read"
    total = 0
    for line in ts.experimental_collect_prometheus_format_metrics("/tensorstore/kvstore/"):
        if line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        if name.split("{")[0].endswith(suffix):
            total += int(float(value))
    return total


def contain() -> bool:
    """Route orbax's per-save metric reading around the leak (once per process); True when it was needed."""
    global _done
    with _installed:
        if _done:
            return False
        _done = True
        if not json_conversion_leaks():
            return False
        from orbax.checkpoint._src.serialization import tensorstore_utils

        tensorstore_utils.get_tensorstore_raw_bytes = raw_bytes
        return True
