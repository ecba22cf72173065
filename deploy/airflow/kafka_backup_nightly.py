"""spark-kafka-backup from Airflow: a nightly snapshot of a Kafka cluster, then a check of the backup, then a report.

Copy into the DAGs folder and edit the places marked EDIT (docs/deploy.md#airflow). The tasks run on an Airflow
worker where spark-kafka-backup is installed for its python3.X (the snapshot's Spark driver runs there, and
Spark starts the Kafka source's planning Python by the executors' command, python3.X); the executors get everything
from the packed environment in ``archives`` (``spark-kafka-backup pack``). Exit codes are the jobs': anything but 0
fails the task (1: a failure the log names; 143: stopped), and the next steps do not run.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

#: EDIT: where spark-kafka-backup's job files are on the Airflow worker (python -c "from spark_kafka_backup.jobs
#: import job_file; print(job_file('backup'))" prints the installed one), the packed environment, the backup.
JOB = "/opt/spark-kafka-backup/jobs/backup.py"
PACKED = "s3a://company-artifacts/spark-kafka-backup/0.1.0/kbackup-env.tar.gz"
BACKUP = "s3://company-kafka-backups/nightly"
REPORTS = "/var/lib/spark-kafka-backup/reports"

with DAG(
    dag_id="kafka_backup_nightly",
    description="snapshot backup of the Kafka cluster, verify, report",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # never two snapshots of one backup at once
    default_args={"retries": 2, "retry_delay": timedelta(minutes=10)},
    params={
        "bootstrap_servers": "kafka-1.example.internal:9093",  # EDIT
        "client_config": "/etc/spark-kafka-backup/client.properties",  # EDIT: SASL/TLS settings, on the worker
        "topics_regex": "[^_].*",
        "pushgateway": "http://prometheus-pushgateway.monitoring:9091",  # EDIT
    },
    tags=["kafka", "backup"],
) as dag:
    snapshot = SparkSubmitOperator(
        task_id="snapshot",
        conn_id="spark_default",  # EDIT: a Spark connection whose host is the cluster's master (spark://HOST:7077)
        application=JOB,
        name="kafka-snapshot-{{ ds }}",
        archives=f"{PACKED}#kbackup-env",
        conf={
            # What spark-kafka-backup --archive sets (docs/deploy.md): the executors' packages, their Python.
            "spark.executorEnv.PYTHONPATH": "./kbackup-env/site-packages",
            "spark.pyspark.python": "python3.11",
            "spark.ui.enabled": "false",
        },
        application_args=[
            "--bootstrap-server",
            "{{ params.bootstrap_servers }}",
            "--command-config",
            "{{ params.client_config }}",
            "--topics-regex",
            "{{ params.topics_regex }}",
            "--target-dir",
            BACKUP,
            "--checkpoint-location",
            "/var/lib/spark-kafka-backup/state/nightly",
            "--snapshot",
            "--metrics-pushgateway",
            "{{ params.pushgateway }}",
        ],
        execution_timeout=timedelta(hours=6),
    )
    verify = BashOperator(
        task_id="verify",
        bash_command=f"spark-kafka-backup verify {BACKUP}",
        execution_timeout=timedelta(hours=2),
    )
    report = BashOperator(
        task_id="report",
        bash_command=f"spark-kafka-backup report {BACKUP} --output {REPORTS}/nightly-{{{{ ds }}}}.html",
    )
    snapshot >> verify >> report
