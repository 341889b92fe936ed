"""Pipeline schedules as data: pure functions ``(P, M, ...) -> {rank: [op, ...]}``, no SimPy."""
from .base import Placement, Schedule
from .ops import FBOp, Op, parse_op
from .registry import (CHUNKED, SCHEDULE_NAMES, SCHEDULES, SEARCHED, STANDALONE, ScheduleConfigError, check_arguments,
                       make_schedule, takes_chunks)
from .validate import ScheduleError, validate

__all__ = ["CHUNKED", "Placement", "Schedule", "FBOp", "Op", "parse_op", "SCHEDULE_NAMES", "SCHEDULES", "SEARCHED",
           "STANDALONE", "ScheduleConfigError", "check_arguments", "make_schedule", "ScheduleError", "takes_chunks",
           "validate"]
