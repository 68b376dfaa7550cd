"""A kubeconfig file for a test's API server: ``write_kubeconfig(path, server_url, ...)``.

The one place the suite writes kubeconfigs: for a :class:`testrigs.kube_fake.FakeKubeServer`
(``FakeKubeServer.write_kubeconfig`` calls this), a loopback port that never answers, or a closed
port. Needs ``yaml`` (PyYAML, which the ``kubernetes`` client of the test extra brings).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

NAME = "kube-fake"  # of the kubeconfig's one cluster, user and context


def write_kubeconfig(
    path: str | Path, server_url: str, *, namespace: str | None = "default", token: str | None = None
) -> Path:
    """Write to ``path`` a kubeconfig whose current context points at ``server_url`` (plain HTTP,
    no TLS) and return the path.

    ``namespace`` is the context's namespace (``None``: the context names none); ``token`` a bearer
    token the client sends (``None``: no credentials at all, as the fake server needs none).
    """
    context: dict[str, str] = {"cluster": NAME, "user": NAME}
    if namespace is not None:
        context["namespace"] = namespace
    user: dict[str, str] = {} if token is None else {"token": token}
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": NAME, "cluster": {"server": server_url}}],
        "users": [{"name": NAME, "user": user}],
        "contexts": [{"name": NAME, "context": context}],
        "current-context": NAME,
        "preferences": {},
    }
    target = Path(path)
    target.write_text(yaml.safe_dump(config, sort_keys=False))
    return target
