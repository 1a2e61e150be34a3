"""Results: the documents every method writes, the run store that owns the output folder
(:mod:`.store`) and the one writer of comparison folders (:mod:`.writer`)."""
