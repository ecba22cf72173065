"""Deleting a backup's files while keeping count of what a versioned or locked bucket keeps of them (prune, merge,
erase; the reporting is :mod:`spark_kafka_backup.storage.retention`)."""

from __future__ import annotations

from spark_kafka_backup.storage import Location, storage_for
from spark_kafka_backup.storage.retention import KeptVersion, Purge


class Removals:
    """The versions the store kept of what prune, merge or erase deleted, gathered as they delete (a version seen
    twice, by a purge run again, counts once)."""

    def __init__(self, *, bypass_governance: bool = False) -> None:
        #: Erase: delete a governance-mode lock's versions too (``--bypass-governance-retention``, which needs the
        #: bucket's ``s3:BypassGovernanceRetention`` permission).
        self.bypass_governance = bypass_governance
        self._kept: dict[tuple[str, str], KeptVersion] = {}

    def remove(self, location: Location) -> None:
        """Delete a file of the backup (see :meth:`~spark_kafka_backup.storage.base.Storage.remove`)."""
        self._keep(storage_for(location).remove(location))

    def purge(self, directory: Location, prefix: str) -> None:
        """Delete every version the store keeps of deleted objects under ``directory`` named ``prefix...``."""
        done = storage_for(directory).purge_deleted(directory, prefix, bypass_governance=self.bypass_governance)
        self._forget(done)
        self._keep(done.kept)

    def _forget(self, done: Purge) -> None:
        """The versions a purge deleted are no longer kept (a prune or merge before it may have counted them)."""
        for gone in done.deleted:
            self._kept.pop(gone, None)
        for location in {location for location, _ in done.deleted}:
            self._kept.pop((location, ""), None)  # one whose versions could not be listed then

    def _keep(self, versions: list[KeptVersion]) -> None:
        for version in versions:
            self._kept[(version.location, version.version)] = version

    @property
    def kept(self) -> list[KeptVersion]:
        return list(self._kept.values())

    @property
    def locked(self) -> list[KeptVersion]:
        return [version for version in self.kept if version.lock is not None]
