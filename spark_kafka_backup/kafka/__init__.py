"""Kafka access on confluent-kafka: topic selection, offsets, consumer groups, client settings."""
