"""Studies: analyses built from the method, the models and the run store, one package each.

* :mod:`rdx.studies.layers`: RDX across the layers of one model, probes, head patching
  (``rdx layers``).
* :mod:`rdx.studies.dynamics`: every training checkpoint against the final model
  (``rdx dynamics``).
* :mod:`rdx.studies.similarity`: many models × many datasets, similarity matrices and linear
  probes as resumable jobs (``rdx matrix``, ``rdx probe``, ``rdx consistency``).
* :mod:`rdx.studies.benchmark`: the known-difference benchmark with seed-twin controls
  (``rdx benchmark``) and the seed-twin calibration suite.

Each package holds its config, its pipeline and its analysis; the command lines live in
:mod:`rdx.commands`.
"""
