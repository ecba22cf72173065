"""Schema registries: the backup's copy of one, capturing it, registering it in another, rewriting schema ids.

Modules: :mod:`~spark_kafka_backup.schema_registry.client` (the REST API),
:mod:`~spark_kafka_backup.schema_registry.registry_copy` (the copy a backup keeps),
:mod:`~spark_kafka_backup.schema_registry.capture` (filling it), :mod:`~spark_kafka_backup.schema_registry.
registry_import` (registering it in a target registry) and :mod:`~spark_kafka_backup.schema_registry.wire` (the records'
schema ids). See docs/schema-registry.md.
"""
