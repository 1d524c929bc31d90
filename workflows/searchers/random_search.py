"""The random searcher: ``max_trials`` independent draws from one ``random.Random(seed)``."""

import random
from collections.abc import Mapping
from typing import Any

from workflows.searchers.hparams import sample_hparams

__all__ = ["random_trials"]


def random_trials(hparams: Mapping[str, Any], max_trials: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [sample_hparams(hparams, rng) for _ in range(max_trials)]
