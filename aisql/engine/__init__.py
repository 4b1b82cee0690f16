"""Embedded inference engine: token ids in, label scores and generations out. Knows no SQL.

The request and result types load with the package; the loader (`load_engine`, `EngineOptions`,
`DEFAULT_MODEL`) on first use, so code that only needs a framing or a request type — the SQL
front end through `aisql.functions` — never imports model-loading code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aisql.lazy import lazy_exports

from aisql.engine.base import (
    Engine,
    EngineStats,
    GenerateRequest,
    Generation,
    LabelScores,
    ModelInfo,
    ScoreRequest,
)

_LAZY = {"DEFAULT_MODEL": "aisql.engine.model.resolving", "EngineOptions": "aisql.engine.options", "load_engine": "aisql.engine.model.loader"}

if TYPE_CHECKING:  # pragma: no cover
    from aisql.engine.model.loader import load_engine
    from aisql.engine.model.resolving import DEFAULT_MODEL
    from aisql.engine.options import EngineOptions

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


__getattr__ = lazy_exports("aisql.engine", _LAZY, globals())
