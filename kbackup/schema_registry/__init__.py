"""Schema registries: the backup's copy of one, capturing it, registering it in another, rewriting schema ids.

Modules: :mod:`~kbackup.schema_registry.client` (the REST API), :mod:`~kbackup.schema_registry.registry_copy`
(the copy a backup keeps), :mod:`~kbackup.schema_registry.capture` (filling it), :mod:`~kbackup.schema_registry.
registry_import` (registering it in a target registry) and :mod:`~kbackup.schema_registry.wire` (the records'
schema ids). See docs/schema-registry.md.
"""
