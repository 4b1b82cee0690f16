"""Which proxy answers for the oracle in approximate mode, and why (said by explain and the run).

A cascade pays when its proxy is far cheaper than the model it stands in for (BigQuery's
MINIMIZE_COST, Snowflake's cascades, LOTUS): `auto` picks a smaller LLM when the run's model has
at least PROXY_COST_RATIO times its decoder parameters (the cost per token scales with them),
else the embedding model. A user may name any model (`{'proxy': 'smollm2'}`, `--proxy-model`),
or `embeddings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PROXY_COST_RATIO = 4.0
AUTO_CANDIDATES = ("smollm2",)  # smaller LLMs auto may pick, when installed


@dataclass(frozen=True)
class ProxyChoice:
    spec: str | None  # the proxy LLM's model spec; None: the embedding model
    why: str

    @property
    def name(self) -> str:
        return self.spec or "embeddings"


def choose_proxy(
    requested: str,
    oracle_name: str,
    oracle_params: Callable[[], int | None],
    candidate_params: Callable[[str], int | None] = None,
) -> ProxyChoice:
    """The proxy for `requested` ("auto", "embeddings" or a model spec)."""
    if requested == "embeddings":
        return ProxyChoice(None, "the embedding model, as asked")
    if requested != "auto":
        return ProxyChoice(requested, "as asked")
    candidate_params = candidate_params or installed_decoder_params
    oracle = oracle_params()
    said = []
    for candidate in AUTO_CANDIDATES:
        if candidate == oracle_name:
            continue
        params = candidate_params(candidate)
        if params is None:
            said.append(f"{candidate} is not installed")
            continue
        if oracle is None:
            said.append(f"{oracle_name}'s size is unknown")
            continue
        ratio = oracle / params
        if ratio >= PROXY_COST_RATIO:
            return ProxyChoice(candidate, f"{oracle_name} has {ratio:.1f}x the decoder parameters of {candidate} (auto picks a smaller LLM at >= {PROXY_COST_RATIO:g}x)")
        said.append(f"{oracle_name} has only {ratio:.1f}x the decoder parameters of {candidate} (auto wants >= {PROXY_COST_RATIO:g}x)")
    return ProxyChoice(None, "the embedding model: " + ("; ".join(said) or f"no smaller LLM than {oracle_name} is known"))


def installed_decoder_params(spec: str) -> int | None:
    """Decoder parameters of an installed auto candidate, read from its GGUF header (no weights
    loaded, nothing converted); None when it is not installed."""
    if spec != "smollm2":
        return None
    from aisql.engine.model.gguf import smollm2_file

    path = smollm2_file()
    return None if path is None else gguf_decoder_params(path)


def gguf_decoder_params(path: Path) -> int:
    """Weights of the transformer blocks (embeddings and output head left out, as ModelProfile.params)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    return sum(int(t.n_elements) for t in reader.tensors if t.name.startswith("blk."))
