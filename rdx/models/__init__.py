"""Models and feature extraction: the paper's small ConvNet (``convnet``, ``training``),
loaders for model zoos (``zoo``) and cached, batched feature extraction (``extract``)."""
