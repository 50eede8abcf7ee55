"""Every environment variable graphpar reads, read here and nowhere else.

Reading is lazy (a function call), so importing graphpar never looks at the environment.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from graphpar.errors import EnvVarError


@dataclass(frozen=True)
class ClusterEnv:
    """Process-placement variables of the launchers graphpar understands (see ``graphpar.communication``)."""

    # graphpar launch (see graphpar.launch.environment, which writes them)
    coordinator: str | None
    num_processes: int | None
    process_id: int | None
    local_devices: int | None
    local_process_id: int | None
    local_process_count: int | None
    cluster_timeout: int | None  # GRAPHPAR_CLUSTER_TIMEOUT, else MindSpore's MS_TOPO_TIMEOUT (seconds)
    heartbeat_timeout: int | None
    restart_count: int
    job_id: str | None  # GRAPHPAR_JOB_ID: one value per `graphpar launch` (every worker, every restart); also
    # tells apart one-host jobs whose ranks meet through a rendezvous file
    # MindSpore Dynamic Cluster
    ms_role: str | None
    ms_sched_host: str | None
    ms_sched_port: int | None
    ms_worker_num: int | None
    ms_node_id: str | None
    ms_enable_recovery_text: str | None  # as set: read through ``ms_enable_recovery``, which refuses a non-boolean
    ms_recovery_path: str | None
    # OpenMPI
    ompi_world_size: int | None
    ompi_world_rank: int | None
    ompi_local_rank: int | None
    ompi_local_size: int | None
    ompi_hnp_uri: str | None
    ompi_job_id: str | None
    # SLURM
    slurm_ntasks: int | None
    slurm_procid: int | None
    slurm_localid: int | None
    slurm_nodelist: str | None
    slurm_job_id: int | None
    slurm_tasks_per_node: str | None
    # MindSpore's Ascend launch (seed 003's run.sh): one process per device
    rank_table_file: str | None = None
    rank_id: int | None = None
    rank_size: int | None = None
    device_id: int | None = None
    # variables set to something unusable: {name: value}. They are errors only where they apply (see ``check``).
    invalid: dict[str, str] = field(default_factory=dict)
    # integers outside what the setting allows: {name: (value, what is valid)}; they too read as unset
    out_of_range: dict[str, tuple[str, str]] = field(default_factory=dict)

    def check(self, *names: str) -> None:
        """Raise for the first of ``names`` that was set to a value that is not an integer or not in its range."""
        for name in names:
            if name in self.invalid:
                raise EnvVarError(name, self.invalid[name], "must be an integer")
            if name in self.out_of_range:
                value, valid = self.out_of_range[name]
                raise EnvVarError(name, value, f"out of range; valid: {valid}")

    @property
    def ms_enable_recovery(self) -> bool:
        """``MS_ENABLE_RECOVERY`` as a strict boolean: refused by name, where recovery is decided, when it is none
        (``cluster_env`` itself never raises)."""
        return bool(parse_flag("MS_ENABLE_RECOVERY", self.ms_enable_recovery_text))

    def present(self, name: str) -> bool:
        """Whether ``name`` was set (a valid or an invalid value; blank reads as unset, as for the integers)."""
        return name in self.invalid or name in self.out_of_range or bool(os.environ.get(name, "").strip())


def _join_timeout_valid(seconds: int) -> bool:
    return seconds != 0


# Integer variables with a range, and what is valid. Outside it, JAX or the socket layer failed deep: a zero join
# timeout or a negative heartbeat timeout aborted the process in C++, MS_SCHED_PORT=99999 raised OverflowError.
_RANGES: dict[str, tuple[Callable[[int], bool], str]] = {
    "GRAPHPAR_CLUSTER_TIMEOUT": (_join_timeout_valid, "seconds to wait for every process to join, >= 1 (a negative "
                                 "value waits a day, msrun's 'no limit'); 0 would give up at once"),
    "MS_TOPO_TIMEOUT": (_join_timeout_valid, "seconds to wait for every process to join, >= 1 (a negative value "
                        "waits a day, msrun's 'no limit'); 0 would give up at once"),
    "GRAPHPAR_HEARTBEAT_TIMEOUT": (lambda seconds: seconds >= 1, "seconds without a heartbeat before a process "
                                   "counts as dead, >= 1 (default 100)"),
    "MS_SCHED_PORT": (lambda port: 1 <= port <= 65535, "a TCP port, 1..65535 (msrun's default 8118)"),
}


def _read_int(name: str, invalid: dict[str, str], out_of_range: dict[str, tuple[str, str]]) -> int | None:
    """The integer value of ``name``, None when unset; a value that is no integer is noted in ``invalid``, one
    outside the variable's range (``_RANGES``) in ``out_of_range``: both read as unset, refused where they apply."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        number = int(value.strip())
    except ValueError:
        invalid[name] = value
        return None
    if name in _RANGES and not _RANGES[name][0](number):
        out_of_range[name] = (value, _RANGES[name][1])
        return None
    return number


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _read_flag(name: str) -> bool | None:
    return parse_flag(name, os.environ.get(name))


