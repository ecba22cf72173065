"""``s3://bucket/key``, ``gs://bucket/key`` and ``az://container/key`` locations with the small part of the
``pathlib`` surface spark-kafka-backup uses."""

from __future__ import annotations

from dataclasses import dataclass

from spark_kafka_backup.errors import UsageError

#: The object stores, by URI scheme: Amazon S3 and S3-compatible stores, Google Cloud Storage, Azure Blob Storage
#: (a container of the account the environment names).
SCHEMES = ("s3", "gs", "az")
_EXPECTED = "a local path, s3://bucket/prefix, gs://bucket/prefix or az://container/prefix"


@dataclass(frozen=True)
class ObjectPath:
    """An object key, or a key prefix used as a directory, in a bucket.

    ``key`` has no leading or trailing ``/``; the empty key is the bucket's
    root. Like a path, ``location / "name"`` goes one level down and
    ``.name`` / ``.parent`` go by ``/``-separated components. Picklable, so
    it travels to Spark executors.
    """

    scheme: str
    bucket: str
    key: str = ""

    @classmethod
    def parse(cls, uri: str) -> ObjectPath:
        scheme, _, rest = uri.partition("://")
        if scheme.lower() not in SCHEMES:
            raise UsageError(f"{uri}: unsupported storage scheme {scheme!r} (expected {_EXPECTED})")
        bucket, _, key = rest.partition("/")
        if not bucket:
            what = "container" if scheme.lower() == "az" else "bucket"
            raise UsageError(f"{uri}: no {what} name (expected {scheme.lower()}://{what}/prefix)")
        return cls(scheme.lower(), bucket, key.strip("/"))

    def __truediv__(self, name: str | object) -> ObjectPath:
        part = str(name).strip("/")
        return ObjectPath(self.scheme, self.bucket, f"{self.key}/{part}" if self.key else part)

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def parent(self) -> ObjectPath:
        return ObjectPath(self.scheme, self.bucket, self.key.rsplit("/", 1)[0] if "/" in self.key else "")

    def with_name(self, name: str) -> ObjectPath:
        return self.parent / name

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}"
