"""RemoteEngine: the Engine interface over an OpenAI-compatible server (`aisql serve`, vLLM, ...).

`--model openai:NAME@BASE_URL`, e.g. `openai:Qwen/Qwen3-0.6B@http://gpu-box:8000/v1`. A batch
AI-SQL job can then share one server with other jobs and interactive users.

Prompts are sent as token ids, encoded locally with NAME's own tokenizer and prompt format (so
NAME must be resolvable here without weights: a Hugging Face id in the local cache, a directory,
or 'tiny') — exactly the ids the embedded engine would run. They are sent in the planner's order
with bounded concurrency, so requests sharing a prefix reach the server together and hit its
prefix cache; the openai client retries failed calls.

- Scoring: log P(label | prompt) = sum over the label's tokens of log P(token | prompt + the
  tokens before it), one `max_tokens=1` request per label token restricted to that token
  (`allowed_token_ids`, vLLM's extension, also served by `aisql serve`) whose reported logprob
  is the unrestricted one. The same full-likelihood score as the embedded engine. A server that
  ignores `allowed_token_ids` (llama.cpp's) is noticed on the first request (the token it
  answered is not the one asked) and scored otherwise: labels of one token each (AI.IF's Yes /
  No) from one request's top-20 logprobs at the answer's position (the end token biased away so
  that position is generated and reported; a label outside the top 20 gets the 20th's logprob,
  a bound), longer labels by echo — the prompt and the label sent together with `echo` and
  `logprobs`, the label's tokens' logprobs read back (llama-cpp-python's server needs
  `--logits_all true`; it is slow there: it sorts the vocabulary at every echoed position).
- Prompts: token ids; a server that accepts only text (llama-cpp-python's) gets the ids decoded
  with the same tokenizer, special tokens written out, which its tokenizer reads back.
- Generation: greedy completions of `max_tokens`, stopped at the model's end token.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from aisql.extras import install_hint
from aisql.engine.base import (
    EngineStats,
    GenerateRequest,
    Generation,
    LabelScores,
    ModelFacts,
    ModelInfo,
    ScoreRequest,
    logsumexp,
)
from aisql.engine.backends.remote_replies import ReplyReader
from aisql.engine.model.model_files import loader_failure
from aisql.engine.model.prompt_format import EncodesPrompts, PromptFormat
from aisql.errors import ModelError

DEFAULT_CONCURRENCY = 8
DEFAULT_REQUEST_TIMEOUT = 120.0  # seconds one request may wait for its answer (--request-timeout)
RETRIES = 2  # more tries after a lost connection or a 429 / 5xx answer; a request that timed out is not tried again
CHARS_PER_TOKEN = 64  # a completion's text is read up to max_tokens x this: no token is longer


def parse_remote_spec(spec: str) -> tuple[str, str]:
    """'openai:NAME@URL' -> (NAME, URL)."""
    body = spec[len("openai:") :]
    name, at, url = body.rpartition("@")
    if not at or not name or not url.startswith(("http://", "https://")):
        raise ModelError(
            f"cannot read the remote model {spec!r}",
            hint="write openai:NAME@BASE_URL, e.g. openai:tiny@http://127.0.0.1:8000/v1",
        )
    return name, url.rstrip("/")


def remote_fingerprint(spec: str) -> str:
    """The server's weights are unknown here: answers are cached per served name and URL."""
    name, url = parse_remote_spec(spec)
    return f"openai:{name}@{url}"