def parse_flag(name: str, value: str | None) -> bool | None:
    """A boolean variable: 1/true/yes/on or 0/false/no/off (any case); None when unset or empty. Anything else is
    refused by name: a typo must not switch a feature on (``MS_ENABLE_RECOVERY=off`` once read as true)."""
    if value is None or value.strip() == "":
        return None
    word = value.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise EnvVarError(name, value, "must be a boolean: one of 1, true, yes, on (switch on) or 0, false, no, off "
                                   "(switch off), in any case")


def cluster_env() -> ClusterEnv:
    """The placement variables. A variable set to a non-integer reads as unset and is listed in ``invalid``:
    a launch convention that needs it refuses it by name (``ClusterEnv.check``), the others ignore it."""
    invalid: dict[str, str] = {}
    out_of_range: dict[str, tuple[str, str]] = {}

    def _int(name: str) -> int | None:
        return _read_int(name, invalid, out_of_range)

    return ClusterEnv(
        coordinator=os.environ.get("GRAPHPAR_COORDINATOR") or None,
        num_processes=_int("GRAPHPAR_NUM_PROCESSES"),
        process_id=_int("GRAPHPAR_PROCESS_ID"),
        local_devices=_int("GRAPHPAR_LOCAL_DEVICES"),
        local_process_id=_int("GRAPHPAR_LOCAL_PROCESS_ID"),
        local_process_count=_int("GRAPHPAR_LOCAL_PROCESS_COUNT"),
        cluster_timeout=_int("GRAPHPAR_CLUSTER_TIMEOUT") if os.environ.get("GRAPHPAR_CLUSTER_TIMEOUT")
        else _int("MS_TOPO_TIMEOUT"),
        heartbeat_timeout=_int("GRAPHPAR_HEARTBEAT_TIMEOUT"),
        restart_count=_int("GRAPHPAR_RESTART_COUNT") or 0,
        job_id=(os.environ.get("GRAPHPAR_JOB_ID") or "").strip() or None,
        ms_role=os.environ.get("MS_ROLE") or None,
        ms_sched_host=os.environ.get("MS_SCHED_HOST") or None,
        ms_sched_port=_int("MS_SCHED_PORT"),
        ms_worker_num=_int("MS_WORKER_NUM"),
        ms_node_id=os.environ.get("MS_NODE_ID") or None,
        ms_enable_recovery_text=os.environ.get("MS_ENABLE_RECOVERY"),
        ms_recovery_path=os.environ.get("MS_RECOVERY_PATH") or None,
        ompi_world_size=_int("OMPI_COMM_WORLD_SIZE"),
        ompi_world_rank=_int("OMPI_COMM_WORLD_RANK"),
        ompi_local_rank=_int("OMPI_COMM_WORLD_LOCAL_RANK"),
        ompi_local_size=_int("OMPI_COMM_WORLD_LOCAL_SIZE"),
        ompi_hnp_uri=os.environ.get("OMPI_MCA_orte_hnp_uri") or None,
        ompi_job_id=os.environ.get("OMPI_MCA_ess_base_jobid") or os.environ.get("PMIX_NAMESPACE") or None,
        slurm_ntasks=_int("SLURM_NTASKS"),
        slurm_procid=_int("SLURM_PROCID"),
        slurm_localid=_int("SLURM_LOCALID"),
        slurm_nodelist=os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST") or None,
        slurm_job_id=_int("SLURM_JOB_ID"),
        slurm_tasks_per_node=os.environ.get("SLURM_STEP_TASKS_PER_NODE") or None,
        rank_table_file=os.environ.get("RANK_TABLE_FILE") or os.environ.get("MINDSPORE_HCCL_CONFIG_PATH") or None,
        rank_id=_int("RANK_ID"),
        rank_size=_int("RANK_SIZE"),
        device_id=_int("DEVICE_ID"),
        invalid=invalid,
        out_of_range=out_of_range,
    )


