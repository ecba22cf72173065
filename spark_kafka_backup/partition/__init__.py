"""Partitions of a v1 backup on a local disk: layout, reading, writing, repair."""
