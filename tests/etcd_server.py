"""The test session's etcd: see :mod:`discovery_sync.tools.etcd_server`."""

from discovery_sync.tools.etcd_server import EtcdServer

__all__ = ["EtcdServer"]
