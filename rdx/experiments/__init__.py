"""The experiment runner: YAML configs → selected images → features → methods → results."""
from .config import Comparison, load_experiment
from .run import run_comparison, run_experiment

__all__ = ["Comparison", "load_experiment", "run_comparison", "run_experiment"]
