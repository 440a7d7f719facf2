"""Model hot reload: a model is swapped in while events keep flowing (none dropped); a model
built for a different feature spec, or for another horizon than the decider's window, is
refused with the difference named and the running model kept; a file that is not a kvcast
model is refused too. The digest reported is always that of the model being scored."""

from __future__ import annotations

import asyncio
import hashlib
import os

import onnxruntime
from onnx_models import write_recency_model, write_window_model
from sidecar_harness import AUTH, TOKEN, open_sidecar, settle, sidecar_config

from kvcast.features.config import FeatureConfig
from kvcast.features.spec import build_spec
from kvcast.serving.sidecar.model_slot import ModelSlot


def test_reload_swaps_the_model_without_dropping_events(tmp_path, run, model_path) -> None:
    other = write_recency_model(
        tmp_path / "v2.onnx", build_spec(FeatureConfig()), tau_ms=5_000.0, kind="recency-v2"
    )

    async def main() -> None:
        cfg = sidecar_config(tmp_path, model=str(model_path), token=TOKEN)
        async with open_sidecar(cfg) as (sc, client):
            first = (await client.get("/v1/model", headers=AUTH)).json()
            assert first["loaded"] and first["kind"] == "recency-test" and first["loads"] == 1

            async def post_events() -> int:
                sent = 0
                for i in range(40):
                    ev = {"type": "BlockStored", "block_hashes": [i], "block_size": 16}
                    r = await client.post("/v1/kv-events", json={"node": i % 2, "events": [ev]},
                                          headers=AUTH)  # fmt: skip
                    sent += r.json()["accepted"]
                    await asyncio.sleep(0)
                return sent

            load = client.post("/v1/model", json={"source": str(other)}, headers=AUTH)
            reply, sent = await asyncio.gather(load, post_events())
            assert reply.status_code == 200, reply.text
            assert reply.json()["kind"] == "recency-v2" and reply.json()["loads"] == 2
            assert reply.json()["digest"] != first["digest"]
            await settle(sc)
            assert sent == 40 and sc.keeper.applied == 40 and sc.queue.dropped == 0
            assert sc.slot.current.info.kind == "recency-v2"

    run(main())


def test_a_model_with_a_different_feature_spec_is_refused_naming_the_features(
    tmp_path, run, model_path
) -> None:
    spec = build_spec(FeatureConfig(heat_half_lives_ms=(5000.0, 60000.0)))
    wrong = write_recency_model(tmp_path / "wrong.onnx", spec, kind="other-spec")

    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path, model=str(model_path))) as (sc, client):
            r = await client.post("/v1/model", json={"source": str(wrong)})
            assert r.status_code == 409
            detail = r.json()["detail"]
            assert "feature spec differs" in detail
            assert "heat_30s" in detail and "heat_300s" in detail and "heat_60s" in detail
            state = (await client.get("/v1/model", headers=AUTH)).json()
            assert state["kind"] == "recency-test" and state["refused"] == 1
            missing = str(tmp_path / "missing.onnx")
            r = await client.post("/v1/model", json={"source": missing})
            assert r.status_code == 400 and "no such model file" in r.json()["detail"]
            assert r.json()["detail"].count(missing) == 1  # the source named once
            junk = tmp_path / "junk.onnx"
            junk.write_bytes(b"not an onnx file")
            r = await client.post("/v1/model", json={"source": str(junk)})
            assert r.status_code == 400 and "not a loadable ONNX model" in r.json()["detail"]
            assert sc.slot.current.info.kind == "recency-test" and sc.slot.refused == 3
            text = (await client.get("/metrics")).text
            assert "kvcast_sidecar_model_refusals_total 3.0" in text

    run(main())


