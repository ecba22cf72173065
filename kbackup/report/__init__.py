"""What a backup holds, summarised (``kbackup describe``) and drawn (``kbackup report``)."""
