"""Error type raised by the hardware-spec database."""

from __future__ import annotations

__all__ = ["HardwareSpecError"]


class HardwareSpecError(ValueError):
    """A hardware spec is unknown, unreadable or violates a validation rule.

    Messages are a single line that names the file (when there is one), the
    offending field and the rule it broke, e.g.
    ``hwspecs: my.yaml: field 'hbm_bandwidth_gbps' must be > 0 (got -1)``.
    Subclasses :class:`ValueError` so callers that already catch bad-value
    errors keep working.
    """
