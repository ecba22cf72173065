"""A failed object-store request is one line without any URL's query: a GCS resumable upload's session id
(``upload_id``) and an Azure SAS token (``sig=``) are credentials (spark_kafka_backup.storage.gcs, .azure)."""

from __future__ import annotations

import pytest
from google.api_core import exceptions

from spark_kafka_backup.storage import azure
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


class AzureError(Exception):
    """As azure-core's HttpResponseError carries them: a status, the service's error code, a multi-line text."""

    def __init__(self, text: str, status_code: int, error_code: str) -> None:
        super().__init__(text)
        self.status_code, self.error_code = status_code, error_code


def test_an_azure_failure_is_its_status_code_and_first_line_without_the_sas_token() -> None:
    location = ObjectPath("az", "backups", "prod/orders/segment_0_records")
    error = AzureError(
        "Server failed to authenticate the request. https://acct.blob.core.windows.net/backups/prod?sv=2024-08-04"
        "&st=2024-05-01T09:06:44Z&se=2024-05-02T09:06:44Z&sig=SECRET-SIGNATURE%3D\nRequestId:5671364a\n"
        "Time:2026-12-04T19:14:07Z\nErrorCode:AuthorizationFailure",
        403,
        "AuthorizationFailure",
    )
    message = str(azure._fail(location, "read", error))
    assert message == (
        f"{location}: cannot read (403 AuthorizationFailure Server failed to authenticate the request. "
        "https://acct.blob.core.windows.net/backups/prod?...)"
    )
    missing = AzureError("The specified container does not exist.\nRequestId:1", 404, "ContainerNotFound")
    assert str(azure._fail(location, "list", missing)) == f"{location}: container 'backups' does not exist"


def test_a_cause_whose_message_holds_a_query_is_not_chained() -> None:
    """``--debug`` and a failed task's traceback print the chained cause: not one with a credential in a URL."""
    from spark_kafka_backup.storage.base import safe_cause

    leaking = ConnectionError("Max retries exceeded with url: /c/k?sp=r&st=2024-05-01T09:06:44Z&sig=SECRET (x)")
    assert safe_cause(leaking) is None
    plain = ConnectionError("Connection refused")
    assert safe_cause(plain) is plain


def test_a_deadline_that_passed_says_what_the_last_attempt_met() -> None:
    from google.api_core.exceptions import RetryError

    refused = ConnectionError(
        "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: "
        "/storage/v1/b/bucket/o?maxResults=1 (Caused by NewConnectionError: Connection refused)"
    )
    deadline = RetryError("Timeout of 120.0s exceeded", refused)  # type: ignore[no-untyped-call]
    message = str(_fail(LOCATION, "reach the bucket", deadline))
    assert message.startswith(f"{LOCATION}: cannot reach the bucket (no answer within the retry deadline: "
                              "ConnectionError: HTTPConnectionPool(host='127.0.0.1', port=9)")  # fmt: skip
    assert "Connection refused" in message and "maxResults" not in message


def test_an_error_of_ours_stays_one_line_as_it_was() -> None:
    from spark_kafka_backup.errors import StorageError

    ours = StorageError("gs:// locations need Google Cloud credentials (Application Default Credentials: ...)")
    assert str(_fail(LOCATION, "reach the bucket", ours)) == str(ours)
    assert str(azure._fail(LOCATION, "list", ours)) == str(ours)
