"""Reading each launcher's environment into a process plan, and the Dynamic Cluster scheduler's protocol (run
in threads over 127.0.0.1; the multi-process runs are in test_multiprocess.py)."""

import socket
import threading

import pytest

from graphpar import _env
from graphpar.communication import dynamic_cluster, process_plan, scheduler
from graphpar.communication.channel import Channel
from graphpar.communication.errors import ClusterError

_VARS = ("GRAPHPAR_COORDINATOR", "GRAPHPAR_NUM_PROCESSES", "GRAPHPAR_PROCESS_ID", "GRAPHPAR_LOCAL_PROCESS_ID",
         "GRAPHPAR_LOCAL_PROCESS_COUNT", "GRAPHPAR_LOCAL_DEVICES", "GRAPHPAR_CLUSTER_TIMEOUT", "MS_TOPO_TIMEOUT",
         "MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_NODE_ID", "OMPI_COMM_WORLD_SIZE",
         "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_orte_hnp_uri",
         "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID",
         "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_JOB_ID", "SLURM_STEP_TASKS_PER_NODE")


@pytest.fixture
def env(monkeypatch):
    for name in _VARS:
        monkeypatch.delenv(name, raising=False)

    def set_(**values):
        for name in _VARS:
            monkeypatch.delenv(name, raising=False)
        for k, v in values.items():
            monkeypatch.setenv(k, str(v))
        return _env.cluster_env()

    return set_


def test_no_environment_is_one_process(env):
    assert process_plan.convention(env()) is None


def test_launcher_variables(env):
    e = env(GRAPHPAR_COORDINATOR="127.0.0.1:1234", GRAPHPAR_NUM_PROCESSES=4, GRAPHPAR_PROCESS_ID=3,
            GRAPHPAR_LOCAL_PROCESS_ID=1, GRAPHPAR_LOCAL_PROCESS_COUNT=2, GRAPHPAR_LOCAL_DEVICES=2)
    assert process_plan.convention(e) == "launch"
    plan = process_plan.from_launcher(e)
    assert (plan.num_processes, plan.process_id, plan.local_process_id, plan.local_devices) == (4, 3, 1, 2)
    assert plan.bind_address == "127.0.0.1:1234"


def test_launcher_variables_are_checked(env):
    with pytest.raises(ClusterError, match="GRAPHPAR_PROCESS_ID=4 is out of range; valid: 0..3") as info:
        process_plan.from_launcher(env(GRAPHPAR_COORDINATOR="127.0.0.1:1", GRAPHPAR_NUM_PROCESSES=4,
                                       GRAPHPAR_PROCESS_ID=4))
    assert info.value.variable == "GRAPHPAR_PROCESS_ID"
    with pytest.raises(ClusterError, match="GRAPHPAR_COORDINATOR must be set"):
        process_plan.from_launcher(env(GRAPHPAR_NUM_PROCESSES=2, GRAPHPAR_PROCESS_ID=0))
    with pytest.raises(ClusterError, match="not HOST:PORT"):
        process_plan.from_launcher(env(GRAPHPAR_COORDINATOR="localhost", GRAPHPAR_NUM_PROCESSES=2,
                                       GRAPHPAR_PROCESS_ID=0))
    with pytest.raises(ValueError, match="GRAPHPAR_NUM_PROCESSES='two': must be an integer"):
        process_plan.from_launcher(env(GRAPHPAR_COORDINATOR="127.0.0.1:1", GRAPHPAR_NUM_PROCESSES="two",
                                       GRAPHPAR_PROCESS_ID=0))


def test_precedence_launcher_then_dynamic_cluster_then_mpi_then_slurm(env):
    assert process_plan.convention(env(SLURM_NTASKS=2, SLURM_PROCID=0)) == "slurm"
    assert process_plan.convention(env(OMPI_COMM_WORLD_SIZE=2)) == "openmpi"
    assert process_plan.convention(env(MS_ROLE="MS_WORKER")) == "dynamic_cluster"
    assert process_plan.convention(env(GRAPHPAR_NUM_PROCESSES=2)) == "launch"


