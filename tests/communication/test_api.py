"""Single-process semantics of graphpar.communication on 8 CPU devices: ranks, groups, backends, errors."""

import jax
import pytest

import graphpar as ms
from graphpar import _cluster
from graphpar import communication as comm
from graphpar.communication import management
from graphpar.communication.errors import CommunicationError


@pytest.fixture(autouse=True)
def _no_groups():
    management._groups.clear()
    comm.GlobalComm.INITED = False
    yield
    management._groups.clear()
    comm.GlobalComm.INITED = False


def test_init_without_environment_only_records_the_backend():
    comm.init()
    comm.init()  # idempotent
    assert comm.GlobalComm.INITED and comm.GlobalComm.BACKEND == "mccl"
    assert comm.GlobalComm.WORLD_COMM_GROUP == comm.MCCL_WORLD_COMM_GROUP
    assert not jax.distributed.is_initialized()
    comm.release()
    comm.init("gloo")
    assert comm.GlobalComm.BACKEND == "gloo"


def test_world_ranks_on_one_process():
    comm.init()
    assert comm.get_group_size() == 8 == comm.get_group_size(comm.NCCL_WORLD_COMM_GROUP)
    assert comm.get_rank() == 0 and comm.get_local_rank() == 0
    assert comm.get_local_rank_size() == 8
    assert comm.get_process_index() == 0 and comm.get_process_count() == 1


@pytest.mark.parametrize("name,message", [
    ("nccl", "set_context(device_target='GPU')"),
    ("hccl", "no Ascend backend"),
    ("mpi", "unknown backend"),
])
def test_backend_mismatch_is_named(name, message):
    with pytest.raises(CommunicationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        comm.init(name)


def test_backend_cannot_change_while_initialized():
    comm.init("gloo")
    with pytest.raises(CommunicationError, match="already initialized with backend 'gloo'"):
        comm.init("mccl")


def test_groups_translate_ranks():
    comm.create_group("g", [6, 2, 4])
    assert comm.get_group_size("g") == 3
    assert comm.get_world_rank_from_group_rank("g", 0) == 6
    assert comm.get_group_rank_from_world_rank(4, "g") == 2
    assert comm.get_rank("g") == 0  # this process drives every rank; its first one in the group is group rank 0
    assert comm.get_local_rank_size("g") == 3
    comm.destroy_group("g")
    with pytest.raises(CommunicationError, match="unknown communication group 'g'"):
        comm.get_group_size("g")


@pytest.mark.parametrize("ranks,message", [
    ([0, 0], "distinct ranks in 0..7"),
    ([3, 8], "distinct ranks in 0..7"),
    ([], "distinct ranks"),
    (["a"], "list of ints"),
])
def test_create_group_refuses_bad_ranks(ranks, message):
    with pytest.raises(CommunicationError, match=message):
        comm.create_group("bad", ranks)


def test_group_errors_name_the_group():
    comm.create_group("g", [0, 1])
    with pytest.raises(CommunicationError, match="already exists"):
        comm.create_group("g", [2, 3])
    with pytest.raises(CommunicationError, match="world group cannot be destroyed"):
        comm.destroy_group(comm.HCCL_WORLD_COMM_GROUP)
    with pytest.raises(CommunicationError, match=r"world rank 5 is not in group 'g' \(ranks \[0, 1\]\)"):
        comm.get_group_rank_from_world_rank(5, "g")
    with pytest.raises(CommunicationError, match="has ranks 0..1"):
        comm.get_world_rank_from_group_rank("g", 2)


def test_release_forgets_groups():
    comm.init()
    comm.create_group("g", [0, 1])
    comm.release()
    assert not comm.GlobalComm.INITED
    with pytest.raises(CommunicationError):
        comm.get_group_size("g")


def test_device_queries_before_init_in_a_cluster_are_refused(monkeypatch):
    monkeypatch.setenv("MS_ROLE", "MS_WORKER")
    with pytest.raises(CommunicationError, match="call graphpar.communication.init\\(\\) first"):
        comm.get_rank()


def test_set_context_defers_the_platform_check_while_a_job_forms(monkeypatch):
    """set_context(device_target=...) before init() must not start a backend in a multi-process job."""
    def no_backend_yet(*args, **kwargs):
        raise AssertionError("a JAX backend was started before init()")

    monkeypatch.setenv("GRAPHPAR_NUM_PROCESSES", "2")
    assert _cluster.cluster_pending()
    monkeypatch.setattr(jax, "devices", no_backend_yet)
    ms.set_context(device_target="GPU")  # checked by init() once the job has formed
