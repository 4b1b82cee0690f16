"""Embedded inference engine: token ids in, label scores and generations out. Knows no SQL."""

from aisql.engine.base import (
    Engine,
    EngineStats,
    GenerateRequest,
    Generation,
    LabelScores,
    ModelInfo,
    ScoreRequest,
)
from aisql.engine.loader import DEFAULT_MODEL, EngineOptions, load_engine

__all__ = [
    "DEFAULT_MODEL",
    "Engine",
    "EngineOptions",
    "EngineStats",
    "GenerateRequest",
    "Generation",
    "LabelScores",
    "ModelInfo",
    "ScoreRequest",
    "load_engine",
]
