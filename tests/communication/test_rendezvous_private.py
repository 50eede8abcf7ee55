"""The one-host rendezvous file (RANK_SIZE/RANK_ID and mpirun ranks on one host) lives in this user's private
directory: 0700 directory, 0600 file, anything owned by another user or with loose permissions refused by name; two
jobs with the same RANK_SIZE started from different shells each meet their own rank 0, and two started at once by
one process are refused by name instead of mixing."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from graphpar.communication import private_dir, rendezvous_file
from graphpar.communication.errors import ClusterError, UnsafePathError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def tmpdir_(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield tmp_path
    rendezvous_file.withdraw()


def test_the_file_is_private_to_this_user(tmpdir_):
    address = rendezvous_file.coordinator_for("job-a", True, 5)
    [published] = list(tmpdir_.glob("graphpar-*/coordinator-*"))
    assert oct(published.stat().st_mode & 0o777) == "0o600"
    assert oct(published.parent.stat().st_mode & 0o777) == "0o700"
    assert published.parent.stat().st_uid == os.geteuid()
    assert rendezvous_file.coordinator_for("job-a", False, 5) == address


def test_loose_permissions_are_refused_by_name(tmpdir_):
    rendezvous_file.coordinator_for("job-b", True, 5)
    [published] = list(tmpdir_.glob("graphpar-*/coordinator-*"))
    published.chmod(0o644)
    with pytest.raises(UnsafePathError, match=rf"{published}.*mode 0644.*expected 0600") as info:
        rendezvous_file.coordinator_for("job-b", False, 5)
    assert info.value.path == str(published)
    published.chmod(0o600)
    published.parent.chmod(0o755)
    with pytest.raises(UnsafePathError, match=rf"{published.parent} has mode 0755.*expected 0700"):
        rendezvous_file.coordinator_for("job-b", False, 5)


@pytest.mark.skipif(os.geteuid() != 0, reason="planting a file of another user needs root (chown)")
def test_a_file_or_directory_of_another_user_is_refused_by_name(tmpdir_):
    rendezvous_file.coordinator_for("job-c", True, 5)
    [published] = list(tmpdir_.glob("graphpar-*/coordinator-*"))
    os.chown(published, 65534, 65534)  # as if another user had planted its address
    with pytest.raises(UnsafePathError, match=rf"{published} is owned by uid 65534, not by this user"):
        rendezvous_file.coordinator_for("job-c", False, 5)
    os.chown(published.parent, 65534, 65534)
    with pytest.raises(UnsafePathError, match=rf"{published.parent} is owned by uid 65534"):
        private_dir.user_dir()


def test_a_symlinked_directory_is_refused(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    os.symlink(tmp_path / "elsewhere", tmp_path / f"graphpar-{os.geteuid()}")
    with pytest.raises(UnsafePathError, match="is a symbolic link"):
        private_dir.user_dir()


_RANK = textwrap.dedent("""
    import sys
    from graphpar import _env
    from graphpar.communication import process_plan, rendezvous_file
    plan = process_plan.from_rank_table(_env.cluster_env(), 20)
    print(sys.argv[1], plan.process_id, plan.coordinator, flush=True)
    joined = sys.argv[2] + "/joined-" + sys.argv[1]
    if plan.process_id == 0:  # the job forms while rank 0 is alive: wait for rank 1 to have read the address
        import os, time
        deadline = time.monotonic() + 60
        while not os.path.exists(joined) and time.monotonic() < deadline:
            time.sleep(0.05)
    else:
        open(joined, "w").close()
    rendezvous_file.withdraw()
""")


def _job(name: str, tmp) -> subprocess.Popen:
    """One job of two ranks started by its own shell, as seed 003's run.sh does."""
    script = tmp / "rank.py"
    script.write_text(_RANK)
    command = (f"RANK_ID=0 {sys.executable} {script} {name} {tmp} & sleep 1.5; "
               f"RANK_ID=1 {sys.executable} {script} {name} {tmp} & wait")
    env = {**os.environ, "PYTHONPATH": ROOT, "RANK_SIZE": "2", "TMPDIR": str(tmp)}
    env.pop("GRAPHPAR_JOB_ID", None)
    return subprocess.Popen(["bash", "-c", command], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


@pytest.mark.dist
def test_two_jobs_with_the_same_rank_size_do_not_collide(tmp_path):
    jobs = [_job("A", tmp_path), _job("B", tmp_path)]
    outputs = [job.communicate(timeout=60)[0] for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], outputs
    seen = {}
    for text in outputs:
        for line in text.splitlines():
            name, rank, address = line.split()
            seen.setdefault(name, set()).add(address)
    assert len(seen["A"]) == 1 and len(seen["B"]) == 1, seen  # each job's ranks agree ...
    assert seen["A"] != seen["B"], seen  # ... on their own coordinator


def test_two_jobs_with_one_key_at_once_are_refused_by_name(tmpdir_):
    code = ("import tempfile, sys, time; tempfile.tempdir = sys.argv[1]; "
            "from graphpar.communication import rendezvous_file as r; print(r.coordinator_for('same', True, 5), "
            "flush=True); time.sleep(30)")
    other = subprocess.Popen([sys.executable, "-c", code, str(tmpdir_)], env={**os.environ, "PYTHONPATH": ROOT},
                             stdout=subprocess.PIPE, text=True)
    try:
        theirs = other.stdout.readline().strip()
        with pytest.raises(ClusterError, match=rf"another job's rank 0 \(pid {other.pid}, coordinator {theirs}\).*"
                                               "GRAPHPAR_JOB_ID"):
            rendezvous_file.coordinator_for("same", True, 5)
    finally:
        other.kill()
        other.wait()
    time.sleep(0.1)
    rendezvous_file.coordinator_for("same", True, 5)  # a dead job's file is replaced
    [published] = list(tmpdir_.glob("graphpar-*/coordinator-*"))
    assert f'"pid": {os.getpid()}' in published.read_text()
