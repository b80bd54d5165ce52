"""Predictions checked against measured runs (``dse validate``) and calibrations fitted to
them (``dse calibrate``)."""

from .calibrate import calibrate
from .validation import Validation, default_calibration, dumps_json, validate

__all__ = ["Validation", "calibrate", "default_calibration", "dumps_json", "validate"]
