"""Local-disk storage: plain files, published by write-fsync-rename."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from kbackup.errors import BackupNotFoundError
from kbackup.fsutil import TMP_SUFFIX, atomic_write, disk_error, fsync_dir
from kbackup.storage.base import FileHandle, Location, Storage


def _path(location: Location) -> Path:
    if not isinstance(location, Path):
        raise TypeError(f"not a local path: {location}")
    return location


class LocalStorage(Storage):
    def exists(self, location: Location) -> bool:
        return _path(location).exists()

    def size(self, location: Location) -> int | None:
        try:
            return os.stat(_path(location)).st_size
        except FileNotFoundError:
            return None

    def open_read(self, location: Location) -> FileHandle:
        path = _path(location)
        try:
            return FileHandle(open(path, "rb"))
        except FileNotFoundError:
            raise BackupNotFoundError(f"{path}: file does not exist") from None
        except IsADirectoryError:
            raise BackupNotFoundError(f"{path}: is a directory, expected a file") from None

    def write_whole(self, location: Location, data: bytes, *, sync: bool = True) -> None:
        path = _path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data, sync=sync)

    def create_exclusive(self, location: Location, data: bytes) -> bool:
        # A hard link fails if the name exists, and publishes a complete, synced file.
        path = _path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
        try:
            with open(tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(tmp, path)
                created = True
            except FileExistsError:
                created = False
            fsync_dir(path.parent)
        except OSError as exc:
            raise disk_error(exc, path, writing=len(data)) from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return created

    def upload(self, location: Location, source: Path) -> None:
        path = _path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
        shutil.copyfile(source, tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)

    def delete(self, location: Location) -> None:
        _path(location).unlink(missing_ok=True)

    def list_files(self, directory: Location) -> list[str] | None:
        try:
            return [entry.name for entry in os.scandir(_path(directory)) if entry.is_file()]
        except (FileNotFoundError, NotADirectoryError):
            return None

    def list_dirs(self, directory: Location) -> list[str] | None:
        try:
            return [entry.name for entry in os.scandir(_path(directory)) if entry.is_dir()]
        except (FileNotFoundError, NotADirectoryError):
            return None


LOCAL = LocalStorage()
