"""The worker runtime: dispatch, execution, heartbeats and maintenance, over the ports."""

from awa.runtime.config import QueueConfig, RateLimit, RuntimeConfig, parse_start_args
from awa.runtime.context import AttemptContext, AttemptLost
from awa.runtime.handlers import HandlerEntry, HandlerRegistry, JobFactory
from awa.runtime.runtime import QueueHealth, Runtime, RuntimeHealth

__all__ = [
    "AttemptContext",
    "AttemptLost",
    "HandlerEntry",
    "HandlerRegistry",
    "JobFactory",
    "QueueConfig",
    "QueueHealth",
    "RateLimit",
    "Runtime",
    "RuntimeConfig",
    "RuntimeHealth",
    "parse_start_args",
]
