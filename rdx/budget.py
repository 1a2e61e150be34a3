"""Up-front bounds on the options that multiply time or memory.

A count such as ``--bootstrap``, ``--permutations``, ``n_epochs`` or ``n_features`` makes a
run proportionally longer (or larger). A typo of a few zeros used to be accepted and run
"forever", so every such count is bounded before any work starts, in two ways:

* **ceilings** (:data:`CEILINGS`): machine-independent maxima, far beyond any useful value,
  looked up by the parameter's name in :func:`rdx.validation.check_int` — the check every
  integer parameter of every command and estimator goes through — and, for the options
  that start processes or size a batch (:data:`PARSE_TIME`), as soon as the command line
  is parsed (:mod:`rdx.cli`), so that a new parameter or option with one of these names is
  bounded without further code;
* **time estimates** (:func:`check_duration`): where the cost of one unit is known (a
  similarity draw, a training epoch on this data), a count whose estimated run exceeds
  :func:`max_seconds` (24 h, ``RDX_MAX_HOURS``) is refused with the largest value that
  fits; a merely long one is announced on stderr before it starts.

Both raise :class:`~rdx.errors.RDXInputError` naming the option and a value that fits.
"""
from __future__ import annotations

import math
import os
import re
import sys

from .errors import RDXInputError

#: Longest estimated run (hours) an option may ask for by default; ``RDX_MAX_HOURS`` sets
#: another limit (e.g. for a week-long cluster job).
DEFAULT_MAX_HOURS = 24.0
#: Estimated runs at least this long are announced on stderr before they start.
ANNOUNCE_SECONDS = 60.0

#: Ceilings of the counts that multiply work, by parameter name: (maximum, why). Each is
#: orders of magnitude above the useful range, so only typos and absurd values hit it.
CEILINGS: dict[str, tuple[int, str]] = {
    "permutations": (1_000_000, "p-values resolve to 1/(permutations + 1), and every draw "
                                "is kept in memory"),
    "bootstrap": (1_000_000, "interval ends are stable after a few thousand draws, and "
                             "every draw is kept in memory"),
    "n_epochs": (100_000, "the baselines converge within a few thousand epochs"),
    "epochs": (100_000, "training converges within a few thousand epochs"),
    "max_iter": (100_000, "the solvers converge within a few thousand iterations"),
    "n_init": (10_000, "k-means restarts beyond a few hundred no longer change the best fit"),
    "n_features": (1 << 16, "each model's random Fourier features take n × 2·n_features "
                            "floats of memory"),
    "n_latents": (1 << 16, "the dictionary takes n_latents × d floats per model"),
    # = rdx.evaluation.significance.MAX_N_NULL (a test keeps them equal)
    "n_null": (1000, "each null draw refits the method, and family-wise p-values are "
                     "calibrated up to that many draws"),
    "n_components": (4096, "an embedding of n × n_components floats, optimised per "
                           "dimension"),
    # options that start processes or size a batch (checked when the command line is
    # parsed, PARSE_TIME below)
    "workers": (256, "each is a process with its own copy of the data pipeline"),
    "num_workers": (256, "each is a process with its own copy of the data pipeline"),
    "batch_size": (1 << 20, "a batch of that many images is held in memory at once"),
    "probe_batch_size": (1 << 20, "a batch of that many feature rows is held in memory "
                                  "at once"),
}


#: The ceilings :mod:`rdx.cli` checks as soon as the command line is parsed, for every
#: integer option of that name, before the command starts. The others are checked where
#: the command uses the count, which can also estimate its time and name a value that fits.
PARSE_TIME = ("workers", "num_workers", "batch_size", "probe_batch_size")


#: Options that start worker processes on this machine, by command: besides their ceiling
#: they are bounded by the CPUs this process may run on (:func:`check_local_workers`).
#: ``rdx matrix`` and ``rdx probe`` are not listed: their jobs may run on a cluster's
#: nodes, whose CPUs the machine that submits them cannot count.
LOCAL_WORKERS: dict[str, tuple[str, ...]] = {"features": ("workers",)}


def check_local_workers(value: int, flag: str, cpus: int | None = None) -> None:
    """Refuse more worker processes than the CPUs this process may run on.

    A DataLoader worker decodes images on a CPU of its own; more workers than CPUs only
    compete for them (torch warns that such a loader may slow down or freeze), and each
    holds a copy of the data pipeline. ``cpus`` defaults to
    :func:`rdx.threads.affinity_cpus` (the affinity mask: what ``taskset`` or a batch
    scheduler allows).

    Raises
    ------
    RDXInputError
        Naming the flag, the CPU count and the values that work.
    """
    if cpus is None:
        from .threads import affinity_cpus

        cpus = affinity_cpus()
    if value > cpus:
        raise RDXInputError(
            f"{flag}={value} starts more worker processes than the {cpus} CPU(s) this "
            f"process may run on, where they only compete for the CPUs (and each holds a "
            f"copy of the data pipeline); use {flag} between 0 (decode in the main "
            f"process) and {cpus}.")


