"""What a backup holds, summarised (``spark-kafka-backup describe``) and drawn (``spark-kafka-backup report``)."""
