"""The project's own error types: every expected failure raises one of these."""

from __future__ import annotations


class HeadbenchError(Exception):
    """Base class of every error headbench raises on purpose."""


class ConfigError(HeadbenchError, ValueError):
    """A configuration value is invalid; the message names the key and valid choices."""


class DataError(HeadbenchError, ValueError):
    """A data file is missing or malformed; the message names the file and line."""


class MissingDataError(DataError):
    """The input data could not be found: a data directory or task file, or the Hub.

    The cause is where the data lives, not the cell: a cell that fails with it is retried by
    the next launch once the path is fixed (:func:`bench.run.failures.is_environmental`).
    """


class EncoderError(HeadbenchError, ValueError):
    """An encoder cannot be loaded or does not support the requested option."""


class DivergedError(HeadbenchError, RuntimeError):
    """The training loss (or a parameter update) became NaN or infinite.

    Attributes:
        step: The global step at which the non-finite loss was seen.
    """

    def __init__(self, step: int, loss: float, what: str = "training loss") -> None:
        super().__init__(f"non-finite {what} {loss} at global step {step}")
        self.step = step
        self.loss = loss


class CollectError(HeadbenchError):
    """Collecting results would lose them: nothing to collect, or outputs that cannot be replaced.

    The message names the roots that do not exist or hold no result file, and the results
    directory left unchanged.
    """
