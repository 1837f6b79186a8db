"""What the search says about a run without TensorFlow: the class-level hooks of `ParSearch`.

`ParSearchReport` holds the classmethods the trainer calls on the plug-in's class, not on
an instance (training/plugins/base.py): the summary's lines, the command's later stages
and their steps, the next commands, and the retrain of a search that finished in an
earlier process, read from its files. It imports no TensorFlow, so a finished command is
answered in well under a second (training/setup/finished.py); `ParSearch` (plugin.py)
inherits it. The registration names it (`Registration.report`).
"""

import os

from absl import logging

from runstore import run_dir
from training.plugins.base import Plugin
from training.plugins.par_search import summaries as arch_summaries
from training.plugins.par_search.config import check_started_retrain
from training.plugins.par_search.retrain import retrain_config


class ParSearchReport(Plugin):
    """The search's class-level hooks (see the module docstring)."""

    @classmethod
    def summary_lines(cls, config, results):
        return arch_summaries.result_lines(config, results)

    @classmethod
    def closing_lines(cls, results):
        return arch_summaries.pipeline_lines(results)

    @classmethod
    def later_steps(cls, config, train_records):
        return arch_summaries.later_steps(config, train_records)

    @classmethod
    def plan_lines(cls, config, train_records):
        return arch_summaries.plan_lines(config, train_records)

    @classmethod
    def next_commands(cls, config, results):
        return arch_summaries.next_commands(config, results)

    @classmethod
    def finished_follow_up(cls, config, results):
        """The retrain of a search that finished earlier, from its metrics.json: its derived
        architecture, when `follow_up` would have retrained it (decided, or ended at its
        planned step with --stop_rule=stable)."""
        search = config.search
        derived = results.get("architecture")
        searched = getattr(config.model, "architecture", None) == "supernet"
        decided = (results.get("derivation") or {}).get("decided_step") is not None
        if not (searched and search.then_retrain and isinstance(derived, str)):
            return None
        if not decided and search.stop_rule != "stable":
            return None
        follow = retrain_config(config, derived)
        check_started_retrain(follow.model_dir, follow.recipe)
        return follow

    @classmethod
    def merge_follow_up(cls, config, results, followed):
        """Adds the retrained network's best and last results to the search's metrics.json."""
        results = dict(results)
        results["retrain"] = {"model_dir": os.path.normpath(config.model_dir) + "_retrain",
                              "architecture": followed.get("architecture"),
                              **{k: followed[k] for k in ("best", "last") if k in followed}}
        path = os.path.join(config.model_dir, run_dir.METRICS_FILE)
        if os.path.exists(path):
            run_dir.atomic_write_json(path, results)
        for name, run in (("search (supernet)", results), ("derived, retrained", followed)):
            best = run.get("best") or run.get("last")
            if best:
                logging.info("%s %s: best valid ppl %.2f (step %d), test ppl %.2f", name,
                             run.get("architecture"), best["valid"]["perplexity"],
                             best["step"], best["test"]["perplexity"])
        return results
