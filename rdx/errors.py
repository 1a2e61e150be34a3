"""Exceptions raised for bad user input.

Every check in the package raises :class:`RDXInputError` with a message that says what was
wrong and how to fix it; the CLI turns it into a one-paragraph message and exit status 2.
"""


class RDXInputError(ValueError):
    """Input that the method cannot use (shape, values, parameters, memory)."""


class NotFittedError(RDXInputError, AttributeError):
    """An estimator was used before ``fit``; like scikit-learn's ``NotFittedError`` it is both a
    ``ValueError`` and an ``AttributeError``."""
