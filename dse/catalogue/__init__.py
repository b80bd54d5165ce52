"""The catalogues: hardware and model cards (human units) and their numeric specs, the
calibration files, the use-case presets, and where each is found."""

from .calibration import Calibration
from .hardware import HardwareCard, HardwareSpec
from .lookup import (all_hardware, all_models, hardware_names, load_hardware, load_model,
                     model_names, roots)
from .model import ModelCard, card_from_hf_config
from .usecases import USECASES

__all__ = ["USECASES", "Calibration", "HardwareCard", "HardwareSpec", "ModelCard",
           "all_hardware", "all_models", "card_from_hf_config", "hardware_names",
           "load_hardware", "load_model", "model_names", "roots"]
