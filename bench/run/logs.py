"""One line per log record in a sweep's output, and no third-party advertising.

The ``lightning`` package gives its logger a console handler of its own on import
(``INFO: ...``) and lets records propagate too, so under Hydra's job logging (a handler on
the root logger, console and ``<job>.log``) every Lightning line appears twice. Lightning
also logs tips for other products of its vendor ("💡 Tip: ... litlogger").
:func:`route_lightning_logs` removes Lightning's own handler when the root logger has
handlers (so its records go through Hydra's, once, into the job log too) and filters the
tips, with the standard :mod:`logging` API only.
"""

from __future__ import annotations

import logging

#: Loggers whose records carry Lightning's tips (``rank_zero_info``).
_TIP_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")
_TIP_PREFIX = "💡 Tip:"
#: Loggers to which Lightning's packages attach console handlers of their own on import.
_OWN_HANDLERS = ("lightning", "lightning.pytorch", "lightning.fabric")


class DropTips(logging.Filter):
    """Drop log records that advertise other products (their text starts with a tip mark)."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Keep every record but a tip."""
        return not str(record.msg).startswith(_TIP_PREFIX)


def route_lightning_logs() -> None:
    """Send Lightning's records through the root logger's handlers only, without tips.

    Imports ``lightning`` (its import attaches the handler this removes). Idempotent.
    """
    import lightning  # noqa: F401  (attaches its console handler on first import)

    if logging.getLogger().hasHandlers():
        # `lightning` always adds a handler; `lightning.pytorch` and `lightning.fabric` add
        # one (and stop propagating) when imported while the root logger had none.
        for name in _OWN_HANDLERS:
            logger = logging.getLogger(name)
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
            logger.propagate = True
    for name in _TIP_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, DropTips) for f in logger.filters):
            logger.addFilter(DropTips())
