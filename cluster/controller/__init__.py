"""The controller (seed 000 A-F, H; seed 003 event queue; KAFKA-42)."""
from .controller import Controller, ControllerHalted, HALT_ENV

__all__ = ["Controller", "ControllerHalted", "HALT_ENV"]
