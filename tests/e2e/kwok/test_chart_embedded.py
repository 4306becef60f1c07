"""The Helm chart in embedded-log mode (``log.mode=embedded``), installed with ``helm install`` on the KWOK
cluster's real kube-apiserver, schedules a GPU pod end to end.

Nothing runs the chart's own pod here (no image, no storage provisioner: its claim stays Pending), so the
test runs what that pod would run: each container of the *installed* Deployment (``helm get manifest``)
becomes a local process with the container's exact command and arguments, translated only where a pod
and a local process differ:

* a path under a volume mount becomes the same path under a local directory standing for that volume
  (the claim for ``--log``, the ConfigMap the chart created for ``--fairshare-config``);
* ``--metrics-host`` / ``--metrics-port`` get 127.0.0.1 and a free port (the containers share one pod's
  network; the processes share this machine's);
* a container that mounts the API token (``kube-api-access``) gets a kubeconfig holding a token the API
  server issued for the pod's ServiceAccount, so it works with exactly the RBAC the chart grants; the
  others get no credentials at all.

Then a GPU pod with ``schedulerName: hourglass`` in a queue the chart created must run on a KWOK node,
where the scheduler's Bind decision put it, with the binder's ``Scheduled`` Event, and fairshare must have
published usage on the same log.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from tests.support.helm_chart import CHART, by_kind, helm_run, require_helm
from tests.support.kube_pipeline import decision_records
from tests.support.kwok import KwokCluster, pod_events, pods, running, wait_until
from tests.support.paths import REPO_ROOT

SCHEDULER_NAME = "hourglass"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _token_kubeconfig(cluster: KwokCluster, api: Any, ns: str, account: str, path: Path) -> Path:
    """A kubeconfig for ``cluster`` holding a token the API server issues for ServiceAccount ns/account."""
    from kubernetes import client

    # Empty audiences: the API server's own, as for the token the kubelet mounts.
    req = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3600},
    }
    core: Any = client.CoreV1Api(api)  # typed stubs want model objects; the API takes the dict as well
    token = core.create_namespaced_service_account_token(account, ns, req).status.token
    cfg = yaml.safe_load(cluster.kubeconfig.read_text())
    for user in cfg["users"]:
        user["user"] = {"token": token}
    path.write_text(yaml.safe_dump(cfg))
    return path


def _local_argv(container: dict[str, Any], mounts: dict[str, Path]) -> list[str]:
    """The container's command line as a local process: volume paths mapped, metrics on a free port."""
    assert container["command"] == ["hourglass"], container["command"]
    args = [str(a) for a in container["args"]]
    out: list[str] = []
    for i, a in enumerate(args):
        prev = args[i - 1] if i else ""
        if prev == "--metrics-host":
            a = "127.0.0.1"
        elif prev == "--metrics-port":
            a = str(_free_port())
        else:
            for mount, local in mounts.items():
                if a == mount or a.startswith(mount + "/"):
                    a = str(local) + a[len(mount) :]
        out.append(a)
    return [sys.executable, "-m", "analytics.cli", *out]


