"""The restore job: re-produce a v1 backup into a Kafka cluster and remap consumer offsets."""
