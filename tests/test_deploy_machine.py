"""deploy/systemd/ and deploy/cron/: one machine's continuous backup and nightly snapshot.

The unit goes through ``systemd-analyze verify`` (systemd's own check of keys, values and the command it would run,
with the command's path pointed at this installation's ``spark-kafka-backup``); every ``spark-kafka-backup`` command
of the unit and the crontab goes through the real parsers, and each crontab line's schedule is checked field by
field.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from spark_kafka_backup.cli import build_parser
from spark_kafka_backup.launcher import split_arguments
from tests.deploy_arguments import parse_job

REPO = Path(__file__).resolve().parent.parent
UNIT = REPO / "deploy" / "systemd" / "spark-kafka-backup.service"
CRONTAB = REPO / "deploy" / "cron" / "spark-kafka-backup"
INSTALLED = "/opt/spark-kafka-backup/bin/spark-kafka-backup"
#: A crontab schedule's fields: (name, lowest, highest).
CRON_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 7))


def parses(arguments: list[str], directory: Path) -> None:
    """A ``spark-kafka-backup`` command line (after the program) through the parser that would take it."""
    if arguments[0] in ("backup", "restore"):
        parse_job(arguments[0], split_arguments(arguments[1:]).job_args, directory)
    else:
        build_parser().parse_args(arguments)


def exec_start(unit: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", unit)
    (line,) = [line for line in joined.splitlines() if line.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


def verify(unit_text: str, directory: Path) -> subprocess.CompletedProcess[str]:
    here = str(Path(sys.executable).parent / "spark-kafka-backup")
    path = directory / "spark-kafka-backup.service"
    path.write_text(unit_text.replace(INSTALLED, here))
    analyze = shutil.which("systemd-analyze")
    assert analyze, "systemd-analyze is missing (./dev setup installs Debian's systemd)"
    return subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True, timeout=60)


def test_the_unit_is_what_systemd_accepts(tmp_path: Path) -> None:
    unit = UNIT.read_text()
    checked = verify(unit, tmp_path)
    assert checked.returncode == 0 and checked.stdout + checked.stderr == "", checked.stderr
    # A key systemd does not know is said (and would be ignored at run time): this check can fail.
    misspelled = verify(unit.replace("KillMode=", "KilMode="), tmp_path)
    assert "Unknown key 'KilMode'" in misspelled.stderr


def test_the_units_command_parses(tmp_path: Path) -> None:
    command = exec_start(UNIT.read_text())
    assert command[0] == INSTALLED
    parses(command[1:], tmp_path)
    assert "SuccessExitStatus=143" in UNIT.read_text()  # a stop (SIGTERM, exit 143) is not a failure of the unit


def crontab_entries() -> list[tuple[list[str], str, list[str]]]:
    """(schedule fields, user, command words without the redirections) of each entry."""
    entries = []
    for line in CRONTAB.read_text().splitlines():
        if not line.strip() or line.startswith("#") or re.match(r"^[A-Z_]+=", line):
            continue
        fields = line.split(None, 6)
        command = shlex.split(fields[6])
        while command and (command[-1] == "2>&1" or command[-2:-1] == [">>"]):
            command = command[:-1] if command[-1] == "2>&1" else command[:-2]
        entries.append((fields[:5], fields[5], command))
    return entries


def in_range(field: str, lowest: int, highest: int) -> bool:
    for part in field.split(","):
        base, _, step = part.partition("/")
        if step and not step.isdigit():
            return False
        if base == "*":
            continue
        bounds = base.split("-")
        if len(bounds) > 2 or not all(bound.isdigit() and lowest <= int(bound) <= highest for bound in bounds):
            return False
    return True


@pytest.mark.parametrize("index", range(3))
def test_each_crontab_entry_has_a_schedule_a_user_and_a_command_that_parses(index: int, tmp_path: Path) -> None:
    entries = crontab_entries()
    assert len(entries) == 3
    schedule, user, command = entries[index]
    for value, (name, lowest, highest) in zip(schedule, CRON_FIELDS, strict=True):
        assert in_range(value, lowest, highest), f"{name} {value!r}"
    assert user == "kbackup"
    assert command[:3] == ["flock", "-n", "/var/lib/spark-kafka-backup/nightly.lock"]
    assert command[3] == INSTALLED
    parses(command[4:], tmp_path)


def test_a_wrong_schedule_field_is_caught() -> None:
    assert in_range("0", 0, 59) and in_range("*/15", 0, 59) and in_range("1-5", 0, 7)
    assert not in_range("60", 0, 59) and not in_range("*/x", 0, 59) and not in_range("mon", 0, 7)
