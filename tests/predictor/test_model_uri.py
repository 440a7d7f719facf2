"""MLflow model URIs resolve against a real local sqlite store: a store that does not exist is
refused (and not created), an artefact with several ONNX files is refused unless its MLmodel
names one, and the registry version a URI resolved to is reported."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from kvcast.features import build_spec
from kvcast.features.config import FeatureConfig
from kvcast.predictor.model_meta import ModelFormatError, ModelMeta
from kvcast.predictor.model_uri import environment_kept, fetch_model
from kvcast.predictor.scorer import OnnxScorer
from kvcast.training.export import with_metadata
from kvcast.training.models.onnx_graph import GraphBuilder

SPEC = build_spec(FeatureConfig())


def rule_model(kind: str) -> onnx.ModelProto:
    """A real kvcast model (raw score: feature 0) whose kind names it."""
    g = GraphBuilder(len(SPEC))
    return with_metadata(g.build(g.op("Identity", [g.column(0)]), kind), ModelMeta(kind, SPEC))


def log_folder(uri: str, folder: Path, name: str) -> str:
    """Log ``folder`` as a run's ``model`` artefacts and register it; the new version."""
    import mlflow
    from mlflow import MlflowClient

    with environment_kept():
        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)
        with mlflow.start_run() as run:
            mlflow.log_artifacts(str(folder), "model")
            source = mlflow.get_artifact_uri("model")
        client = MlflowClient(uri, uri)
        try:
            client.get_registered_model(name)
        except mlflow.exceptions.MlflowException:
            client.create_registered_model(name)
        return str(client.create_model_version(name, source, run.info.run_id).version)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)
    return f"sqlite:///{tmp_path / 'mlruns.db'}"


def test_a_missing_sqlite_store_is_refused_in_one_line_and_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    db = tmp_path / "elsewhere.db"
    with pytest.raises(
        ModelFormatError, match=rf"^models:/kvcast-rule@champion: no MLflow store at {db}[^\n]*$"
    ):
        OnnxScorer.load("models:/kvcast-rule@champion", tracking_uri=f"sqlite:///{db}")
    assert not db.exists()
    monkeypatch.chdir(tmp_path)  # the default store, sqlite:///mlruns.db, is not created either
    with pytest.raises(ModelFormatError, match=r"no MLflow store at mlruns\.db"):
        OnnxScorer.load("models:/kvcast-rule/1")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_artefact_with_several_onnx_files_is_refused_listing_them(
    tmp_path: Path, store: str
) -> None:
    folder = tmp_path / "two"
    (folder / "sub").mkdir(parents=True)
    onnx.save_model(rule_model("first"), str(folder / "a.onnx"))
    onnx.save_model(rule_model("second"), str(folder / "sub" / "b.onnx"))
    version = log_folder(store, folder, "kvcast-two")
    with pytest.raises(
        ModelFormatError, match=r"^models:/kvcast-two/1: the artefact holds 2 \.onnx files "
        r"\(a\.onnx, sub/b\.onnx\) and no MLmodel naming one"
    ):  # fmt: skip
        OnnxScorer.load(f"models:/kvcast-two/{version}", tracking_uri=store)


def test_the_onnx_file_its_mlmodel_names_is_loaded_among_several(
    tmp_path: Path, store: str
) -> None:
    import mlflow.onnx

    folder = tmp_path / "flavored"
    mlflow.onnx.save_model(rule_model("named"), str(folder), save_as_external_data=False)
    (folder / "extra").mkdir()
    onnx.save_model(rule_model("stray"), str(folder / "extra" / "old.onnx"))
    version = log_folder(store, folder, "kvcast-flavored")
    assert OnnxScorer.load(f"models:/kvcast-flavored/{version}", tracking_uri=store).kind == "named"
    found = fetch_model(f"models:/kvcast-flavored/{version}", store)
    assert found.path.name == "model.onnx" and found.registry_version == version


def test_an_alias_resolves_once_to_the_version_it_names(tmp_path: Path, store: str) -> None:
    from mlflow import MlflowClient

    for kind in ("v-one", "v-two"):
        folder = tmp_path / kind
        folder.mkdir()
        onnx.save_model(rule_model(kind), str(folder / "model.onnx"))
        log_folder(store, folder, "kvcast-alias")
    MlflowClient(store, store).set_registered_model_alias("kvcast-alias", "champion", "1")
    found = fetch_model("models:/kvcast-alias@champion", store)
    assert found.registry_version == "1"
    assert OnnxScorer.load(found.path).kind == "v-one"


def test_a_registry_uri_is_shown_without_its_credentials() -> None:
    from kvcast.predictor.model_uri import shown_uri

    assert shown_uri("http://user:s3cretpw@127.0.0.1:9/x?y") == "http://***@127.0.0.1:9/x?y"
    assert shown_uri("https://tok@mlflow.example") == "https://***@mlflow.example"
    for plain in ("http://127.0.0.1:5000", "sqlite:///mlruns.db", "databricks", "file:///a@b/c"):
        assert shown_uri(plain) == plain


def test_a_registrys_error_is_told_without_its_credentials() -> None:
    """What MLflow says of an unreachable server names its URL, credentials included: the
    message shown hides them, wherever they are in it."""
    from kvcast.predictor.model_uri import shown_uri

    said = ("API request to http://user:s3cretpw@127.0.0.1:9/api/2.0/mlflow failed; "
            "retried https://tok@h/x")  # fmt: skip
    assert shown_uri(said) == ("API request to http://***@127.0.0.1:9/api/2.0/mlflow failed; "
                               "retried https://***@h/x")  # fmt: skip