def xla_flags() -> str:
    """``XLA_FLAGS`` as set for this process (the launcher rewrites the CPU device count in its children's copy)."""
    return os.environ.get("XLA_FLAGS", "")


HOST_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def host_device_count() -> int | None:
    """The CPU device count ``XLA_FLAGS`` asks for (``--xla_force_host_platform_device_count=N``), None without one.

    XLA reads the flag only when JAX's first backend starts, and then fails far from the cause: ``=abc`` prints
    XLA's help for every flag and exits, ``=0`` fails with "Could not determine process_index". So the places that
    may start a backend first (``set_context(device_target=...)``, ``graphpar launch``) read it here beforehand
    and refuse a count that is not a whole number >= 1 by name. The last occurrence of the flag counts, as in XLA.
    """
    flags = xla_flags()
    count = None
    for token in flags.split():
        if token != HOST_DEVICE_COUNT_FLAG and not token.startswith(HOST_DEVICE_COUNT_FLAG + "="):
            continue
        value = token.partition("=")[2]
        if not re.fullmatch(r"\d+", value) or int(value) < 1:
            raise EnvVarError("XLA_FLAGS", flags, f"{token} is no device count; valid: a whole number >= 1 of "
                                                  f"CPU devices, e.g. {HOST_DEVICE_COUNT_FLAG}=8")
        count = int(value)
    return count


DEFAULT_EARLY_EXIT_GRACE = 60.0  # seconds; see early_exit_grace


def early_exit_grace() -> float:
    """``GRAPHPAR_EARLY_EXIT_GRACE``: seconds ``graphpar launch`` lets the other workers of a job run on after one
    ended its script cleanly, before it stops the job naming that worker (``--early-exit-grace`` overrides it).

    Default 60 s: the tail of a run (a last checkpoint, one rank's summary) fits in it, and JAX gives up on a peer
    that left anyway (its shutdown barrier times out after 300 s and aborts every process). A negative value lets
    the others run without limit (jobs whose processes never talk to each other)."""
    text = os.environ.get("GRAPHPAR_EARLY_EXIT_GRACE")
    if text is None or text.strip() == "":
        return DEFAULT_EARLY_EXIT_GRACE
    try:
        seconds = float(text.strip())
    except ValueError:
        seconds = math.nan
    if math.isnan(seconds):
        raise EnvVarError("GRAPHPAR_EARLY_EXIT_GRACE", text, "must be a number of seconds (e.g. 60; negative: no "
                          "limit)")
    return seconds


def exit_note_path() -> str | None:
    """``GRAPHPAR_EXIT_NOTE``: the file where a worker of ``graphpar launch`` notes that its script ended (written
    by ``graphpar._cluster`` as Python exits, read by the launcher's supervisor)."""
    return os.environ.get("GRAPHPAR_EXIT_NOTE") or None


def process_environment() -> dict[str, str]:
    """A copy of this process's environment, the base of the environment ``graphpar launch`` gives its children."""
    return dict(os.environ)



def data_path() -> str | None:
    """``DATA_PATH``, as the seed scripts read it."""
    return os.environ.get("DATA_PATH") or None


def progress_bar_enabled() -> bool | None:
    """``GRAPHPAR_PROGRESS``: 1 forces the progress bar on, 0 off; unset means "when stdout is a terminal"."""
    return _read_flag("GRAPHPAR_PROGRESS")


