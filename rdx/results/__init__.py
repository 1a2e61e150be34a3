"""Results: the documents every method writes and the run store that owns the output folder."""
