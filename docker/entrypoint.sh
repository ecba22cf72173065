#!/bin/sh
# spark-kafka-backup-entrypoint COMMAND [ARGS...]
#   backup ARGS    spark-submit the backup job (jobs/backup.py)
#   restore ARGS   spark-submit the restore job (jobs/restore.py)
#   spark-kafka-backup ARGS   the spark-kafka-backup command (ls, verify, report, ...)
# SPARK_MASTER (default local[*]) and SPARK_SUBMIT_OPTS_EXTRA (more spark-submit flags) shape the Spark run.
set -eu
command=${1:-spark-kafka-backup}
[ "$#" -gt 0 ] && shift
case "$command" in
  backup|restore)
    # shellcheck disable=SC2086 # SPARK_SUBMIT_OPTS_EXTRA is a list of flags
    exec spark-submit --master "${SPARK_MASTER:-local[*]}" --conf spark.ui.enabled=false \
      ${SPARK_SUBMIT_OPTS_EXTRA:-} "/opt/spark-kafka-backup/jobs/$command.py" "$@"
    ;;
  spark-kafka-backup)
    exec spark-kafka-backup "$@"
    ;;
  *)
    exec "$command" "$@"
    ;;
esac
