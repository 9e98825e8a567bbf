"""The report stage's pieces: figures from the DVC plot files, markdown from the metrics."""
