"""Paired comparisons: the native job and each compiled job, in separate processes and alternating rounds,
summarised side by side with intervals and verdicts (``compare``, ``compare_configs``); the same job against itself
(A/A, ``noise_floor``); a training script of your own, the same way (``compare_script``; inside it,
``tcbench.track()`` or ``tcbench.hf``).

Modules: ``rounds`` (the defaults and the adaptive rule), ``result`` (``Comparison`` and ``NoiseFloor``: the
figures and exports), ``running`` (the calls that run jobs, and the rounds loop), ``stored`` (rebuilding from the
store, and what earlier comparisons say). Every name other modules use is re-exported here."""

from tcbench.comparison.result import Comparison, NoiseFloor, median_of
from tcbench.comparison.rounds import DEFAULT_BUDGET_S, DEFAULT_RESOLVE, DEFAULT_ROUNDS, MAX_ROUNDS, rounds_rule
from tcbench.comparison.running import PAIRINGS, compare, compare_configs, compare_script, noise_floor
from tcbench.comparison.stored import StoredNoiseFloor, earlier_spreads, latest_noise_floor, load_comparison

__all__ = ["Comparison", "NoiseFloor", "median_of", "DEFAULT_BUDGET_S", "DEFAULT_RESOLVE", "DEFAULT_ROUNDS",
           "MAX_ROUNDS", "PAIRINGS", "rounds_rule", "compare", "compare_configs", "compare_script", "noise_floor",
           "earlier_spreads", "latest_noise_floor", "StoredNoiseFloor", "load_comparison"]