def ceiling(name: str) -> tuple[int, str] | None:
    """The ceiling of a parameter, found by the last word of its name, with or without an
    ``n_`` prefix: ``n_epochs``, ``--epochs``, ``comparisons[0].methods[1].n_epochs`` and
    ``--method sae: n_epochs`` all name ``n_epochs``/``epochs``, ``stats.n_permutations``
    names ``permutations``; None for a parameter without one."""
    words = re.split(r"[.:\s]+", name.strip())
    if not words:
        return None
    key = words[-1].lstrip("-").replace("-", "_")
    # n_permutations is a count of permutations: the same ceiling
    return CEILINGS.get(key) or (CEILINGS.get(key[2:]) if key.startswith("n_") else None)


def check_ceiling(value: int, name: str) -> None:
    """Refuse ``value`` above the ceiling of ``name`` (:data:`CEILINGS`).

    Raises
    ------
    RDXInputError
        Naming the parameter, its ceiling and why the ceiling is there.
    """
    found = ceiling(name)
    if found is not None and value > found[0]:
        top, why = found
        raise RDXInputError(
            f"{name}={value} is far beyond any useful value: at most {top:,} ({why}); use "
            f"≤ {top:,}.")


def max_seconds() -> float:
    """The longest estimated run an option may ask for: ``RDX_MAX_HOURS`` (hours, a
    positive number) or :data:`DEFAULT_MAX_HOURS`."""
    text = os.environ.get("RDX_MAX_HOURS", "").strip()
    if text:
        try:
            hours = float(text)
        except ValueError:
            hours = float("nan")
        if not (math.isfinite(hours) and hours > 0):
            raise RDXInputError(f"RDX_MAX_HOURS={text!r} must be a positive number of hours "
                                "(e.g. RDX_MAX_HOURS=72).")
        return hours * 3600.0
    return DEFAULT_MAX_HOURS * 3600.0


def format_duration(seconds: float) -> str:
    """``"40 s"``, ``"12 min"``, ``"3.5 h"``, ``"12 days"``, ``"4e+03 years"``."""
    if seconds < 90:
        return f"{max(seconds, 0):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    if seconds < 365 * 86400:
        return f"{seconds / 86400:.0f} days"
    years = seconds / (365.25 * 86400)
    return f"{years:.0f} years" if years < 1e4 else f"{years:.1g} years"


def round_down(value: float) -> int:
    """``value`` rounded down to one significant digit (a count a user would type):
    12345 → 10000, 4321 → 4000; at least 1."""
    if value < 1:
        return 1
    scale = 10 ** int(math.floor(math.log10(value)))
    return max(1, int(value // scale) * scale)


def check_duration(option: str, value: int, *, seconds: float, seconds_each: float,
                   what: str = "", announce: bool = True) -> None:
    """Refuse a count above its ceiling or estimated to run longer than
    :func:`max_seconds`; announce a long one.

    Parameters
    ----------
    option : str
        How the user set the count (``--bootstrap``, ``n_epochs``), for the message; its
        last word also finds the count's ceiling (:data:`CEILINGS`).
    value : int
        The count.
    seconds : float
        Estimated time of the whole run with this count.
    seconds_each : float
        Estimated time of one unit of the count (the rest of ``seconds`` is fixed), to
        name the largest count that fits.
    what : str
        Context for the messages (e.g. ``"cka_linear at n = 60"``).
    announce : bool
        Print the estimate to stderr when it is at least :data:`ANNOUNCE_SECONDS`.

    Raises
    ------
    RDXInputError
        When ``value`` exceeds its ceiling or ``seconds`` exceeds :func:`max_seconds`; the
        message names the option, the estimate and a value that fits.
    """
    limit = max_seconds()
    context = f", {what}" if what else ""
    top = ceiling(option)
    over_ceiling = top is not None and value > top[0]
    if seconds > limit or over_ceiling:
        fixed = max(0.0, seconds - value * seconds_each)
        fits = (round_down((limit - fixed) / seconds_each) if seconds_each > 0 else value) \
            if fixed < limit else 0
        reasons = []
        if seconds > limit:
            reasons.append(f"the limit is {format_duration(limit)}; RDX_MAX_HOURS changes it")
        if top is not None and (over_ceiling or fits > top[0]):
            fits = min(fits, top[0]) if fits else 0
            reasons.append(f"at most {top[0]:,} in any case: {top[1]}")
        hint = (f"use {option} ≤ {fits:,} ({'; '.join(reasons)})" if fits else
                f"even the smallest value exceeds the limit of {format_duration(limit)} "
                "(RDX_MAX_HOURS changes it); use less data")
        raise RDXInputError(
            f"{option} {value:,} would take about {format_duration(seconds)} here "
            f"(estimate{context}); {hint}.")
    if announce and seconds >= ANNOUNCE_SECONDS:
        print(f"{option} {value:,}: about {format_duration(seconds)} (estimate{context})",
              file=sys.stderr, flush=True)
