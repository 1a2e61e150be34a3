"""The RDX method's math: geometry → graphs → clustering → grids, each as pure functions."""
