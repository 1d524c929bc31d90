"""The history import's mapping of Determined's objects, without a database: what is read of
them, the bounds, the metrics kept and the model definition checked."""

from __future__ import annotations

import base64
import io
import tarfile

import pytest

from services.errors import Invalid
from services.history_import import models as m
from services.history_import.experiments import model_definition
from services.history_import.mapping import stored_kind
from services.history_import.reports import _metric_values


def test_determined_objects_are_read_with_int64_strings_and_unknown_fields() -> None:
    checkpoint = m.parse(m.Checkpoint, {
        "uuid": "7c9c3a2e-8a39-4c42-8b1c-3f7a0a7d6c11", "resources": {"model.pt": "123"},
        "metadata": {"steps_completed": 100}, "state": "STATE_COMPLETED", "storageId": 3,
        "training": {"trialId": "12", "experimentId": 4, "searcherMetric": 0.1}}, "items[0]")
    assert checkpoint.resources == {"model.pt": 123} and checkpoint.training.trialId == 12


def test_a_bad_field_is_named_with_its_item() -> None:
    with pytest.raises(Invalid) as err:
        m.parse(m.Trial, {"id": 1, "experimentId": 2, "state": "STATE_COMPLETED",
                          "startTime": "yesterday"}, "items[3]")
    assert err.value.details[0].startswith("items[3].startTime:")


def test_json_is_bounded_in_depth_and_size() -> None:
    deep: dict[str, object] = {}
    node = deep
    for _ in range(40):
        node["a"] = {}
        node = node["a"]  # type: ignore[assignment]
    assert m.json_problem(deep) == f"nested deeper than {m.MAX_JSON_DEPTH} levels"
    assert "more than" in (m.json_problem({"x": "y" * m.MAX_JSON_BYTES}) or "")
    with pytest.raises(Invalid) as err:
        m.parse(m.Model, {"id": 1, "name": "n", "metadata": deep}, "items[0]")
    assert err.value.details[0].startswith("items[0].metadata:")


def test_metrics_keep_what_the_apis_own_reports_keep() -> None:
    assert _metric_values({"avg_metrics": {"loss": 0.5, "acc": "NaN", "tag": "a",
                                           "nested": {"x": 1}},
                           "batch_metrics": [{"loss": 0.4}]}) == (
        {"loss": 0.5, "acc": None, "tag": "a"}, 1)
    assert _metric_values({"gpu_util": 0.9}) == ({"gpu_util": 0.9}, 0)  # a generic group's


def test_model_definitions_are_checked_as_tgz() -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        info = tarfile.TarInfo("train.py")
        info.size = 4
        archive.addfile(info, io.BytesIO(b"pass"))
    tgz = base64.b64encode(buffer.getvalue()).decode()
    assert model_definition(tgz, "items[0].modelDefinition") == (buffer.getvalue(), 4)
    assert model_definition(None, "x") is None
    for bad, problem in (("not base64!", "not base64"),
                         (base64.b64encode(b"plain").decode(), "not a .tar.gz")):
        with pytest.raises(Invalid) as err:
            model_definition(bad, "items[0].modelDefinition")
        assert err.value.details == [f"items[0].modelDefinition: {problem}"]


def test_kinds_are_taken_singular_or_plural() -> None:
    assert stored_kind("model-versions") == stored_kind("model-version") == "model-version"
    with pytest.raises(Invalid):
        stored_kind("webhooks")
