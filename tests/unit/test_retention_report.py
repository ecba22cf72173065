"""The lines prune, merge and erase print about what a versioned or locked bucket keeps (pure: no store)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from spark_kafka_backup.storage.object_path import ObjectPath
from spark_kafka_backup.storage.removals import Removals
from spark_kafka_backup.storage.retention import KeptVersion, describe, unseen_note

UNTIL = datetime(2027, 1, 2, 3, 4, 5, tzinfo=UTC)


def kept_of(*versions: KeptVersion) -> list[KeptVersion]:
    return removals_of(*versions).kept


def removals_of(*versions: KeptVersion) -> Removals:
    removals = Removals()
    removals._keep(list(versions))
    return removals


def test_nothing_kept_says_nothing() -> None:
    assert describe([]) == []


def test_versions_kept_by_versioning_alone_are_counted_and_never_freed() -> None:
    lines = describe(kept_of(KeptVersion("s3://b/p/a_records", "v1", 100), KeptVersion("s3://b/p/a_index", "v2", 20)))
    assert lines == [
        "the bucket keeps 2 versions of 2 deleted objects (120 bytes, not freed): the backup no longer reads them",
        "  2 versions kept by the bucket's versioning: a lifecycle rule that expires noncurrent versions deletes them",
    ]


def test_locked_versions_name_their_lock_and_the_last_date_in_utc() -> None:
    later = UNTIL.astimezone(timezone(timedelta(hours=2))) + timedelta(days=1)  # another zone: shown in UTC
    lines = describe(kept_of(
        KeptVersion("s3://b/p/x_records", "v1", 10, UNTIL, "COMPLIANCE"),
        KeptVersion("s3://b/p/y_records", "v2", 10, later, "GOVERNANCE"),
        KeptVersion("s3://b/p/z_records", "v3", 10, None, "legal hold"),
    ))  # fmt: skip
    assert lines[1] == (
        "  3 versions retained by a lock (COMPLIANCE, GOVERNANCE, legal hold): the store refuses to delete them "
        "before 2027-01-03T03:04:05Z; a legal hold keeps them until it is lifted"
    )
    assert lines[2:] == [
        "  retained: s3://b/p/x_records version v1 (COMPLIANCE until 2027-01-02T03:04:05Z)",
        "  retained: s3://b/p/y_records version v2 (GOVERNANCE until 2027-01-03T03:04:05Z)",
        "  retained: s3://b/p/z_records version v3 (legal hold)",
    ]


def test_a_version_seen_twice_counts_once_and_long_lists_are_cut() -> None:
    versions = [KeptVersion(f"s3://b/p/{n:02d}_records", "v", 1, UNTIL, "COMPLIANCE") for n in range(12)]
    removals = removals_of(*versions)
    removals._keep(versions[:3])  # a second purge finds the same ones
    lines = describe(removals.kept)
    assert lines[0].startswith("the bucket keeps 12 versions of 12 deleted objects (12 bytes, not freed)")
    assert sum(line.startswith("  retained: ") for line in lines) == 10
    assert lines[-1] == "  ... and 2 more retained versions"


def test_stores_whose_keeping_is_not_seen_say_so() -> None:
    assert unseen_note(ObjectPath("s3", "b", "p")) is None
    note = unseen_note(ObjectPath("gs", "b", "p"))
    assert note is not None and note.startswith("Google Cloud Storage keeps deleted objects for a while")
    assert unseen_note(ObjectPath("az", "c", "p")) is not None


def test_versions_that_could_not_be_listed_are_said_as_such() -> None:
    lines = describe([KeptVersion("s3://b/p/a_records", "", 0, unseen="AccessDenied: no s3:ListBucketVersions")])
    assert lines == [
        "the bucket keeps versions of 1 deleted object it would not list (AccessDenied: no s3:ListBucketVersions): "
        "the backup no longer reads them; a lifecycle rule that expires noncurrent versions deletes them"
    ]


def test_a_version_deleted_by_a_later_purge_is_no_longer_kept() -> None:
    from spark_kafka_backup.storage.retention import Purge

    unseen = KeptVersion("s3://b/p/b_records", "", 0, unseen="AccessDenied")
    removals = removals_of(KeptVersion("s3://b/p/a_records", "v1", 10), unseen)
    done = Purge(deleted=[("s3://b/p/a_records", "v1"), ("s3://b/p/b_records", "v7")])
    removals._forget(done)
    assert removals.kept == []


def test_the_erase_says_when_to_try_again_for_dates_and_legal_holds() -> None:
    from spark_kafka_backup.storage.retention import release_text

    dated = KeptVersion("s3://b/p/x_records", "v1", 1, UNTIL, "COMPLIANCE")
    held = KeptVersion("s3://b/p/y_records", "v2", 1, None, "legal hold")
    assert release_text([dated]) == "after 2027-01-02T03:04:05Z"
    assert release_text([held]) == "once the legal hold is lifted"
    assert release_text([dated, held]) == "after 2027-01-02T03:04:05Z and once the legal hold is lifted"
