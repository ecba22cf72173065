"""A failed Google Cloud Storage request is one line without the URL's query: a resumable upload's session id
(``upload_id``) is a credential for that object (spark_kafka_backup.storage.gcs)."""

from __future__ import annotations

import pytest
from google.api_core import exceptions

from spark_kafka_backup.storage.gcs import _fail
from spark_kafka_backup.storage.object_path import ObjectPath

LOCATION = ObjectPath("gs", "backups", "prod/orders/segment_0_records")


@pytest.mark.parametrize(
    "error",
    [
        exceptions.ServiceUnavailable(  # type: ignore[no-untyped-call]
            "PUT https://storage.googleapis.com/upload/storage/v1/b/backups/o?uploadType=resumable&upload_id=ADPycd"
            "s-SECRET-SESSION: We encountered an internal error."
        ),
        ConnectionError(
            "HTTPSConnectionPool(host='storage.googleapis.com', port=443): Max retries exceeded with url: "
            "/upload/storage/v1/b/backups/o?uploadType=resumable&upload_id=ADPycds-SECRET-SESSION (Caused by x)"
        ),
    ],
)
def test_a_failed_request_names_the_object_and_the_reason_without_the_session(error: Exception) -> None:
    message = str(_fail(LOCATION, "upload", error))
    assert message.startswith("gs://backups/prod/orders/segment_0_records: cannot upload (")
    assert "SECRET-SESSION" not in message and "upload_id" not in message
    assert "/upload/storage/v1/b/backups/o?..." in message
    assert "\n" not in message


def test_the_status_leads_the_reason() -> None:
    forbidden = exceptions.Forbidden("caller lacks storage.objects.get")  # type: ignore[no-untyped-call]
    message = str(_fail(LOCATION, "read", forbidden))
    assert message == f"{LOCATION}: cannot read (403 caller lacks storage.objects.get)"
