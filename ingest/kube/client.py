"""A Kubernetes API client from a kubeconfig, in-cluster config as the fallback (ingest and binder)."""

from __future__ import annotations

from typing import Any

__all__ = ["add_kubeconfig_argument", "api_client"]


def api_client(kubeconfig: str | None) -> Any:
    """An ``ApiClient`` for *kubeconfig*, else ``$KUBECONFIG`` / ``~/.kube/config``, else the pod's
    service account (in-cluster). The kubernetes config loaders raise several unrelated error types."""
    from kubernetes import config as kube_config

    config: Any = kube_config  # untyped package
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        return config.new_client_from_config()
    except config.ConfigException:
        from kubernetes import client

        config.load_incluster_config()
        return client.ApiClient()


def add_kubeconfig_argument(p: Any) -> None:
    """The ``--kubeconfig`` option :func:`api_client` reads (``p`` is an ``argparse.ArgumentParser``)."""
    p.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config, else the in-cluster service account)",
    )
