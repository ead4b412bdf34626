"""The controller (docs/design.md#controller; KAFKA-42)."""
from .controller import Controller, ControllerHalted, HALT_ENV

__all__ = ["Controller", "ControllerHalted", "HALT_ENV"]
