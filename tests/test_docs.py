"""The docs check: the documentation's commands cannot drift from the CLI.

Every shell block in README.md, docs/, docker/ and jobs/ is read:

* a block after ``<!-- docs: run -->`` is **run**, in document order, with
  bash against a local Apache Kafka: ``$KAFKA`` is the suite's cluster (with a
  topic ``orders`` and a consumer group ``billing`` made for it), ``$NEW_KAFKA``
  an empty second cluster, ``$BACKUPS`` and ``$STATE`` empty directories; the
  working directory is the repository root. Each block must exit 0.
* every other command is **parsed**: ``spark-kafka-backup ...``, ``spark-submit ...
  jobs/backup.py|restore.py ...`` and ``./dev ...`` go through the real
  argument parsers, so a renamed or removed flag fails here;
  ``docker compose`` lines must name the compose file and its services.
* a block after ``<!-- docs: synopsis -->`` shows syntax (``[--flag]``), not a
  command: its lines must still start with a known command.

The troubleshooting page quotes error messages; each quoted message must
still be printed by some code (its fixed words appear in the sources).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from devkit import error_index
from tests.broker import BrokerUnderTest
from tests.conftest import REPO
from tests.kafka_helpers import create_topics, job_env
from tests.restore_helpers import Target

DOCUMENTS = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "docker" / "README.md",
    REPO / "jobs" / "README.md",
]
SHELLS = {"sh", "bash", "shell", "console"}
PLACEHOLDERS = {"KAFKA": "kafka:9092", "NEW_KAFKA": "new-kafka:9092", "BACKUPS": "/backups", "STATE": "/state"}
#: Commands the docs may show that spark-kafka-backup does not own (not parsed).
FOREIGN = {
    "export", "cd", "mkdir", "cat", "ls", "echo", "pip", "apt-get", "sudo", "aws", "crontab", "kill", "grep", "tee",
    "curl", "kubectl", "systemctl",
}  # fmt: skip


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    marker: str | None
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def shell_blocks(path: Path) -> list[Block]:
    """The shell blocks of a markdown file, each with the marker comment on the line before it (if any)."""
    lines = path.read_text().splitlines()
    found = []
    i = 0
    while i < len(lines):
        fence = re.fullmatch(r"\s*```(\w*).*", lines[i])
        if not fence:
            i += 1
            continue
        before = i - 1
        while before >= 0 and not lines[before].strip():
            before -= 1
        marker = re.fullmatch(r"\s*<!-- docs: (run|synopsis) -->\s*", lines[before]) if before >= 0 else None
        start, body = i, []
        i += 1
        while i < len(lines) and not re.fullmatch(r"\s*```\s*", lines[i]):
            body.append(lines[i])
            i += 1
        i += 1
        if fence[1] in SHELLS:
            found.append(Block(path, start + 1, marker[1] if marker else None, "\n".join(body)))
    return found


SEPARATORS = {"|", "||", "&&", ";"}
REDIRECTS = {">", ">>", "<", "2>", "2>&1", "&>"}


def commands(block: Block) -> list[list[str]]:
    """The block's commands as word lists: continuations joined, comments, prompts and redirections dropped,
    pipelines and ``&&`` lists split into their commands."""
    text = re.sub(r"\\\n", " ", block.text)
    result = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        for name, value in PLACEHOLDERS.items():
            line = line.replace(f"${{{name}}}", value).replace(f"${name}", value)
        current: list[str] = []
        target_next = False  # the word after a redirection is its file
        for word in [*shlex.split(line, comments=True), ";"]:
            if word in SEPARATORS:
                if current:
                    result.append(current)
                current = []
            elif target_next:
                target_next = False
            elif word in REDIRECTS:
                target_next = word != "2>&1"
            else:
                current.append(word)
    return result


ALL_BLOCKS = [block for path in DOCUMENTS for block in shell_blocks(path)]


def test_the_documents_have_runnable_blocks() -> None:
    assert any(block.marker == "run" for block in ALL_BLOCKS), "the docs check needs runnable blocks"


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.marker != "synopsis"], ids=lambda b: b.where)
def test_every_command_parses(block: Block) -> None:
    for words in commands(block):
        _check_command(words, block)


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.marker == "synopsis"], ids=lambda b: b.where)
def test_synopsis_lines_name_real_commands(block: Block) -> None:
    import argparse

    from spark_kafka_backup.cli import build_parser

    subcommands = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    known = set(subcommands[0].choices)
    for line in block.text.splitlines():
        words = line.split()
        if words and words[0] == "spark-kafka-backup":
            assert words[1] in known, f"{block.where}: spark-kafka-backup {words[1]} is not a command"


def _check_command(words: list[str], block: Block) -> None:
    where = block.where
    if words[:3] == ["python", "-m", "spark_kafka_backup"] or words[0] == "spark-kafka-backup":
        args = words[3:] if words[0] == "python" else words[1:]
        if args and args[0] in ("backup", "restore"):  # the launcher: its own options, then the job's
            from spark_kafka_backup.launcher import split_arguments

            _parses(args[0], split_arguments(args[1:]).job_args, where)
        else:
            _parses("spark-kafka-backup", args, where)
    elif words[0] == "spark-submit":
        jobs = [i for i, word in enumerate(words) if re.fullmatch(r"(.*/)?jobs/(backup|restore)\.py", word)]
        assert jobs, f"{where}: spark-submit without jobs/backup.py or jobs/restore.py"
        job = Path(words[jobs[0]]).stem
        _parses(job, words[jobs[0] + 1 :], where)
    elif words[0] == "./dev":
        assert words[1] in {"setup", "unit", "test", "lint", "bench", "demo", "wheels"}, (
            f"{where}: ./dev {words[1]} does not exist"
        )
        if words[1] == "bench" and len(words) > 2:
            assert (REPO / "benchmarks" / f"{words[2]}_bench.py").is_file(), f"{where}: no benchmark {words[2]}"
    elif words[0] == "docker":
        _check_docker(words, where)
    elif words[:3] in (["python", "-m", "pip"], ["python", "-m", "build"]):  # installing outside a checkout
        wheels = [word for word in words if word.endswith(".whl")]
        assert all(word.startswith("dist/spark_kafka_backup-") for word in wheels), f"{where}: not this project's wheel"
    else:
        assert words[0] in FOREIGN, f"{where}: unknown command {words[0]!r} in the docs"


def _parses(program: str, args: list[str], where: str) -> None:
    import contextlib
    import io

    if program == "spark-kafka-backup":
        from spark_kafka_backup.cli import build_parser as parser
    elif program == "backup":
        from spark_kafka_backup.backup.settings import build_parser as parser
    else:
        from spark_kafka_backup.restore.settings import build_parser as parser
    if "--help" in args or "-h" in args:
        return
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            parser().parse_args(args)
    except SystemExit:
        pytest.fail(f"{where}: {program} {' '.join(args)}: {errors.getvalue().strip().splitlines()[-1]}")


def _check_docker(words: list[str], where: str) -> None:
    import yaml

    if words[1] == "build":
        assert "docker/Dockerfile" in words, f"{where}: docker build should use docker/Dockerfile"
        return
    if words[1] == "run":
        return  # the image's entry point: checked in tests/test_docker.py
    assert words[1] == "compose", f"{where}: unexpected docker command"
    assert "-f" in words, f"{where}: name the compose file with -f"
    compose = REPO / words[words.index("-f") + 1]
    services = set(yaml.safe_load(compose.read_text())["services"])
    for word in words:
        if word in {"up", "run", "stop", "logs"}:
            named = [w for w in words[words.index(word) + 1 :] if not w.startswith("-")]
            if word == "run":
                named = named[:1]
            assert set(named) <= services, f"{where}: unknown service(s) {set(named) - services}"


# -- runnable blocks ------------------------------------------------------------------------


RUNNABLE_DOCS = sorted({b.path for b in ALL_BLOCKS if b.marker == "run"})


@pytest.fixture(scope="module")
def docs_cluster(kafka: BrokerUnderTest) -> BrokerUnderTest:
    """``orders`` (3 partitions, 300 records) and group ``billing`` (committed at 40 on partition 0)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    create_topics(kafka, {"orders": 3})
    producer = Producer(kafka.client_settings())
    for i in range(300):
        producer.produce("orders", key=b"order-%d" % i, value=b'{"amount": %d}' % i, partition=i % 3)
    producer.flush(30)
    consumer = Consumer(kafka.client_settings(**{"group.id": "billing", "enable.auto.commit": "false"}))
    consumer.commit(offsets=[TopicPartition("orders", 0, 40)], asynchronous=False)
    consumer.close()
    return kafka


