"""The catalog: spark-kafka-backup's record of what a backup holds, beside the v1 files.

One JSON document per backed-up partition, ``ROOT/kbackup~state/catalog/<topic>/partition_PPP.json``,
naming each **finished** segment (one that will not grow: a newer segment
exists) with its offsets, record count, time range, sizes and the CRC32C of
both its files. The v1 files are untouched, so the original tool still reads
the backup. See ``formats/catalog.md``.
"""