def pass_checks_enabled() -> bool:
    """``GRAPHPAR_CHECK_PASSES``: 1 checks the plan's invariants after every planning pass (``planner.planning``;
    the test suite sets it); unset or 0: no checks between passes (``verify`` still runs where the mode has it)."""
    return bool(_read_flag("GRAPHPAR_CHECK_PASSES"))


def save_graphs_level() -> int | None:
    """``MS_DEV_SAVE_GRAPHS``: MindSpore 2.x's IR-dump level, 0 (off) to 3; None when unset or empty. Any other
    value is refused by name where dumps are decided (MindSpore accepts exactly these four)."""
    value = os.environ.get("MS_DEV_SAVE_GRAPHS")
    if value is None or value.strip() == "":
        return None
    if value.strip() not in ("0", "1", "2", "3"):
        raise EnvVarError("MS_DEV_SAVE_GRAPHS", value, "must be an IR-dump level: 0 (off), 1, 2 or 3 (MindSpore's "
                                                       "levels; graphpar writes the same dumps for 1, 2 and 3)")
    return int(value)


def save_graphs_path() -> str | None:
    """``MS_DEV_SAVE_GRAPHS_PATH``: where MindSpore 2.x writes IR dumps; None when unset or empty."""
    return os.environ.get("MS_DEV_SAVE_GRAPHS_PATH") or None


def compile_cache_enabled() -> bool | None:
    """``MS_COMPILER_CACHE_ENABLE``: MindSpore's switch of the compile cache (1 on, 0 off; any boolean spelling of
    ``parse_flag``); None when unset. ``set_context(enable_compile_cache=...)`` takes precedence, as in MindSpore."""
    return _read_flag("MS_COMPILER_CACHE_ENABLE")


def compile_cache_path() -> str | None:
    """``MS_COMPILER_CACHE_PATH``: MindSpore's compile-cache directory; None when unset or empty."""
    return os.environ.get("MS_COMPILER_CACHE_PATH") or None


_SIZE_UNITS = {"": 1, "B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def compile_cache_max_size() -> int | None:
    """``GRAPHPAR_COMPILE_CACHE_MAX_SIZE``: graphpar's bound of the compile cache's size on disk (MindSpore's
    compile cache has none, nor a variable for one), in bytes: a whole number of bytes or a number with a unit, KB,
    MB, GB or TB (powers of 1024, as MindSpore's ``max_device_memory="3.5GB"`` counts; KiB..TiB spell the same), or
    -1 for no bound. None when unset or empty; any other value, 0 included, is refused by name."""
    value = os.environ.get("GRAPHPAR_COMPILE_CACHE_MAX_SIZE")
    if value is None or value.strip() == "":
        return None
    text = value.strip().upper().replace("IB", "B")
    if text == "-1":
        return -1
    found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?B)?", text)
    size = int(float(found.group(1)) * _SIZE_UNITS[found.group(2) or ""]) if found else 0
    if size < 1:
        raise EnvVarError("GRAPHPAR_COMPILE_CACHE_MAX_SIZE", value,
                          "must be a size on disk: a whole number of bytes or a number with KB, MB, GB or TB (e.g. "
                          "4GB), or -1 for no bound (MS_COMPILER_CACHE_ENABLE=0 switches the cache off)")
    return size


def user_cache_home() -> str:
    """The user's cache directory of the XDG base-directory specification: ``$XDG_CACHE_HOME`` when it is an
    absolute path (the specification ignores a relative one), else ``~/.cache``."""
    home = os.environ.get("XDG_CACHE_HOME") or ""
    return home if os.path.isabs(home) else os.path.join(os.path.expanduser("~"), ".cache")


def interfered_sapp() -> bool:
    """``MS_INTERFERED_SAPP``: ``1`` switches MindSpore's "interfered SAPP" on (``recursive_programming`` keeps the
    ``shard()`` strategies and partitions the MatMuls around them, ``planner.search.sapp_partition``); any other
    value, or none, leaves it off, as MindSpore reads it (``rec_parse_graph.cc``). Read when a plan is made."""
    return os.environ.get("MS_INTERFERED_SAPP") == "1"
