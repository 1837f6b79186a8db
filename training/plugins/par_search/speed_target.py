"""The derivation under a speed target (`--search_speed_target=X`).

Without a target a search derives, per block, its most probable candidate
(derive.py). With one, it derives the most probable architecture whose forward
FLOPs per token are at most 1/X of those of the Transformer-XL of the same depth
(the derivation report's `relative_flops`, the FLOPs of
model/transformer_xl/flops.py):

    maximise  sum over blocks b of log p_b(choice_b)
    subject to  relative_flops(choices) <= 1 / X,  frozen blocks keep their choice.

When the argmax already meets the budget it is the answer, so the derivation
differs from the plain one only when it has to.

The solution is exact, by a dynamic program over the blocks. Every block of a
type costs the same FLOPs (flops.py sums one cost per block type), so an
architecture's FLOPs depend only on how many blocks take each candidate. The
program runs over the blocks keeping, for every vector of candidate counts
reached so far, the most probable choice of the blocks so far; of the complete
count vectors, the most probable one that fits is the answer. States: at most
C(num_blocks + C - 1, C - 1) count vectors for C candidates (15 for 4 blocks of
"afi", 561 for 32), so num_blocks * states * C steps; the FLOPs are counted (by
derive.derivation_report itself, so the budget is the report's own number)
only for complete vectors, most probable first, until one fits. No
discretisation, no enumeration of the C^num_blocks strings.

Config time (`SearchConfig.check_run`): the cheapest architecture (every block
its cheapest candidate, identity for "afi") is the fastest there is; a target
beyond it is refused before any work. During the search, progressive freezing
does not freeze a block to a choice that would leave no architecture within the
budget (`SpeedTarget.reachable`), so a frozen block always keeps its choice.

Imports no TensorFlow.
"""

import functools
import math

import numpy as np

from training.plugins.par_search import derive

# log(0) guard: a probability that underflowed to 0 still has a finite log.
_TINY = np.finfo(np.float64).tiny


def log_probability(arch_probs, architecture, candidates):
    """sum over blocks of log p_b(architecture[b]), for [num_blocks, C] probabilities."""
    log_p = np.log(np.maximum(np.asarray(arch_probs, np.float64), _TINY))
    return float(sum(log_p[b, candidates.index(letter)] for b, letter in enumerate(architecture)))


def most_probable_within(arch_probs, candidates, fits, frozen=None):
    """The most probable architecture that `fits` (the module docstring's program).

    Args:
        arch_probs: [num_blocks, C] probabilities over `candidates`.
        candidates: the candidate letters in the columns' order, e.g. "afi".
        fits: callable(architecture string) -> bool; must depend only on how many
            blocks take each candidate (true of the FLOPs).
        frozen: per block None or the index of the candidate it keeps; None: no
            block is frozen.

    Returns:
        (architecture, its log-probability `log_probability`), or None when no
        architecture fits. Among equally probable ones, the first found (blocks
        in order, candidates in their order).
    """
    log_p = np.log(np.maximum(np.asarray(arch_probs, np.float64), _TINY))
    num_blocks, num_choices = log_p.shape
    frozen = (None,) * num_blocks if frozen is None else tuple(frozen)
    best = {(0,) * num_choices: (0.0, "")}  # counts -> (log-probability, prefix)
    for block in range(num_blocks):
        choices = range(num_choices) if frozen[block] is None else (frozen[block],)
        reached = {}
        for counts, (score, prefix) in best.items():
            for k in choices:
                key = counts[:k] + (counts[k] + 1,) + counts[k + 1:]
                value = score + log_p[block, k]
                if key not in reached or value > reached[key][0]:
                    reached[key] = (value, prefix + candidates[k])
        best = reached
    for score, architecture in sorted(best.values(), key=lambda entry: -entry[0]):
        if fits(architecture):
            return architecture, float(score)
    return None