class RemoteEngine(EncodesPrompts):
    reads_states = False  # hidden states do not cross its API: labelled examples fit no probe
    pool = None  # one engine, not a worker pool (Engine.pool)

    def __init__(
        self,
        spec: str,
        tokenizer_directory: str,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        note: str | None = None,
        is_test: bool = False,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        try:
            import openai
        except ImportError:
            raise ModelError(
                "the openai backend needs the openai package, which is not installed",
                hint=install_hint("openai"),
            ) from None
        from transformers import AutoTokenizer

        self.name, self.base_url = parse_remote_spec(spec)
        self._openai = openai
        # Retries are ours (_complete): a request that timed out is not sent again, so a server
        # that accepts and never answers ends the run after request_timeout, not four times that.
        self.request_timeout = request_timeout
        self.client = openai.OpenAI(base_url=self.base_url, api_key=_api_key(), max_retries=0, timeout=request_timeout)
        self.replies = ReplyReader(self.base_url)
        self.concurrency = concurrency
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_directory)
        except Exception as err:  # whatever transformers raises on files that passed check_model_directory
            raise loader_failure(f"the tokenizer of {spec}", tokenizer_directory, err) from None
        self.format = PromptFormat(self.tokenizer)
        self._tokenizer_directory = tokenizer_directory
        card = self._model_card()
        max_context = self.replies.max_model_len(card) or min(getattr(self.tokenizer, "model_max_length", 4096), 1 << 20)
        self.info = ModelInfo(
            name=spec,
            source=self.base_url,
            device="remote",
            dtype="unknown",
            max_context=max_context,
            fingerprint=remote_fingerprint(spec),
            is_test_model=is_test,
            note=note,
        )
        self.stats = EngineStats()
        self._prompts_as_text = False  # set when the server refuses token-id prompts
        self._scoring: str | None = None  # "allowed" | "echo": decided by the first scoring request

    def _model_card(self) -> dict:
        try:
            models = self.client.models.list().data
        except self._openai.APITimeoutError:
            raise self._timed_out("/models") from None
        except self._openai.APIConnectionError:
            raise ModelError(
                f"cannot reach the model server at {self.base_url}", hint="is `aisql serve` (or vLLM) running there?"
            ) from None
        except self._openai.OpenAIError as err:
            raise ModelError(f"the model server at {self.base_url} failed: {_first_line(err)}") from None
        except (TypeError, ValueError, AttributeError):
            raise _not_openai(self.base_url, "/models") from None
        return self.replies.model_card(models, self.name)

    def facts(self) -> ModelFacts:
        from aisql.engine.model.facts import cached_profile

        # The server's dtype is unknown here; the shape (FLOPs, KV bytes) is costed in bfloat16.
        profile = cached_profile(self._tokenizer_directory, self.info.name, "bfloat16")
        return ModelFacts(format=self.format, profile=profile, encode_label=self.encode_label)

    def reset_cache(self) -> None:
        """The server's cache is the server's."""

    # ---- the Engine interface ----------------------------------------------------------------
    def score(self, requests: Sequence[ScoreRequest], *, reuse: bool = True) -> list[LabelScores]:
        if requests and self._scoring is None:
            self._decide_scoring(requests[0])
        results = [_normalized(values) for values in self._label_logprobs(list(requests))]
        self.stats.score_requests += len(requests)
        return results

    def _label_logprobs(self, requests: list[ScoreRequest]) -> list[list[float]]:
        """Each request's labels' log-likelihoods, by the way this server can be asked."""
        if self._scoring == "echo" and all(len(label) == 1 for r in requests for label in r.label_ids):
            return self._map(self._top_logprobs, requests)
        if self._scoring == "echo":
            echoed = iter(self._map(self._echo_logprob, [(tuple(r.prompt_ids), tuple(label)) for r in requests for label in r.label_ids]))
            return [[next(echoed) for _ in request.label_ids] for request in requests]
        jobs = [
            (tuple(r.prompt_ids) + tuple(label[:j]), label[j])
            for r in requests
            for label in r.label_ids
            for j in range(len(label))
        ]
        logprobs = iter(self._map(self._token_logprob, jobs))
        return [[sum(next(logprobs) for _ in label) for label in request.label_ids] for request in requests]

    def generate(self, requests: Sequence[GenerateRequest], *, reuse: bool = True, speculative: bool = True) -> list[Generation]:
        from aisql.engine.decoding.constrained import refuse_grammar

        refuse_grammar(requests, "a remote server")
        results = self._map(self._generate_one, list(requests))
        self.stats.generate_requests += len(requests)
        return results

    # ---- requests ----------------------------------------------------------------------------
    def _map(self, fn, items: list) -> list:
        """In the callers' (prefix) order, at most `concurrency` in flight."""
        if not items:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            return list(pool.map(fn, items))

    def _decide_scoring(self, request: ScoreRequest) -> None:
        """Does the server honour `allowed_token_ids`? Asked with the first label's first token:
        if the token it answers is another, score by echo."""
        token = request.label_ids[0][0]
        response = self._complete(tuple(request.prompt_ids), max_tokens=1, logprobs=0, extra_body={"allowed_token_ids": [token]})
        choice = self.replies.choice(response)
        tokens = self.replies.tokens(self.replies.logprobs(choice))
        answered = tokens[0] if tokens else self.replies.text(choice, CHARS_PER_TOKEN)
        self._scoring = "allowed" if answered == self.tokenizer.decode([token]) else "echo"

    def _token_logprob(self, job: tuple[tuple[int, ...], int]) -> float:
        prompt, token = job
        response = self._complete(prompt, max_tokens=1, logprobs=0, extra_body={"allowed_token_ids": [token]})
        values = self.replies.token_logprobs(self.replies.logprobs(self.replies.choice(response)))
        if not values:
            raise ModelError(
                f"the server at {self.base_url} returned no logprobs (it must support allowed_token_ids and logprobs)"
            )
        return values[0]

    TOP_LOGPROBS = 20

    def _top_logprobs(self, request: ScoreRequest) -> list[float]:
        """Each one-token label's logprob from the top logprobs of the answer's first position."""
        ends = {t for t in (self.tokenizer.eos_token_id, getattr(self.format, "end_token_id", None)) if isinstance(t, int)}
        response = self._complete(
            tuple(request.prompt_ids), max_tokens=1, logprobs=self.TOP_LOGPROBS, logit_bias={str(t): -100 for t in ends}
        )
        tops = self.replies.top_logprobs(self.replies.logprobs(self.replies.choice(response)))
        if not tops:
            raise ModelError(f"the server at {self.base_url} returned no top logprobs", hint="it must support logprobs on /v1/completions")
        spelled = [self.tokenizer.decode([label[0]]) for label in request.label_ids]
        if not any(s in tops for s in spelled):
            # Every label would get the floor and tie: never an answer (AI.IF would say TRUE for all).
            raise ModelError(
                f"none of the labels {', '.join(repr(s) for s in spelled)} is among the {len(tops)} tokens the server at "
                f"{self.base_url} ranked first for a prompt (it ranked {', '.join(repr(t) for t in list(tops)[:5])} ...)",
                hint=f"the server's tokenizer or prompt format differs from {self.name}'s (e.g. 'Yes' against ' Yes'): serve the same model files, "
                "or a server that takes allowed_token_ids (aisql serve, vLLM)",
            )
        # A label outside the top-k is at most the k-th's logprob: just below it, so a listed label
        # that is itself the k-th still ranks above one not listed (never a tie by construction).
        floor = min(tops.values()) - 1e-6
        return [tops.get(s, floor) for s in spelled]

    def _echo_logprob(self, job: tuple[tuple[int, ...], tuple[int, ...]]) -> float:
        """log P(label | prompt) from the logprobs the server echoes for the prompt's own tokens:
        the prompt and the label sent as one, the label's positions read (before the one token
        generated)."""
        prompt, label = job
        response = self._complete(prompt + label, max_tokens=1, logprobs=0, echo=True)
        values = self.replies.token_logprobs(self.replies.logprobs(self.replies.choice(response)))
        if len(values) < len(label) + 1:
            raise ModelError(
                f"the server at {self.base_url} echoed no prompt logprobs",
                hint="it must support echo with logprobs (llama-cpp-python's server: --logits_all true)",
            )
        return sum(values[-len(label) - 1 : -1])

    def _generate_one(self, request: GenerateRequest) -> Generation:
        response = self._complete(request.prompt_ids, max_tokens=request.max_tokens)
        choice = self.replies.choice(response)
        # No more than max_tokens is read: a server that sends megabytes for a few tokens is cut
        # before tokenizing (the text, then its tokens, to what was asked).
        limit = request.max_tokens * CHARS_PER_TOKEN
        text = self.replies.text(choice, limit=limit + 1)
        stopped = self.replies.finish_reason(choice) == "stop"
        if len(text) > limit:  # more than max_tokens can spell: the first max_tokens of it
            ids = self.tokenizer(text[:limit], add_special_tokens=False)["input_ids"][: request.max_tokens]
            text, stopped = self.tokenizer.decode(ids), False
        tokens = tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        usage = self.replies.usage(response)
        completion = min(usage[1], request.max_tokens) if usage else len(tokens)
        self.stats.generated_tokens += completion
        return Generation(
            token_ids=tokens, text=text.strip(), finish_reason="stop" if stopped else "length", steps=completion + stopped
        )

    def _complete(self, prompt: Sequence[int], **kwargs):
        sent = self._text_prompt(prompt) if self._prompts_as_text else list(prompt)
        for attempt in range(RETRIES + 1):
            try:
                response = self.client.completions.create(model=self.name, prompt=sent, temperature=0, **kwargs)
                self.replies.choice(response)
                break
            except self._openai.APITimeoutError:
                raise self._timed_out("/completions") from None
            except self._openai.APIConnectionError:
                if attempt == RETRIES:
                    raise ModelError(f"lost the connection to the model server at {self.base_url}") from None
            except self._openai.APIStatusError as err:
                if not self._prompts_as_text and err.status_code in (400, 422, 500) and "prompt" in str(err):
                    self._prompts_as_text = True  # a server that reads only text prompts (llama-cpp-python's)
                    return self._complete(prompt, **kwargs)
                if err.status_code not in (408, 429) and err.status_code < 500 or attempt == RETRIES:
                    raise ModelError(f"the model server at {self.base_url} refused a request: {_first_line(err)}") from None
            except self._openai.OpenAIError as err:
                raise ModelError(f"the model server at {self.base_url} failed: {_first_line(err)}") from None
            except (TypeError, ValueError, AttributeError):
                raise _not_openai(self.base_url, "/completions") from None
            time.sleep(0.5 * 2**attempt)  # then try again
        usage = self.replies.usage(response)
        if usage is not None:
            prompt_tokens, completion_tokens, cached = usage
            self.stats.kv_hit_tokens += min(cached, prompt_tokens)
            self.stats.computed_tokens += prompt_tokens - min(cached, prompt_tokens) + completion_tokens
        self.stats.forward_passes += 1
        return response

    def _timed_out(self, path: str) -> ModelError:
        return ModelError(
            f"the model server at {self.base_url} did not answer {path} within {self.request_timeout:g} s",
            hint="is it overloaded or stuck? --request-timeout SECONDS waits longer (answers already received are kept)",
        )

    def _text_prompt(self, prompt: Sequence[int]) -> str:
        """The ids as text for a server that takes only text. Data is encoded as plain text, so a
        special token's spelling in it (`<|im_end|>`) is several ordinary ids here — but the
        server's tokenizer would read the spelling back as the special token itself, turning data
        into prompt structure. Such a prompt is refused, never sent."""
        text = self.tokenizer.decode(list(prompt))
        for special in self._special_spellings():
            spelled = text.count(special)
            if spelled and spelled > list(prompt).count(self.tokenizer.convert_tokens_to_ids(special)):
                raise ModelError(
                    f"a prompt's data holds {special!r}, a special token of {self.name}'s prompt format, and the server at "
                    f"{self.base_url} takes prompts only as text, where it would read that spelling as the token itself",
                    hint="serve the model where prompts go as token ids (aisql serve, vLLM), or remove the spelling from the data",
                )
        return text

    def _special_spellings(self) -> list[str]:
        specials = set(getattr(self.tokenizer, "all_special_tokens", []) or [])
        for token in (getattr(self.tokenizer, "added_tokens_decoder", None) or {}).values():
            if getattr(token, "special", False):
                specials.add(str(token))
        return sorted(s for s in specials if s)


def _normalized(values: list[float]) -> LabelScores:
    """Labels' log-likelihoods as log-probabilities over the labels (the engine's LabelScores)."""
    total = logsumexp(values)
    return LabelScores(tuple(v - total for v in values))


def _not_openai(base_url: str, path: str) -> ModelError:
    return ModelError(
        f"the server at {base_url} did not answer {path} as an OpenAI-compatible server does",
        hint="point openai:NAME@URL at the /v1 base of `aisql serve`, vLLM or another OpenAI-compatible server",
    )


def _api_key() -> str:
    return os.environ.get("OPENAI_API_KEY", "unused")


def _first_line(err: Exception) -> str:
    return (str(err).splitlines() or [type(err).__name__])[0]
