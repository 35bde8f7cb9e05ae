"""Cluster administration: AdminClient (mqadmin's requests as typed
coroutines), its results, and the `pyrmq admin` commands (pyrmq.admin.cli)."""

from pyrmq.admin.client import AdminClient

__all__ = ["AdminClient"]
