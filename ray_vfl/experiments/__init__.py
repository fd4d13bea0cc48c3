"""Sweeps over protocols and settings, one result row per run (:mod:`ray_vfl.experiments.runner`); a long
job's runs saved as they finish (:mod:`ray_vfl.experiments.progress`)."""

from .config import ExperimentConfig
from .progress import Interrupted, RunLog
from .runner import run_sweep

__all__ = ["ExperimentConfig", "run_sweep", "RunLog", "Interrupted"]
