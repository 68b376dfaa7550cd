"""The Kubernetes client's threads (one watch per resource, the daemon) never let an exception
reach ``threading.excepthook``: it is logged with the thread's name and fails the client's
watches and status (faults injected into our own code)."""

from __future__ import annotations

from typing import Any

import pytest
from discovery_sync.backends.kube.view import KubeDaemon, State
from discovery_sync.backends.kube.wire import KubeApi

import discovery_sync as ds
from testrigs.helpers import LogCatcher, initial_state

WAIT = 10.0


def test_a_crashed_watch_thread_fails_the_client_with_its_cause(
    pod_client, monkeypatch, escaped, thread_log: LogCatcher
):
    def broken_watch(self: KubeApi, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected watch fault")

    monkeypatch.setattr(KubeApi, "watch", broken_watch)  # streams start after the first list
    client = pod_client("worker-0")
    assert thread_log.wait_for("thread discovery-sync-kube-watch-")
    # the daemon may turn ready (both lists done) before it handles the crash: wait for the failure
    daemon = client.daemon
    with daemon._changed:
        assert daemon._changed.wait_for(lambda: daemon.state is State.FAILED, WAIT)
    with pytest.raises(ds.BackendUnavailable, match="injected watch fault"):
        client.list_and_watch(ds.Query.endpoints())
    assert client.status()["state"] == "Failed"
    assert escaped == []


def test_a_crashed_daemon_fails_every_watch_and_the_status(
    server, pod_client, monkeypatch, escaped, thread_log: LogCatcher
):
    client = pod_client("worker-0")
    watch = client.list_and_watch(ds.Query.endpoints())
    initial_state(watch)
    real_handle = KubeDaemon._handle

    def broken_handle(self: KubeDaemon, message: Any) -> None:
        real_handle(self, message)
        raise RuntimeError("injected daemon fault")

    monkeypatch.setattr(KubeDaemon, "_handle", broken_handle)
    server.create_pod("bystander")  # the next change (a real server sends no bookmark while nothing changes)
    with pytest.raises(ds.WatchFailed):
        while True:
            watch.get(timeout=WAIT)
    status = client.status()
    assert status["state"] == "Failed" and "injected daemon fault" in status["reason"]
    assert thread_log.wait_for("injected daemon fault")
    assert escaped == []
