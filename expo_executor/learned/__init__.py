"""The learned runtime model (issue 32): a censored (Tobit) model of log-runtime with fixed
effects for the parameters (monotone in a declared hardness order), a random effect shared by
the jobs of one group (every parameter but the last noise column) and normal noise, fitted
online from a family's finished jobs. It implements ``core.runtime_model.RuntimeModel``.

- ``tobit_fit``: the EM fit (numpy and scipy, imported lazily, inside its functions);
- ``cells``: the fixed effects' cells, the declared order over them, its monotone projection
  and where the data disagrees with it;
- ``model``: ``LearnedModel`` (observe, predict, rank, persistence), ``model_from_dict`` and
  ``model_factory`` (what ``--expocloud-hardness-model learned`` builds a family's model with);
- ``remaining``: what the undecided jobs will cost, drawn jointly (cells' and groups' effects
  shared): the estimate runs show and the replay checks.

It may import the core only (``core``); numpy and scipy only inside functions, so that a run
without a model never loads them.
"""

from expo_executor.learned.model import model_factory

__all__ = ["model_factory"]