#: The operations page walks through every maintenance command, each a job or a subprocess: a long scenario.
LONG_DOCS = {REPO / "docs" / "operations.md"}


@pytest.mark.parametrize(
    "document",
    [pytest.param(path, marks=pytest.mark.long) if path in LONG_DOCS else path for path in RUNNABLE_DOCS],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_runnable_blocks_run(document: Path, docs_cluster: BrokerUnderTest, target: Target, tmp_path: Path) -> None:
    for broker in (docs_cluster, target.broker):
        assert not broker.extra_settings or set(broker.extra_settings) <= {"receive.message.max.bytes"}, (
            "the docs' commands pass only --bootstrap-server"
        )
    # A new shell: the system's PATH, then .venv activated as the README says (what a reader pastes into).
    env = {
        key: value
        for key, value in job_env().items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")
    }
    env.update(
        {
            "KAFKA": docs_cluster.bootstrap_servers,
            "NEW_KAFKA": target.broker.bootstrap_servers,
            "BACKUPS": str(tmp_path / "backups"),
            "STATE": str(tmp_path / "state"),
            "PATH": "/usr/local/bin:/usr/bin:/bin",
        }
    )
    activate = f"source {shlex.quote(str(Path(sys.prefix) / 'bin' / 'activate'))}\n"
    for block in (b for b in ALL_BLOCKS if b.path == document and b.marker == "run"):
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", activate + block.text],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,  # a reader's directory, not the checkout
            timeout=600,
        )
        assert result.returncode == 0, (
            f"{block.where} failed:\n{block.text}\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )


# -- troubleshooting quotes real messages -----------------------------------------------------


def _quoted_messages() -> list[str]:
    """The messages the tables explain (the generated index of every message after them is checked below)."""
    page = (REPO / "docs" / "troubleshooting.md").read_text().split(error_index.BEGIN)[0]
    return re.findall(r"^\| `([^`]+)`", page, re.M)


def test_troubleshooting_lists_every_error_message_the_code_can_raise() -> None:
    """Each message of an error the package raises (its tree of errors, argparse's) is on the page: a new or
    changed one fails this until `python -m devkit.error_index --write` lists it."""
    sources = error_index.parse_package()
    found = list(error_index.raised(sources))
    page = (REPO / "docs" / "troubleshooting.md").read_text()
    listed = page.split(error_index.BEGIN)[-1]
    missing = sorted({f"{item.path}:{item.line}: {item.message}" for item in found
                      if error_index.cell(item.message) not in listed})  # fmt: skip
    assert not missing, "not in docs/troubleshooting.md (python -m devkit.error_index --write):\n" + "\n".join(missing)
    assert page == error_index.page_with_index(page, error_index.index_text(found, error_index.error_kinds(sources))), (
        "docs/troubleshooting.md's index of messages is out of date: python -m devkit.error_index --write"
    )
    # Every place an error of the tree (or argparse's) is made is read: by an independent walk of the source.
    import ast

    errors = error_index.error_classes(sources) | {"ArgumentTypeError"}
    made = {(path.relative_to(REPO).as_posix(), node.lineno) for path, tree in sources.items()
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and node.args and error_index.called_name(node.func) in errors}  # fmt: skip
    assert made - {(item.path, item.line) for item in found} == set()
    built = [item for item in found if item.message.startswith("(built at ")]
    assert len(built) <= 12, built  # a message composed elsewhere: a few, each named by its place
    # The ones a newcomer met unexplained, and a spread of kinds, are found by the reading of the source itself.
    assert len({item.message for item in found}) >= 600
    for words in (
        "is inside the backup",
        "is a topic directory; pass the backup root",
        "the snapshot was stopped by NAME before it was complete",
        "expected a duration like 7d",
        "no space left on its file system",
        "cannot list topics: ",
        "is stamped 0",
    ):
        assert any(words in item.message for item in found), words


def test_troubleshooting_quotes_messages_the_code_prints() -> None:
    sources = "\n".join(path.read_text() for path in (REPO / "spark_kafka_backup").rglob("*.py"))
    sources += "\n" + "\n".join(path.read_text() for path in (REPO / "jobs").glob("*.py"))
    sources = sources.replace('\\"', '"')  # escaped quotes in string literals
    sources = re.sub(r'"\s*(?:\+\s*)?f?"', "", sources)  # adjacent literals: "a " f"b" reads "a b"
    messages = _quoted_messages()
    assert len(messages) >= 25, "the troubleshooting table lists the messages spark-kafka-backup prints"
    for message in messages:
        # Placeholders (FILE, TOPIC, N, ...) stand for what the code fills in; the words between must be in it.
        fixed = [part.strip() for part in re.split(r"\b[A-Z][A-Z_0-9]*\b|\.\.\.", message) if len(part.strip()) >= 6]
        assert fixed, f"nothing fixed to look for in {message!r}"
        for part in fixed:
            assert part in sources, f"troubleshooting quotes {message!r}, but no code prints {part!r}"
