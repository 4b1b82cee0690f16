"""AI.EMBED(content) -> FLOAT[n]: the embedding model's vector of a text (BigQuery AI.EMBED,
Snowflake AI_EMBED). n is the model's vector size (384 for the default all-MiniLM-L6-v2).

BigQuery returns STRUCT<result ARRAY<FLOAT64>, status STRING>; by the compatibility rule aisql
returns the vector itself, and `AI.EMBED(...).result` reads it (the binder's rule for `.result`).
Vectors are deduplicated by text and kept in the result cache under the embedding model's
fingerprint, so AI.SIMILARITY and AI.EMBED share them.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from aisql.functions.base import Options
from aisql.functions.embedding_arguments import EmbeddingFunction


class AiEmbed(EmbeddingFunction):
    name = "EMBED"
    spellings = ("AI.EMBED", "AI_EMBED")
    sqlglot_nodes = (exp.AIEmbed,)
    sql_type = "FLOAT[]"  # FLOAT[n] once the embedding model is known (result_type)
    content_names = ("content",)
    signature_hint = "AI.EMBED(review)"

    def bind_arguments(self, spelling, positional, named):
        positional, named = list(positional), dict(named)
        if "prompt" in named:
            named["content"] = named.pop("prompt")
        contents, notes = self.read_contents(spelling, positional, named)
        prompt, options, hints, vendor = super().bind_arguments(spelling, contents + positional, named)
        return prompt, options, hints, dataclasses.replace(vendor, notes=vendor.notes + tuple(notes))

    def result_type(self, options: Options, dimension: int | None = None):
        import pyarrow as pa

        if dimension is None:
            return "FLOAT[]", pa.list_(pa.float32())
        return f"FLOAT[{dimension}]", pa.list_(pa.float32(), dimension)


FUNCTION = AiEmbed()
