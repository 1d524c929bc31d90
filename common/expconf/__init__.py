"""The experiment configuration: the one model shared by the CLI, the API and the workflows.

Field names and defaults follow Determined's experiment config (``schemas/expconf/v0``), so that a
Determined config needs no change beyond the features Epochal has not built yet.

``parse_experiment_config`` reads YAML text and ``validate_experiment_config`` checks parsed data;
both raise ``ConfigError`` listing every problem at once as ``path.to.field: message``. The
normalized form, ``ExperimentConfig.model_dump(mode="json")``, is what travels to workflows and
agents; ``ExperimentConfig.model_validate`` reads it back unchanged.

One module per concern (`lengths`, `hyperparameters`, `searchers`, `resources`, `storage`,
`environment`, `experiment`, `determined`, `parsing`); import from the package. It is imported
inside Temporal workflows, so it stays pure: pydantic, stdlib and pyyaml.
"""

from common.expconf._base import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_VALUES,
    MAX_GRID_SIZE,
    MAX_HYPERPARAMETERS,
    MAX_TRIALS,
    ConfigError,
)
from common.expconf.determined import config_warnings, with_determined_defaults
from common.expconf.environment import BindMount, EnvironmentConfig, ReproducibilityConfig
from common.expconf.experiment import ExperimentConfig, planned_trials, profiling_enabled
from common.expconf.hyperparameters import (
    CategoricalHyperparameter,
    ConstHyperparameter,
    DoubleHyperparameter,
    Hyperparameter,
    HyperparameterGroup,
    IntHyperparameter,
    LogHyperparameter,
    hyperparameters_grid_size,
    iter_hyperparameters,
)
from common.expconf.lengths import LENGTH_UNITS, Length, SearcherLength
from common.expconf.parsing import (
    PLACEHOLDER_STORAGE,
    load_config_yaml,
    parse_experiment_config,
    parse_experiment_data,
    stored_config,
    validate_experiment_config,
    with_default_storage,
)
from common.expconf.resources import DEFAULT_SHM_SIZE, ResourcesConfig
from common.expconf.searchers import (
    SEARCHER_CONFIGS,
    AdaptiveAshaConfig,
    AsyncHalvingConfig,
    GridConfig,
    OptunaConfig,
    RandomConfig,
    SearcherConfig,
    SingleConfig,
)
from common.expconf.storage import (
    CheckpointStorageConfig,
    RetentionCounts,
    S3Config,
    SharedFSConfig,
)
from common.expconf.task import (
    TaskConfig,
    TaskResourcesConfig,
    task_config_warnings,
    validate_task_config,
)

__all__ = [
    "AdaptiveAshaConfig",
    "AsyncHalvingConfig",
    "BindMount",
    "CategoricalHyperparameter",
    "CheckpointStorageConfig",
    "ConfigError",
    "ConstHyperparameter",
    "DEFAULT_SHM_SIZE",
    "DoubleHyperparameter",
    "EnvironmentConfig",
    "ExperimentConfig",
    "GridConfig",
    "Hyperparameter",
    "HyperparameterGroup",
    "IntHyperparameter",
    "LENGTH_UNITS",
    "Length",
    "LogHyperparameter",
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "MAX_CONFIG_VALUES",
    "MAX_GRID_SIZE",
    "MAX_HYPERPARAMETERS",
    "MAX_TRIALS",
    "PLACEHOLDER_STORAGE",
    "OptunaConfig",
    "RandomConfig",
    "ReproducibilityConfig",
    "ResourcesConfig",
    "S3Config",
    "SEARCHER_CONFIGS",
    "SearcherConfig",
    "SearcherLength",
    "RetentionCounts",
    "SharedFSConfig",
    "SingleConfig",
    "TaskConfig",
    "TaskResourcesConfig",
    "config_warnings",
    "hyperparameters_grid_size",
    "iter_hyperparameters",
    "load_config_yaml",
    "parse_experiment_config",
    "parse_experiment_data",
    "planned_trials",
    "profiling_enabled",
    "stored_config",
    "task_config_warnings",
    "validate_experiment_config",
    "validate_task_config",
    "with_default_storage",
    "with_determined_defaults",
]