def test_a_model_for_another_horizon_than_the_decider_window_is_refused(
    tmp_path, run, model_path
) -> None:
    fcfg = FeatureConfig.model_validate({"labels": {"horizon_ms": 120_000.0}})
    longer = write_recency_model(
        tmp_path / "h120.onnx", build_spec(FeatureConfig()), kind="horizon-120s",
        extra={"feature_config": fcfg.model_dump_json()},
    )  # fmt: skip

    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path, model=str(model_path))) as (_, client):
            r = await client.post("/v1/model", json={"source": str(longer)})
            assert r.status_code == 409
            assert "within 120000 ms" in r.json()["detail"]
            assert "window_ms is 30000" in r.json()["detail"]
            state = (await client.get("/v1/model", headers=AUTH)).json()
            assert state["kind"] == "recency-test" and state["refused"] == 1

    run(main())


def test_a_sequence_model_is_refused_and_the_running_one_kept(tmp_path, run, model_path) -> None:
    """The tick scores one feature row per block: a windowed model ([n, L, F], the TCN) would
    fail every tick after the swap."""
    seq = write_window_model(tmp_path / "tcn.onnx", build_spec(FeatureConfig()))

    async def main() -> None:
        async with open_sidecar(sidecar_config(tmp_path, model=str(model_path))) as (_, client):
            r = await client.post("/v1/model", json={"source": str(seq)})
            assert r.status_code == 400 and "a sequence model (window 4" in r.json()["detail"]
            state = (await client.get("/v1/model", headers=AUTH)).json()
            assert state["kind"] == "recency-test" and state["refused"] == 1

    run(main())


def test_the_digest_is_of_the_model_scored_even_if_the_file_is_replaced_mid_load(
    tmp_path, model_path, monkeypatch
) -> None:
    """The file is swapped for another model right after onnxruntime has built the session
    (as a training run rewriting it would): the digest must still be the served model's."""
    spec = build_spec(FeatureConfig())
    served = model_path.read_bytes()
    other = write_recency_model(tmp_path / "v2.onnx", spec, tau_ms=5_000.0, kind="recency-v2")
    real = onnxruntime.InferenceSession
    swaps = []

    def session_then_swap(*args, **kwargs):
        session = real(*args, **kwargs)
        if not swaps:
            os.replace(other, model_path)
            swaps.append(model_path)
        return session

    monkeypatch.setattr(onnxruntime, "InferenceSession", session_then_swap)
    info = ModelSlot(spec).load(str(model_path))
    assert swaps and info.kind == "recency-test"  # the session is of the file as it was
    assert info.digest == hashlib.sha256(served).hexdigest()[:16]


def test_a_swap_and_a_refusal_are_logged_with_the_model_they_concern(
    tmp_path, run, model_path, caplog
) -> None:
    """An operator reads in the sidecar's log when the model changed and what it is now (as
    for a mode switch), and why a load was refused; the refusal names the model asked for and
    says which spec is which."""
    spec = build_spec(FeatureConfig())
    other = write_recency_model(tmp_path / "v2.onnx", spec, tau_ms=5_000.0, kind="recency-v2")
    wrong = write_recency_model(
        tmp_path / "wrong.onnx", build_spec(FeatureConfig(heat_half_lives_ms=(5000.0, 60000.0)))
    )

    async def main() -> None:
        cfg = sidecar_config(tmp_path, model=str(model_path), token=TOKEN)
        async with open_sidecar(cfg) as (sc, client):
            first = sc.slot.current.info.digest
            caplog.clear()
            r = await client.post("/v1/model", json={"source": str(other)}, headers=AUTH)
            assert r.status_code == 200, r.text
            swapped = [x.getMessage() for x in caplog.records if x.levelname == "INFO"]
            assert any(str(model_path) in m and str(other) in m and first in m
                       and r.json()["digest"] in m and "recency-v2" in m
                       for m in swapped), swapped  # fmt: skip
            caplog.clear()
            r = await client.post("/v1/model", json={"source": str(wrong)}, headers=AUTH)
            assert r.status_code == 409
            detail = r.json()["detail"]
            assert detail.startswith(f"{wrong}: ") and "feature spec differs" in detail
            assert spec.digest in detail and "the other spec is the model's" in detail
            refused = [x.getMessage() for x in caplog.records if x.levelname == "WARNING"]
            assert any(str(wrong) in m and "refused" in m and str(other) in m
                       for m in refused), refused  # fmt: skip

    with caplog.at_level("INFO", logger="kvcast.serving.sidecar"):
        run(main())
