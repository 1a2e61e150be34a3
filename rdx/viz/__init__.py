"""Drawing: image grids and figures, from data (results, arrays, dicts) — reading a run
folder is the caller's job. :mod:`.style` holds the one palette, markers and font sizes,
:mod:`.save` writes figures atomically."""
