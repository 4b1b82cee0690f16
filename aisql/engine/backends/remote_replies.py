"""Reading an OpenAI-compatible server's replies with every field checked (issue 58).

The openai client builds its response objects without validating them, so a server that answers
`top_logprobs` as a list, a logprob as a string or NaN, `usage` with strings or `text` as a number
hands those values straight to the caller. Every value the remote backend uses is read here:
a value of the wrong shape is one `ModelError` naming the server, the endpoint and the field —
never a crash, and never a number stored as an answer (a NaN logprob cached as a coin toss
would be served on every later run).
"""

from __future__ import annotations

import math
from typing import Any

from aisql.errors import ModelError

MODELS_LISTED = 20  # names shown when a server does not serve the model asked for
FIELD_SHOWN = 60  # characters of a bad value shown in an error


class ReplyReader:
    """The replies of one server: `base_url` names it in every error."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def fail(self, path: str, field: str, value: Any, expected: str) -> ModelError:
        shown = repr(value)
        if len(shown) > FIELD_SHOWN:
            shown = shown[:FIELD_SHOWN] + "..."
        return ModelError(
            f"the server at {self.base_url} did not answer {path} as an OpenAI-compatible server does: {field} {shown} is not {expected}",
            hint="the server is not OpenAI-compatible in this field; point openai:NAME@URL at `aisql serve`, vLLM or llama.cpp's server",
        )

    # ---- /models -------------------------------------------------------------------------------
    def model_card(self, models: Any, name: str) -> dict:
        """The card of `name` among a /models listing; a clear error where it is not served."""
        if not isinstance(models, list):
            raise self.fail("/models", "data", models, "a list of models")
        ids = []
        for model in models:
            model_id = getattr(model, "id", None) if not isinstance(model, dict) else model.get("id")
            if not isinstance(model_id, str):
                raise self.fail("/models", "a model id", model_id, "a string")
            if model_id == name:
                return model.model_dump() if hasattr(model, "model_dump") else dict(model)
            ids.append(model_id)
        shown = ", ".join(ids[:MODELS_LISTED]) or "none"
        if len(ids) > MODELS_LISTED:
            shown += f" and {len(ids) - MODELS_LISTED:,} more"
        raise ModelError(f"the server at {self.base_url} does not serve {name!r} (it serves: {shown})")

    def max_model_len(self, card: dict) -> int | None:
        value = card.get("max_model_len")
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail("/models", "max_model_len", value, "a positive number of tokens")
        return value

    # ---- /completions --------------------------------------------------------------------------
    def choice(self, response: Any) -> Any:
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list) or not choices:
            raise self.fail("/completions", "choices", choices, "a list of one choice or more")
        return choices[0]

    def text(self, choice: Any, limit: int | None = None) -> str:
        """The choice's text; at most `limit` characters of it (a server that sends megabytes for
        a few tokens is not read whole)."""
        text = getattr(choice, "text", None)
        if text is None:
            return ""
        if not isinstance(text, str):
            raise self.fail("/completions", "text", text, "a string")
        return text if limit is None else text[:limit]

    def finish_reason(self, choice: Any) -> str | None:
        reason = getattr(choice, "finish_reason", None)
        return reason if isinstance(reason, str) else None

    def logprobs(self, choice: Any) -> Any:
        return getattr(choice, "logprobs", None)

    def tokens(self, logprobs: Any) -> list[str]:
        tokens = getattr(logprobs, "tokens", None) if logprobs is not None else None
        if tokens is None:
            return []
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise self.fail("/completions", "logprobs.tokens", tokens, "a list of strings")
        return tokens

    def logprob(self, value: Any, field: str) -> float:
        """A log-probability: a number <= 0 (a little above 0 is rounding), -inf for None."""
        if value is None:
            return -math.inf
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail("/completions", field, value, "a number")
        value = float(value)
        if math.isnan(value) or value > 1e-3:
            raise self.fail("/completions", field, value, "a log-probability (a number <= 0)")
        return min(value, 0.0)

    def token_logprobs(self, logprobs: Any) -> list[float]:
        values = getattr(logprobs, "token_logprobs", None) if logprobs is not None else None
        if values is None:
            return []
        if not isinstance(values, list):
            raise self.fail("/completions", "logprobs.token_logprobs", values, "a list of numbers")
        return [self.logprob(v, "a token logprob") for v in values]

    def top_logprobs(self, logprobs: Any) -> dict[str, float]:
        """The first position's top logprobs as {token text: logprob}; {} where none came."""
        tops = getattr(logprobs, "top_logprobs", None) if logprobs is not None else None
        if not tops:
            return {}
        if not isinstance(tops, list):
            raise self.fail("/completions", "logprobs.top_logprobs", tops, "a list with one mapping per position")
        first = tops[0]
        if first is None:
            return {}
        if not isinstance(first, dict):
            raise self.fail("/completions", "logprobs.top_logprobs[0]", first, "a mapping from token to logprob")
        read = {}
        for token, value in first.items():
            if not isinstance(token, str):
                raise self.fail("/completions", "a top_logprobs token", token, "a string")
            read[token] = self.logprob(value, f"the top logprob of {token!r}")
        return read

    def usage(self, response: Any) -> tuple[int, int, int] | None:
        """(prompt tokens, completion tokens, cached prompt tokens), or None where the server
        reports no usable usage (counts only: answers never depend on them)."""
        usage = getattr(response, "usage", None)
        if usage is None:
            return None
        prompt, completion = getattr(usage, "prompt_tokens", None), getattr(usage, "completion_tokens", None)
        details = getattr(usage, "prompt_tokens_details", None)
        cached = getattr(details, "cached_tokens", 0) if details is not None and not isinstance(details, dict) else (details or {}).get("cached_tokens", 0)
        counts = (prompt, completion, cached or 0)
        if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
            return None
        return counts
