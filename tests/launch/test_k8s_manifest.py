"""examples/k8s: the Indexed Job manifest is valid YAML and its command is a valid graphpar launch invocation."""

import argparse
import shlex
from pathlib import Path

import yaml

from graphpar.launch import cli
from graphpar.launch.config import resolve

MANIFEST = Path(__file__).resolve().parents[2] / "examples" / "k8s" / "graphpar-train.yaml"


def test_manifest_is_an_indexed_job_behind_a_headless_service():
    service, job = list(yaml.safe_load_all(MANIFEST.read_text()))
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["selector"]["job-name"] == job["metadata"]["name"]


def test_each_pod_runs_a_valid_graphpar_launch(monkeypatch):
    _, job = list(yaml.safe_load_all(MANIFEST.read_text()))
    container = job["spec"]["template"]["spec"]["containers"][0]
    script = container["args"][0]
    assert container["command"] == ["bash", "-c"] and script.startswith("graphpar launch")
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())
    for index in range(job["spec"]["completions"]):
        argv = shlex.split(script.replace("${JOB_COMPLETION_INDEX}", str(index)))[1:]
        argv[argv.index("python")] = "python3"  # an interpreter that exists here
        cfg = resolve(parser.parse_args(argv))
        assert (cfg.first_process, cfg.total_procs, cfg.local_procs) == (index, 2, 1)
        assert cfg.master_addr == f"{job['metadata']['name']}-0.{job['spec']['template']['spec']['subdomain']}"
        assert not cfg.dynamic_cluster and cfg.master_port == container["ports"][0]["containerPort"]