class SpeedTarget:
    """The FLOPs budget of `--search_speed_target` for one run's model and data shape.

    Args:
        model_config: the supernet's ModelConfig (an even num_blocks).
        target: X >= 1: the derived network has at most 1/X of Transformer-XL's FLOPs.
        seq_len, mem_len, batch_size: what the FLOPs are counted for, as the
            derivation report counts them (the run's).
    """

    def __init__(self, model_config, target, seq_len, mem_len, batch_size):
        self.model_config = model_config
        self.target = float(target)
        self.budget = 1.0 / self.target
        self.seq_len, self.mem_len, self.batch_size = seq_len, mem_len, batch_size
        self.flag = f"--search_speed_target={self.target:g}"
        self._relative = {}
        if model_config.num_blocks % 2:
            raise ValueError(
                f"{self.flag} compares with the Transformer-XL of the same depth (an attention "
                f"and a dense block per layer), but --num_blocks={model_config.num_blocks} is "
                "odd: use an even --num_blocks or drop --search_speed_target")

    @classmethod
    def for_run(cls, config):
        """The target of TrainConfig `config`, or None when it has none."""
        target = config.search.search_speed_target
        if not target:
            return None
        return cls(config.model, target, config.seq_len, config.model.mem_len, config.batch_size)

    def _report(self, arch_probs, architecture=None, untrained=None):
        return derive.derivation_report(
            self.model_config, arch_probs, self.seq_len, self.mem_len,
            batch_size=self.batch_size, untrained=untrained, architecture=architecture)

    def relative_flops(self, architecture):
        """The derivation report's relative_flops of `architecture` (cached: the freezing
        rule asks again every step a block waits)."""
        if architecture not in self._relative:
            n, c = self.model_config.num_blocks, len(self.model_config.candidates)
            uniform = np.full((n, c), 1.0 / c)  # the report's probabilities: unused here
            self._relative[architecture] = self._report(uniform, architecture)["relative_flops"]
        return self._relative[architecture]

    def fits(self, architecture):
        return self.relative_flops(architecture) <= self.budget

    @functools.cached_property
    def cheapest(self):
        """The candidate letter of the fewest FLOPs (identity for "afi")."""
        n = self.model_config.num_blocks
        return min(self.model_config.candidates, key=lambda k: self.relative_flops(k * n))

    def reachable(self, pattern):
        """Whether some architecture with the letters of `pattern` (a letter per block,
        None where the block is free) fits: the free blocks at their cheapest."""
        return self.fits("".join(self.cheapest if k is None else k for k in pattern))

    def check_reachable(self):
        """Raises ValueError (one line naming the flag and the most it can reach) when
        not even the cheapest architecture fits."""
        fastest = self.cheapest * self.model_config.num_blocks
        if self.fits(fastest):
            return
        relative = self.relative_flops(fastest)
        ceiling = 1.0 / relative
        fix = (f"give --search_speed_target <= {math.floor(ceiling * 100) / 100:g}"
               if ceiling >= 1 else "drop --search_speed_target")
        raise ValueError(
            f"{self.flag} cannot be met: the fastest architecture of the candidates "
            f"'{self.model_config.candidates}', {fastest}, is {ceiling:.2f}x Transformer-XL "
            f"({relative:.4f} of its forward FLOPs per token, embedding and output layer "
            f"included): {fix}")

    def derivation_report(self, arch_probs, frozen=None, untrained=None):
        """derive.derivation_report of the most probable architecture within the budget,
        with a "speed_target" entry.

        Args:
            arch_probs: [num_blocks, C] probabilities over the model's candidates.
            frozen: per block None or the index of the candidate it is frozen to.
            untrained: as in derive.derivation_report.

        Returns:
            The report; its "speed_target" dict: target, max_relative_flops (1/target),
            argmax (the unconstrained derivation: per block the most probable
            candidate, a frozen block its choice), argmax_relative_flops,
            argmax_meets_target, log_probability (of the derived architecture),
            argmax_log_probability, log_probability_given_up (their difference, >= 0),
            frozen_blocks (the blocks that kept their frozen choice).

        Raises:
            ValueError: no architecture fits (the frozen blocks alone exceed the budget).
        """
        candidates = self.model_config.candidates
        # The argmax per block, a frozen block its choice (the model's derived_architecture).
        argmax = "".join(candidates[k if f is None else f] for k, f in zip(
            np.argmax(arch_probs, axis=-1), frozen or (None,) * len(arch_probs)))
        plain = self._report(arch_probs, argmax, untrained)
        meets = plain["relative_flops"] <= self.budget
        if meets:
            report = plain
        else:
            found = most_probable_within(arch_probs, candidates, self.fits, frozen)
            if found is None:
                raise ValueError(f"{self.flag}: no architecture keeping the frozen blocks "
                                 f"{frozen} fits in {self.budget:.4f} of Transformer-XL's FLOPs")
            report = self._report(arch_probs, found[0], untrained)
        chosen = log_probability(arch_probs, report["architecture"], candidates)
        best = log_probability(arch_probs, argmax, candidates)
        report["speed_target"] = {
            "target": self.target, "max_relative_flops": self.budget, "argmax": argmax,
            "argmax_relative_flops": plain["relative_flops"], "argmax_meets_target": meets,
            "log_probability": chosen, "argmax_log_probability": best,
            "log_probability_given_up": max(best - chosen, 0.0),
            "frozen_blocks": [b for b, k in enumerate(frozen or ()) if k is not None]}
        return report
