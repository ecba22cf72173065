"""Local-disk storage: plain files, published by write-fsync-rename.

A backup root's files stay inside it: once a root is :func:`confine`-d (every command does that through
:func:`spark_kafka_backup.partition.layout.state_dir` or :func:`~spark_kafka_backup.partition.layout.list_topics`, every
partition reader and writer for its topic directory's parent), a path under it whose directory resolves outside the
root, or that is itself a symbolic link, is refused (a :class:`~spark_kafka_backup.errors.FormatError` naming it) before
anything is read, written or deleted. Listings never follow symbolic links: a linked file or directory is not part of
the backup. Symbolic links above the root (``/data -> /mnt/data``) are the operator's and are followed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from spark_kafka_backup.errors import BackupNotFoundError, FormatError
from spark_kafka_backup.fsutil import TMP_SUFFIX, atomic_write, disk_error, fsync_dir, open_new_file
from spark_kafka_backup.storage.base import FileHandle, Location, Storage

#: Confined roots: the root as given (absolute, not resolved) -> its resolved form.
_roots: dict[str, str] = {}


def confine(root: Path) -> None:
    """Keep every file operation under ``root`` inside it (see the module docstring); idempotent."""
    given = os.path.abspath(root)
    if given not in _roots:
        _roots[given] = os.path.realpath(given)


def _root_of(path: Path) -> tuple[str, str] | None:
    """The deepest confined root ``path`` is under (a backup may lie inside a directory confined for another)."""
    text = os.path.abspath(path)
    found = [(given, resolved) for given, resolved in _roots.items() if text.startswith(given + os.sep)]
    return max(found, key=lambda item: len(item[0])) if found else None


def _path(location: Location) -> Path:
    if not isinstance(location, Path):
        raise TypeError(f"not a local path: {location}")
    if _roots:
        check_inside(location)
    return location


#: ``O_PATH`` where the system has it (Linux): a directory opened only to be named.
_O_PATH = getattr(os, "O_PATH", None)


def resolved_directory(directory: str) -> str:
    """``os.path.realpath(directory)``: as the kernel resolved it when opened (its name in ``/proc/self/fd``: three
    system calls, where Python's realpath asks about every component of the path, 6 times the time for a partition's
    directory), or Python's answer where that cannot be had (no ``/proc`` or ``O_PATH``, a directory that does not
    exist or is not one, one deleted meanwhile)."""
    if _O_PATH is not None:
        try:
            handle = os.open(directory, _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return os.path.realpath(directory)
        try:
            named = os.readlink(f"/proc/self/fd/{handle}")
        except OSError:
            named = ""
        finally:
            os.close(handle)
        if named.startswith("/") and not named.endswith(" (deleted)"):
            return named
    return os.path.realpath(directory)


def check_inside(path: Path) -> None:
    """Refuse ``path`` when it is under a confined root but leaves it: its directory resolves elsewhere (a linked
    directory on the way) or it is a symbolic link itself."""
    found = _root_of(path)
    if found is None:
        return
    given, resolved = found
    parent = resolved_directory(os.path.dirname(os.path.abspath(path)))
    if parent != resolved and not parent.startswith(resolved + os.sep):
        raise FormatError(
            "a directory on the way is a symbolic link out of the backup", file=str(path),
            expected=f"a path inside {given}", found=f"a path in {parent}",
        )  # fmt: skip
    if os.path.islink(path):
        raise FormatError("is a symbolic link; a backup's files are never followed out of it", file=str(path),
                          expected="a regular file", found=f"a link to {os.readlink(path)!r}")  # fmt: skip


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
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise BackupNotFoundError(f"{path}: file does not exist") from exc
        except IsADirectoryError as exc:
            raise BackupNotFoundError(f"{path}: is a directory, expected a file") from exc

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
            with open_new_file(tmp) as handle:
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
            raise disk_error(exc, path, writing=len(data)) from exc
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return created

    def upload(self, location: Location, source: Path) -> None:
        path = _path(location)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}{TMP_SUFFIX}")
        with open(source, "rb") as plain, open_new_file(tmp) as handle:
            shutil.copyfileobj(plain, handle, 1 << 20)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)

    def delete(self, location: Location) -> None:
        _path(location).unlink(missing_ok=True)

    def list_files(self, directory: Location, *, starting_with: str = "") -> list[str] | None:
        try:
            return [entry.name for entry in os.scandir(_path(directory))
                    if entry.name.startswith(starting_with) and entry.is_file(follow_symlinks=False)]  # fmt: skip
        except (FileNotFoundError, NotADirectoryError):
            return None

    def list_dirs(self, directory: Location) -> list[str] | None:
        try:
            return [entry.name for entry in os.scandir(_path(directory)) if entry.is_dir(follow_symlinks=False)]
        except (FileNotFoundError, NotADirectoryError):
            return None


LOCAL = LocalStorage()
