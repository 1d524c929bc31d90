"""`checkpoint_storage`: a shared filesystem or S3, with the retention counts."""

from typing import Annotated, Literal

from pydantic import Discriminator, Field, Tag, field_validator

from common.expconf._base import NotActedOn, _fail, _keyed_tag, _Model


class RetentionCounts(_Model):
    """How many checkpoints the experiment's end keeps (Determined's defaults), on any
    storage: the one home of these defaults (activities/experiment_store.py reads them here)."""

    save_experiment_best: int = Field(default=0, ge=0)
    save_trial_best: int = Field(default=1, ge=0)
    save_trial_latest: int = Field(default=1, ge=0)


class SharedFSConfig(RetentionCounts):
    """Checkpoints in ``host_path/<uuid>/`` (or ``host_path/storage_path/<uuid>/``)."""

    type: Literal["shared_fs"] = "shared_fs"
    host_path: str = Field(min_length=1)
    storage_path: str | None = None
    # Determined's legacy keys; the storage is mounted at host_path in task containers.
    container_path: NotActedOn = None
    propagation: NotActedOn = None
    checkpoint_path: NotActedOn = None
    tensorboard_path: NotActedOn = None


class S3Config(RetentionCounts):
    """Checkpoints in ``s3://bucket/prefix/<uuid>/``: Epochal's harness uploads them through
    URLs the master presigns, Determined's Core API with boto3 (common/checkpoint_storage.py)."""

    type: Literal["s3"] = "s3"
    bucket: str = Field(min_length=1)
    access_key: str | None = None
    secret_key: str | None = None
    endpoint_url: str | None = None
    prefix: str | None = None

    @field_validator("prefix")
    @classmethod
    def _prefix_stays_inside(cls, value: str | None) -> str | None:
        if value is not None and ".." in value.split("/"):
            raise _fail(((), 'must not contain ".." as a path part'))
        return value


_STORAGE_TYPES = ("shared_fs", "s3")

CheckpointStorageConfig = Annotated[
    Annotated[SharedFSConfig, Tag("<shared_fs>")] | Annotated[S3Config, Tag("<s3>")],
    Discriminator(
        _keyed_tag("type", _STORAGE_TYPES),
        custom_error_type="storage_type",
        custom_error_message="unknown checkpoint storage type",
    ),
]

