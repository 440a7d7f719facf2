"""Simulator configuration: the cluster, the model, the network, the SLO.

Defaults follow DESIGN.md section 4: Llama-3-70B with fp16 KV on 8-GPU H100 nodes, the
DistServe prefill form ``a + b*n + c*n^2`` calibrated to ~11k tokens/s at 2-8k tokens, 100 Gb/s
datacenter Ethernet at 87% efficiency between nodes, HBM only (lower tiers off), and the
length-aware SLO ``floor + factor x isolated prefill``. Derived values are properties.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from kvcast.config import FiniteConfig, load_config
from kvcast.features.traces.load_scaling import LoadScaling
from kvcast.llm import LLMSpec, get_llm
from kvcast.prefill import PrefillModel
from kvcast.simulator.policies.config import RoutingConfig

GIB = 1 << 30


class ModelConfig(FiniteConfig):
    preset: str = "llama-3-70b"  # a name from kvcast.llm.LLM_PRESETS
    kv_dtype: Literal["fp16", "bf16", "fp8"] = "fp16"
    weight_dtype: Literal["fp16", "bf16", "fp8"] = "bf16"

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, preset: str) -> str:
        get_llm(preset)  # (a field's error names model.preset)
        return preset

    @property
    def spec(self) -> LLMSpec:
        return get_llm(self.preset)


class DecodeModel(FiniteConfig):
    """Per-token decode time: ``step_ms + per_seq_ms x running decodes`` at admission."""

    step_ms: float = Field(30.0, ge=0)  # TP8 70B decode step
    per_seq_ms: float = Field(0.05, ge=0)  # marginal step cost per concurrent sequence


class TierConfig(FiniteConfig):
    """A lower storage tier of a node (host DRAM, local NVMe, shared NVMe-oF)."""

    capacity_gib: float = Field(0.0, ge=0)  # 0 disables the tier
    bandwidth_gbps: float = Field(25.0, gt=0)  # GB/s into HBM on a hit


class NodeConfig(FiniteConfig):
    gpus: int = Field(8, gt=0)
    hbm_gib_per_gpu: float = Field(80.0, gt=0)
    memory_utilization: float = Field(0.9, gt=0, le=1)  # vLLM gpu_memory_utilization
    activation_reserve_gib: float = Field(40.0, ge=0)  # activations, CUDA graphs, etc.
    kv_capacity_gib: float | None = Field(None, gt=0)  # set to override the derivation
    dram: TierConfig = TierConfig(capacity_gib=0.0, bandwidth_gbps=25.0)
    nvme: TierConfig = TierConfig(capacity_gib=0.0, bandwidth_gbps=5.0)
    prefill: PrefillModel = PrefillModel()
    decode: DecodeModel = DecodeModel()


class LinkTier(FiniteConfig):
    bandwidth_gbps: float = Field(gt=0)  # gigabits per second
    latency_us: float = Field(ge=0)
    efficiency: float = Field(0.87, gt=0, le=1)  # achieved fraction (Mooncake TE: ~87%)

    @property
    def bytes_per_ms(self) -> float:
        return self.bandwidth_gbps * 1e9 / 8 * self.efficiency / 1e3


class NetworkConfig(FiniteConfig):
    """Topology: nodes are grouped into hosts, racks and zones by consecutive ids."""

    nodes_per_host: int = Field(1, gt=0)
    nodes_per_rack: int = Field(1, gt=0)
    nodes_per_zone: int = Field(1024, gt=0)
    same_host: LinkTier = LinkTier(bandwidth_gbps=3600.0, latency_us=5.0)  # NVLink ~450 GB/s
    rack: LinkTier = LinkTier(bandwidth_gbps=400.0, latency_us=10.0)  # RDMA
    datacenter: LinkTier = LinkTier(bandwidth_gbps=100.0, latency_us=50.0)  # Ethernet
    cross_zone: LinkTier = LinkTier(bandwidth_gbps=25.0, latency_us=1000.0)


class SLOConfig(FiniteConfig):
    """Length-aware: ``floor_ms + factor x isolated_prefill_ms(input)``; or absolute."""

    mode: Literal["length_aware", "absolute"] = "length_aware"
    floor_ms: float = Field(100.0, ge=0)
    factor: float = Field(2.0, gt=0)
    ttft_ms: float = Field(2000.0, gt=0)  # used when mode == absolute
    target_attainment: float = Field(0.9, gt=0, le=1)  # for capacity search

    def as_summary(self) -> dict[str, float]:
        if self.mode == "absolute":
            return {"ttft_ms": self.ttft_ms}
        return {"floor_ms": self.floor_ms, "factor": self.factor}


class SimConfig(FiniteConfig):
    """Every number finite (FiniteConfig): an infinite capacity, step or latency is no cluster
    a run can end on."""

    nodes: int = Field(8, gt=0, le=1024)
    block_tokens: int | None = Field(None, gt=0)  # None: the trace's own block size
    seed: int = Field(0, ge=0)
    telemetry_period_ms: float = Field(1000.0, gt=0)
    # Spread requests sharing a quantised timestamp over the quantum: "auto" detects a
    # quantised trace (Mooncake's conversation trace: 3 s grid), "off" replays as recorded,
    # a number forces that quantum in ms. See kvcast.features.traces.dequantize.
    arrival_spread: Literal["auto", "off"] | float = "auto"
    # How a time-scale X raises the load: "arrivals" divides every arrival time by X (think
    # and tool time shrink too); "sessions" divides only the sessions' start times, each
    # session keeping its own gaps. See kvcast.features.traces.load_scaling.
    load_scaling: LoadScaling = "arrivals"
    model: ModelConfig = ModelConfig()
    node: NodeConfig = NodeConfig()
    network: NetworkConfig = NetworkConfig()
    slo: SLOConfig = SLOConfig()
    # Optional NVMe-oF pool shared by all nodes (0 = off): what falls out of a node's last
    # local tier lands here; a hit loads at bandwidth_gbps (GB/s per reading node).
    shared_pool: TierConfig = TierConfig(capacity_gib=0.0, bandwidth_gbps=5.0)
    routing: RoutingConfig = RoutingConfig()

    @field_validator("arrival_spread")
    @classmethod
    def _spread_quantum(cls, v: str | float) -> str | float:
        if not isinstance(v, str) and not v >= 0:  # finite already (FiniteConfig); not NaN
            raise ValueError("a quantum must be a number of ms >= 0")
        return v

    @model_validator(mode="after")
    def _timing_fits_the_model(self) -> SimConfig:
        """The default prefill and decode timings are those of the default model on the
        default node: another model with them would run at Llama-3-70B's speed unnoticed."""
        default = ModelConfig().preset
        given = self.node.model_fields_set
        if self.model.preset != default and not {"prefill", "decode"} <= given:
            missing = [f"node.{k}" for k in ("prefill", "decode") if k not in given]
            verb = "keeps" if len(missing) == 1 else "keep"
            keep = f"{' and '.join(missing)} {verb}"
            raise ValueError(
                f"model.preset is {self.model.preset}, but {keep} the timing calibrated to "
                f"{default} on {NodeConfig().gpus} GPUs: give node.prefill "
                f"(a_ms, b_ms_per_token, c_ms_per_token2) and node.decode (step_ms, per_seq_ms) "
                f"for it, as configs/simulator/llama3-8b-1gpu.yaml does"
            )
        self.kv_capacity_bytes()  # a node the model does not fit is refused here, not mid-run
        return self

    def kv_capacity_bytes(self) -> int:
        n = self.node
        if n.kv_capacity_gib is not None:
            return int(n.kv_capacity_gib * GIB)
        total = n.gpus * n.hbm_gib_per_gpu * GIB * n.memory_utilization
        weights = self.model.spec.weight_bytes(self.model.weight_dtype)
        free = int(total - weights - n.activation_reserve_gib * GIB)
        if free <= 0:
            raise ValueError(
                f"model {self.model.preset} does not fit: {n.gpus} x {n.hbm_gib_per_gpu} GiB "
                f"at memory_utilization {n.memory_utilization:g}, less its "
                f"{weights / GIB:.1f} GiB of {self.model.weight_dtype} weights and "
                f"activation_reserve_gib {n.activation_reserve_gib:g}, leaves no KV memory "
                f"(node.kv_capacity_gib sets it directly)"
            )
        return free

    def block_bytes(self, block_tokens: int) -> int:
        return self.model.spec.kv_bytes_per_block(block_tokens, self.model.kv_dtype)


def load_sim_config(path: str | Path | None = None) -> SimConfig:
    """Load a simulator config; ``None`` gives the embedded defaults."""
    return SimConfig() if path is None else load_config(SimConfig, path)
