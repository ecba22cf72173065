"""The confinement of a local backup root (spark_kafka_backup/storage/local.py): directories resolved by the kernel
answer as ``os.path.realpath`` does, and a directory linked out of the root is refused either way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.storage import local
from spark_kafka_backup.storage.local import check_inside, confine, resolved_directory


def test_a_directory_resolves_as_realpath_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "file").write_bytes(b"x")
    (tmp_path / "to-a").symlink_to(tmp_path / "a")
    (tmp_path / "to-to-a").symlink_to("to-a")  # relative, and a link to a link
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    cases = [
        tmp_path / "a" / "b",
        tmp_path / "to-a" / "b",
        tmp_path / "to-to-a" / "b" / ".." / "b",
        tmp_path / "a" / "missing" / "deeper",  # realpath answers lexically for what does not exist
        tmp_path / "a" / "file",  # not a directory
        tmp_path / "dangling",
    ]
    for case in cases:
        assert resolved_directory(str(case)) == os.path.realpath(case), case
    monkeypatch.chdir(tmp_path / "a")
    assert resolved_directory("b") == os.path.realpath("b") == str((tmp_path / "a" / "b").resolve())
    if local._O_PATH is not None and os.path.isdir("/proc/self/fd"):  # Linux: the kernel's answer, not Python's
        expected = os.path.realpath(tmp_path / "to-a" / "b")

        def not_asked(path: object) -> str:
            raise AssertionError("os.path.realpath asked for an existing directory")

        monkeypatch.setattr(os.path, "realpath", not_asked)
        assert resolved_directory(str(tmp_path / "to-a" / "b")) == expected


def test_a_directory_linked_out_of_a_confined_root_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "_roots", {})
    root, outside = tmp_path / "backup", tmp_path / "elsewhere"
    (root / "orders" / "0").mkdir(parents=True)
    (outside / "0").mkdir(parents=True)
    (root / "payments").symlink_to(outside)
    confine(root)
    check_inside(root / "orders" / "0" / "segment_records")  # inside: nothing said
    with pytest.raises(FormatError, match="a directory on the way is a symbolic link out of the backup"):
        check_inside(root / "payments" / "0" / "segment_records")