@pytest.fixture
def installed(kwok_cluster: KwokCluster, kwok_namespace: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``helm install`` of the chart with log.mode=embedded in the test's namespace: (release, queue)."""
    helm = require_helm()
    release = f"hg{uuid.uuid4().hex[:6]}"
    res = {r: {"quota": 0, "limit": -1, "overQuotaWeight": 1} for r in ("gpu", "cpu", "memory")}
    values = {
        "log": {"mode": "embedded"},
        # No Prometheus in this cluster: fairshare computes usage from the log itself.
        "prometheus": {"url": ""},
        # The session's cluster has KAI's PriorityClasses already (Helm would refuse to adopt them).
        "priorityClasses": {"create": False},
        "queues": [
            {"name": f"{release}-root", "resources": res},
            {"name": f"{release}-team", "parentQueue": f"{release}-root", "resources": res},
        ],
    }
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
    kc = str(kwok_cluster.kubeconfig)
    out = helm_run(
        helm, "install", release, str(CHART), "-n", kwok_namespace, "--kubeconfig", kc,
        "-f", str(tmp_path / "values.yaml"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    try:
        yield release, f"{release}-team"
    finally:
        helm_run(helm, "uninstall", release, "-n", kwok_namespace, "--kubeconfig", kc)


def test_embedded_chart_installs_and_its_containers_schedule_a_gpu_pod(
    kwok_cluster: KwokCluster, kwok_namespace: str, installed: tuple[str, str], tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kwok_namespace
    release, queue = installed
    helm = require_helm()
    manifest = helm_run(
        helm, "get", "manifest", release, "-n", ns, "--kubeconfig", str(kwok_cluster.kubeconfig)
    )
    assert manifest.returncode == 0, manifest.stderr
    objs = [d for d in yaml.safe_load_all(manifest.stdout) if d]
    deployments = by_kind(objs, "Deployment")
    assert list(deployments) == [f"{release}-hourglass"], list(deployments)
    deployment = deployments[f"{release}-hourglass"]
    pod_spec = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod_spec["volumes"]}

    with kwok_cluster.api_client() as api:
        # Typed stubs mark every field optional; the API server filled them.
        core: Any = client.CoreV1Api(api)
        apps: Any = client.AppsV1Api(api)
        # What the API server stored: one single-replica Deployment, the claim its log lives on, one
        # ServiceAccount bound to the ingest and binder roles, the chart's queues.
        stored = apps.read_namespaced_deployment(f"{release}-hourglass", ns)
        assert stored.spec.replicas == 1 and stored.spec.strategy.type == "Recreate"
        assert [c.name for c in stored.spec.template.spec.containers] == [
            "ingest", "scheduler", "binder", "fairshare",
        ]  # fmt: skip
        claim = volumes["log"]["persistentVolumeClaim"]["claimName"]
        assert core.read_namespaced_persistent_volume_claim(claim, ns).spec.resources.requests
        account = pod_spec["serviceAccountName"]
        core.read_namespaced_service_account(account, ns)
        bound = {
            b.role_ref.name
            for b in client.RbacAuthorizationV1Api(api).list_cluster_role_binding().items
            if any(s.name == account and s.namespace == ns for s in b.subjects or [])
        }
        assert bound == {f"{release}-hourglass-ingest", f"{release}-hourglass-binder"}
        custom: Any = client.CustomObjectsApi(api)
        assert custom.get_cluster_custom_object("scheduling.run.ai", "v2", "queues", queue)

        # Each container as a process: the log claim and the fair-share ConfigMap become local directories.
        log_dir = tmp_path / "log-volume"
        log_dir.mkdir()
        config_dir = tmp_path / "config-volume"
        config_dir.mkdir()
        cm_name = volumes["config"]["configMap"]["name"]
        for key, text in core.read_namespaced_config_map(cm_name, ns).data.items():
            (config_dir / key).write_text(text)
        token_config = _token_kubeconfig(kwok_cluster, api, ns, account, tmp_path / "token.kubeconfig")
        local = {"log": log_dir, "config": config_dir}
        procs: dict[str, subprocess.Popen[bytes]] = {}

        def logs() -> str:
            return "\n".join(
                f"--- {n} (exit {p.poll()}):\n"
                + "\n".join((tmp_path / f"{n}.err").read_text(errors="replace").splitlines()[-15:])
                for n, p in procs.items()
            )

        def alive() -> bool:
            return all(p.poll() is None for p in procs.values())

        try:
            for c in pod_spec["containers"]:
                mounts = {m["mountPath"]: local[m["name"]] for m in c["volumeMounts"] if m["name"] in local}
                assert any(m["name"] == "log" for m in c["volumeMounts"]), (
                    f"{c['name']} does not mount the log"
                )
                env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
                env |= {"PYTHONPATH": str(REPO_ROOT), "HOME": str(tmp_path / f"home-{c['name']}")}
                if any(m["name"] == "kube-api-access" for m in c["volumeMounts"]):
                    env["KUBECONFIG"] = str(token_config)
                err = open(tmp_path / f"{c['name']}.err", "wb")  # noqa: SIM115 - owned by the process
                procs[c["name"]] = subprocess.Popen(
                    _local_argv(c, mounts), stdout=err, stderr=err, env=env, cwd=tmp_path
                )
                err.close()

            gpu_pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "gpu-pod", "labels": {"kai.scheduler/queue": queue}},
                "spec": {
                    "schedulerName": SCHEDULER_NAME,
                    "containers": [
                        {
                            "name": "main",
                            "image": "ubuntu",
                            "args": ["sleep", "infinity"],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            }
            core.create_namespaced_pod(ns, gpu_pod)
            wait_until(lambda: running(api, ns, ["gpu-pod"]) or not alive(), 120, "the GPU pod Running")
            assert alive(), logs()
            node = pods(api, ns)["gpu-pod"].spec.node_name
            assert node.startswith("kwok-node-"), node
            with FileLog(log_dir, readonly=True) as log:
                recs = decision_records(log)
                binds = {d["pod"]: d["node"] for r in recs for d in r["decisions"] if d["kind"] == "Bind"}
                assert binds == {f"{ns}/gpu-pod": node}
                wait_until(
                    lambda: log.end_offset(DEFAULT_TOPICS.usage) > 0, 60, "a usage snapshot from fairshare"
                )
                assert log.read(DEFAULT_TOPICS.deadletter, 0, 100) == []
            assert ("Scheduled", f"Successfully assigned {ns}/gpu-pod to {node}") in pod_events(
                api, ns, "gpu-pod"
            )
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            codes = {}
            for name, p in procs.items():
                try:
                    codes[name] = p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    codes[name] = p.wait()
        assert codes == dict.fromkeys(procs, 0), logs()
