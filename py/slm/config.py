"""The model's shape and architecture choices, in one frozen dataclass."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

ACTIVATIONS = ("relu", "gelu", "swiglu", "gelu_erf")  # gelu: tanh approximation; gelu_erf: exact
NORMS = ("layer", "rms")
NORM_PLACEMENTS = ("pre", "post")
POSITIONS = ("sinusoidal", "learned", "rope", "none")


@dataclass(frozen=True)
class Config:
    """Hyper-parameters of a decoder-only transformer.

    Symbols used throughout: d = n_model, h = n_heads, g = n_kv_heads, k = d / h (head size), f = d_ff,
    V = n_vocab, C = n_ctx, r = rope_dims (the coordinates of a head that RoPE turns).
    """

    n_vocab: int
    n_ctx: int
    n_model: int
    n_heads: int
    n_layers: int = 1
    d_ff: int | None = None  # None: 4 * n_model
    n_kv_heads: int | None = None  # None: n_heads (plain multi-head); fewer: grouped-query; 1: multi-query
    activation: str = "relu"
    norm: str = "layer"
    norm_placement: str = "pre"
    positions: str = "sinusoidal"
    rope_base: float = 10000.0
    rope_scale: float = 1.0
    rotary_dim: int | None = None  # None: RoPE turns all k coordinates of a head; fewer: only the first ones (NeoX)
    parallel_residual: bool = False  # True: y = x + Attn(N1(x)) + FFN(N2(x)), both sublayers reading x (NeoX)
    causal: bool = True
    bias: bool = False
    tied: bool = False
    eps: float = 1e-5

    def __post_init__(self) -> None:
        # Fill the derived defaults so that equal models have equal configs.
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.n_model)
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        self._validate()

    def _validate(self) -> None:
        for name in ("n_vocab", "n_ctx", "n_model", "n_heads", "n_layers", "d_ff", "n_kv_heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Config.{name} must be a positive integer, got {value!r}")
        for name, allowed in (
            ("activation", ACTIVATIONS),
            ("norm", NORMS),
            ("norm_placement", NORM_PLACEMENTS),
            ("positions", POSITIONS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"Config.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name in ("causal", "bias", "tied", "parallel_residual"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Config.{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("rope_base", "rope_scale", "eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise ValueError(f"Config.{name} must be a positive number, got {value!r}")
        if self.n_model % self.n_heads:
            raise ValueError(
                f"Config.n_model ({self.n_model}) must be divisible by Config.n_heads ({self.n_heads})"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"Config.n_kv_heads ({self.n_kv_heads}) must divide Config.n_heads ({self.n_heads})"
            )
        if self.positions == "rope" and self.rotary_dim is None and self.head_size % 2:
            raise ValueError(f"Config.positions='rope' needs an even head size, got {self.head_size}")
        if self.rotary_dim is not None:
            value = self.rotary_dim
            if self.positions != "rope":
                raise ValueError(f"Config.rotary_dim needs positions='rope', got positions={self.positions!r}")
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= self.head_size or value % 2:
                raise ValueError(f"Config.rotary_dim must be an even number from 2 to the head size "
                                 f"{self.head_size}, got {value!r}")
        if self.parallel_residual and self.norm_placement != "pre":
            raise ValueError("Config.parallel_residual needs norm_placement='pre' (both sublayers read the "
                             "normed block input)")
        if self.positions == "sinusoidal" and self.n_model % 2:
            raise ValueError(f"Config.positions='sinusoidal' needs an even n_model, got {self.n_model}")

    @property
    def head_size(self) -> int:
        return self.n_model // self.n_heads

    @property
    def rope_dims(self) -> int:
        """How many leading coordinates of each head RoPE turns: rotary_dim, or the whole head."""
        return self.head_size if self.rotary_dim is None else self.rotary_dim

    @property
    def group_size(self) -> int:
        """How many query heads share one key/value head."""
        return self.n_heads // self.n_kv_heads

    def replace(self, **changes: Any) -> Config:
        """A copy with some fields changed (re-validated). Derived defaults are re-derived when their
        source changes unless given explicitly."""
        fields = self.to_dict()
        if "n_model" in changes and "d_ff" not in changes and self.d_ff == 4 * self.n_model:
            fields["d_ff"] = None
        if "n_heads" in changes and "n_kv_heads" not in changes and self.n_kv_heads == self.n_heads:
            fields["n_kv_heads"] = None
        fields.update(changes)
        return Config(**fields)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        if not isinstance(data, dict):
            raise ValueError(f"a Config is read from a dict, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown Config field(s): {', '.join(unknown)}")
        try:
            return cls(**data)
        except TypeError as exc:  # a required field is missing
            raise ValueError(f"incomplete Config: {exc}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Config:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"Config JSON is not valid JSON: {exc}") from None
        return cls.from_dict(data)
