"""Sweeps over protocols and settings, one result row per run (:mod:`ray_vfl.experiments.runner`)."""

from .config import ExperimentConfig
from .runner import run_sweep

__all__ = ["ExperimentConfig", "run_sweep"]
