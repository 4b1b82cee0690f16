"""AI.SIMILARITY(content1, content2) -> DOUBLE: the cosine similarity of the two texts' embedding
vectors (BigQuery AI.SIMILARITY, Snowflake AI_SIMILARITY).

Planned, it is never one model call per pair: each side's distinct texts are embedded once
(shared with AI.EMBED through the result cache) and the similarity of a vector of pairs is one
vectorised product (aisql.executor.node.embedding_runtime). A join `ON AI.SIMILARITY(a.x, b.y) > t` or
`ORDER BY AI.SIMILARITY(...) DESC LIMIT k` over n x m pairs embeds n + m texts.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from aisql.errors import BindError
from aisql.functions import arguments
from aisql.functions.base import Options
from aisql.functions.embedding_arguments import EmbeddingFunction


class AiSimilarity(EmbeddingFunction):
    name = "SIMILARITY"
    spellings = ("AI.SIMILARITY", "AI_SIMILARITY")
    sqlglot_nodes = (exp.AISimilarity,)
    sql_type = "DOUBLE"
    contents = 2
    content_names = ("content1", "content2")
    signature_hint = "AI.SIMILARITY(r.review_text, m.title)"

    def bind_arguments(self, spelling, positional, named):
        positional, named = list(positional), dict(named)
        for index, alias in ((1, "input1"), (2, "input2")):  # Snowflake's argument names
            if alias in named:
                named[f"content{index}"] = named.pop(alias)
        notes: list[str] = []
        if len(positional) == 3 and isinstance(positional[2], exp.Struct):  # Snowflake's config object
            config = positional.pop(2)
            for item in config.expressions:
                key = item.this.name.lower() if hasattr(item, "this") else ""
                value = arguments.literal_value(item.expression) if hasattr(item, "expression") else None
                if key != "model":
                    raise BindError(f"{spelling}: unknown config key {key!r}", hint="the config object takes 'model'")
                notes.append(f"{spelling}: model {value!r} named in the query; aisql embeds with its --embed-model")
        contents, more = self.read_contents(spelling, positional, named)
        vendor = arguments.read_vendor_arguments(spelling, named)
        hints = self.read_hints_and_finish(spelling, positional, named)
        vendor = dataclasses.replace(vendor, notes=vendor.notes + tuple(notes + more))
        return exp.Tuple(expressions=contents), Options(), hints, vendor


FUNCTION = AiSimilarity()