def test_a_blank_variable_reads_as_unset(env):
    """A blank OMPI_COMM_WORLD_SIZE selects no MPI job (found by the env fuzz test: it used to select OpenMPI and
    then fail comparing None with the rank); one the plan needs is refused by name."""
    assert process_plan.convention(env(OMPI_COMM_WORLD_SIZE=" ", OMPI_COMM_WORLD_RANK=0)) is None
    blank = env(OMPI_COMM_WORLD_SIZE=" ", OMPI_COMM_WORLD_RANK=0, GRAPHPAR_COORDINATOR="127.0.0.1:1")
    with pytest.raises(ClusterError, match="OMPI_COMM_WORLD_SIZE is blank"):
        process_plan.from_openmpi(blank, 0.01)


def test_openmpi_on_one_host_agrees_on_a_loopback_port(env, tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    common = dict(OMPI_COMM_WORLD_SIZE=2, OMPI_COMM_WORLD_LOCAL_SIZE=2, OMPI_MCA_ess_base_jobid="4242")
    leader = process_plan.from_openmpi(env(OMPI_COMM_WORLD_RANK=0, OMPI_COMM_WORLD_LOCAL_RANK=0, **common), 5)
    other = process_plan.from_openmpi(env(OMPI_COMM_WORLD_RANK=1, OMPI_COMM_WORLD_LOCAL_RANK=1, **common), 5)
    assert leader.coordinator == other.coordinator and leader.coordinator.startswith("127.0.0.1:")
    assert (other.process_id, other.local_process_id, other.local_process_count) == (1, 1, 2)
    from graphpar.communication import rendezvous_file

    rendezvous_file.withdraw()
    assert not list(tmp_path.glob("graphpar-*/coordinator-*"))


def test_openmpi_across_hosts_uses_the_mpirun_host(env):
    e = env(OMPI_COMM_WORLD_SIZE=4, OMPI_COMM_WORLD_RANK=2, OMPI_COMM_WORLD_LOCAL_SIZE=2,
            OMPI_MCA_orte_hnp_uri="1964834816.0;tcp://10.1.2.3,10.9.9.9:42215")
    plan = process_plan.from_openmpi(e, 5)
    assert plan.coordinator == f"10.1.2.3:{(1964834816 // 4096) % 4096 + 65535 - 4096 + 1}"
    e = env(OMPI_COMM_WORLD_SIZE=4, OMPI_COMM_WORLD_RANK=2, OMPI_COMM_WORLD_LOCAL_SIZE=2,
            GRAPHPAR_COORDINATOR="127.0.0.1:999")
    assert process_plan.from_openmpi(e, 5).coordinator == "127.0.0.1:999"


def test_slurm_places_the_coordinator_on_the_first_node(env):
    plan = process_plan.from_slurm(env(SLURM_NTASKS=4, SLURM_PROCID=3, SLURM_LOCALID=1, SLURM_JOB_ID=77,
                                       SLURM_STEP_NODELIST="gpu[07-08],cpu1", SLURM_STEP_TASKS_PER_NODE="2(x2)"))
    assert plan.coordinator == f"gpu07:{77 + 65535 - 4096 + 1}"
    assert (plan.process_id, plan.local_process_id, plan.local_process_count) == (3, 1, 2)
    assert process_plan.first_slurm_host("node1") == "node1"


def test_timeouts(env):
    assert process_plan.timeouts(env()) == (600, 100)
    assert process_plan.timeouts(env(MS_TOPO_TIMEOUT=30))[0] == 30
    assert process_plan.timeouts(env(MS_TOPO_TIMEOUT=30, GRAPHPAR_CLUSTER_TIMEOUT=7))[0] == 7
    assert process_plan.timeouts(env(GRAPHPAR_CLUSTER_TIMEOUT=-1))[0] == 24 * 3600


# --- the Dynamic Cluster scheduler, over loopback ------------------------------------------------------------------
def _scheduler(worker_num, timeout=10.0):
    port = process_plan.free_port()
    lines = []
    sched = scheduler.Scheduler("127.0.0.1", port, worker_num, timeout, say=lines.append)
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("status", sched.serve()), daemon=True)
    thread.start()
    return port, sched, thread, result, lines


