"""What AI.EMBED and AI.SIMILARITY share: their request (the embedding model, not the LLM) and
the vendors' ways of naming a model, which aisql notes and does not follow.

BigQuery names the embedding model with `endpoint => 'text-embedding-005'` or `model =>
'embeddinggemma-300m'`, Snowflake as the first argument of AI_EMBED or in AI_SIMILARITY's config
object. aisql embeds with the session's one embedding model (`--embed-model`), so a named model
is accepted with a note saying which model answered — a deliberate deviation: vectors of another
model would not be comparable with the cached ones anyway.
"""

from __future__ import annotations

from typing import ClassVar

from sqlglot import exp

from aisql.engine.model.prompt_format import Framing
from aisql.errors import BindError
from aisql.functions import arguments
from aisql.functions.base import AIFunction, Options, Request, Task

# BigQuery's AI.EMBED arguments that shape the request for its models; noted and ignored here.
IGNORED = {
    "task_type": "an embedding task type of Vertex AI models",
    "title": "a document title for Vertex AI models",
    "model_params": "parameters of a Vertex AI model",
    "connection_id": "a BigQuery connection; aisql runs its own embedding model",
}


class EmbeddingFunction(AIFunction):
    """A function answered from the embedding model's vectors."""

    request = Request.EMBED
    duckdb_name = None  # not in aisql.register: its vectors need the planned path's embedding model
    content_names: ClassVar[tuple[str, ...]]

    def task(self, options: Options) -> Task:
        return Task(self, Framing(system=None))

    def read_contents(self, spelling: str, positional: list[exp.Expression], named: dict[str, exp.Expression]):
        """(contents, notes): the content arguments, positional or named (`content1 => ...`), and
        a note for each vendor argument accepted but not followed."""
        notes: list[str] = []
        model = None
        if spelling.upper().startswith("AI_") and len(positional) > len(self.content_names):
            first = positional[0]
            if isinstance(first, exp.Literal) and first.is_string:  # Snowflake: AI_EMBED('model', text)
                model = positional.pop(0).this
        for key in ("endpoint", "model"):
            if key in named:
                node = named.pop(key)
                value = arguments.literal_value(node)
                if not isinstance(value, str) or not value.strip():
                    raise BindError(f"{spelling}: {key} must be a model name in quotes, got {node.sql(dialect='duckdb')}")
                model = value
        for key, meaning in IGNORED.items():
            if key in named:
                named.pop(key)
                notes.append(f"{spelling}: {key} ignored ({meaning})")
        if model is not None:
            notes.append(f"{spelling}: model {model!r} named in the query; aisql embeds with its --embed-model")
        contents = []
        for index, name in enumerate(self.content_names):
            if name in named:
                contents.append(named.pop(name))
            elif positional:
                contents.append(positional.pop(0))
            else:
                raise BindError(f"{spelling} needs {len(self.content_names)} content argument(s), got {index}", hint=f"e.g. {self.signature_hint}")
        return contents, notes

    def options_from_values(self, *values) -> Options:
        return Options()
