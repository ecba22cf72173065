"""Which topics a backup covers: an explicit list or a regular expression.

A regular expression must match the **whole** topic name (like the original,
which used Java's ``Pattern.matcher(topic).matches()``). Internal topics
(``__consumer_offsets``, ``__transaction_state`` and any name starting with
``__``) are never selected by a pattern; they can still be listed explicitly.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from spark_kafka_backup.errors import UsageError

#: The topics Kafka keeps for itself (the brokers write them; clients may not): consumer group offsets, transaction
#: state, share group state, and KRaft's metadata log.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state", "__cluster_metadata"})


@dataclass(frozen=True)
class TopicSelection:
    """Exactly one of ``topics`` and ``pattern`` is set."""

    topics: tuple[str, ...] | None = None
    pattern: str | None = None

    def __post_init__(self) -> None:
        if (self.topics is None) == (self.pattern is None):
            raise UsageError("give either a topic list or a topic regex, not both and not neither")
        if self.topics is not None and not self.topics:
            raise UsageError("the topic list is empty")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise UsageError(f"invalid topic regex {self.pattern!r}: {exc}") from exc

    @classmethod
    def from_list(cls, text: str) -> TopicSelection:
        topics = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        return cls(topics=topics)

    def matches(self, topic: str) -> bool:
        if self.topics is not None:
            return topic in self.topics
        assert self.pattern is not None
        return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None

    def select(self, available: Iterable[str]) -> list[str]:
        """The selected topics among ``available``, sorted."""
        return sorted(topic for topic in available if self.matches(topic))

    def without(self, topics: Iterable[str]) -> TopicSelection | None:
        """This selection less ``topics`` (``None``: nothing left of a list). A regex gets a negative lookahead that
        Java's and Python's regex engines read alike, so Spark's own source leaves them out too."""
        left_out = sorted(set(topics))
        if not left_out:
            return self
        if self.topics is not None:
            kept = tuple(topic for topic in self.topics if topic not in left_out)
            return TopicSelection(topics=kept) if kept else None
        names = "|".join(re.escape(topic) for topic in left_out)
        assert self.pattern is not None
        flags = re.match(r"\(\?[aiLmsux]+\)", self.pattern)  # inline flags must stay first
        head = flags.group(0) if flags else ""
        return TopicSelection(pattern=f"{head}(?!(?:{names})$)(?:{self.pattern[len(head) :]})")

    def describe(self) -> str:
        return f"topics {','.join(self.topics)}" if self.topics is not None else f"topics matching {self.pattern!r}"