def _register(port, node_id=None, worker_num=2):
    for _ in range(100):
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            break
        except OSError:
            threading.Event().wait(0.05)
    channel = Channel(sock)
    channel.send({"op": "register", "node_id": node_id, "worker_num": worker_num, "pid": 1, "hostname": "h"})
    return channel


def test_scheduler_assigns_fixed_ids_then_registration_order():
    port, sched, thread, result, lines = _scheduler(3)
    b = _register(port, None, 3)
    a = _register(port, "2", 3)
    threading.Event().wait(0.2)
    c = _register(port, "worker_x", 3)
    first = b.recv(timeout=10)
    assert first["process_id"] == 0 and first["advertise_host"] == "127.0.0.1"
    b.send({"op": "coordinator", "address": "127.0.0.1:5"})
    assert a.recv(timeout=10) == {"op": "assign", "process_id": 2, "num_processes": 3, "local_process_id": 2,
                                  "local_process_count": 3, "coordinator": "127.0.0.1:5"}
    assert c.recv(timeout=10)["process_id"] == 1
    late = _register(port, "extra", 3)
    refusal = late.recv(timeout=10)
    assert refusal["op"] == "refused" and "MS_NODE_ID=extra" in refusal["reason"]
    assert "already has MS_WORKER_NUM=3 workers" in refusal["reason"]
    for ch in (a, b, c):
        ch.send({"op": "exit", "failed": False})
        ch.close()
    thread.join(10)
    assert result["status"] == 0


def test_scheduler_refuses_duplicate_and_out_of_range_ids():
    port, sched, thread, result, lines = _scheduler(2, timeout=2)
    first = _register(port, "0")  # kept open: a worker that disconnects before the job forms frees its place
    dup = _register(port, "0").recv(timeout=10)
    assert dup["op"] == "refused" and "MS_NODE_ID=0 is already taken" in dup["reason"]
    out = _register(port, "5").recv(timeout=10)
    assert "valid: 0..1" in out["reason"]
    wrong = _register(port, None, worker_num=3).recv(timeout=10)
    assert "MS_WORKER_NUM=3 differs" in wrong["reason"]
    thread.join(10)
    assert result["status"] == 1  # only one worker by the timeout
    first.close()


def test_too_few_workers_names_the_missing_one():
    port, sched, thread, result, lines = _scheduler(3, timeout=1)
    chans = [_register(port, str(i), 3) for i in (0, 2)]
    message = chans[0].recv(timeout=10)
    assert message["op"] == "failed"
    assert "only 2 of MS_WORKER_NUM=3" in message["reason"] and "Missing: MS_NODE_ID=1" in message["reason"]
    thread.join(10)
    assert result["status"] == 1


def test_a_worker_that_disconnects_aborts_the_others():
    port, sched, thread, result, lines = _scheduler(2)
    a, b = _register(port, "0"), _register(port, "1")
    a.recv(timeout=10)
    a.send({"op": "coordinator", "address": "127.0.0.1:5"})
    b.recv(timeout=10)
    b.close()  # dies without saying exit
    abort = a.recv(timeout=10)
    assert abort["op"] == "abort" and "process 1" in abort["reason"] and "killed" in abort["reason"]
    a.send({"op": "exit", "failed": False})
    a.close()
    thread.join(10)
    assert result["status"] == 1


def test_worker_without_scheduler_times_out_naming_the_address():
    port = process_plan.free_port()
    with pytest.raises(ClusterError, match=f"no scheduler answered at MS_SCHED_HOST:MS_SCHED_PORT = 127.0.0.1:{port}"):
        dynamic_cluster.join("127.0.0.1", port, 2, None, 0.5, None)
