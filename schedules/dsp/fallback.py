"""Fallback for any op: the unscheduled loop nest, correct but serial (one core)."""
from .. import ScheduleRule


class Fallback(ScheduleRule):
    op = None

    def schedule(self, sch, target) -> None:
        return None
