"""A model's tokenizer read straight from its `tokenizer.json` (Rust `tokenizers`) and its chat
template rendered with jinja2: what planning needs, without importing transformers (1.5 s) or
torch. It encodes exactly as transformers' fast tokenizer class does over the same files (that
class wraps the same `tokenizers` object); the engine itself keeps using transformers.

The chat template is rendered as transformers renders it: a sandboxed jinja2 environment with
`trim_blocks`/`lstrip_blocks`, loop controls, `tojson`, `raise_exception` and `strftime_now`,
the special tokens and extra keywords as variables.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

_SPECIAL_NAMES = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


class LightTokenizer:
    def __init__(self, directory: str | os.PathLike) -> None:
        from tokenizers import Tokenizer

        directory = Path(directory)
        self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        config_path = directory / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.exists() else {}
        self.special_tokens = {name: _content(config.get(name)) for name in _SPECIAL_NAMES if config.get(name)}
        template = config.get("chat_template")
        jinja_file = directory / "chat_template.jinja"
        if jinja_file.exists():
            template = jinja_file.read_text(encoding="utf-8")
        if isinstance(template, list):  # named templates: the default one
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        self.chat_template: str | None = template
        self._compiled = None

    @staticmethod
    def available(directory: str | os.PathLike) -> bool:
        return (Path(directory) / "tokenizer.json").exists()

    def __call__(
        self, text: str | Sequence[str], add_special_tokens: bool = True, split_special_tokens: bool = False, **_: Any
    ) -> dict[str, list]:
        self._tokenizer.encode_special_tokens = split_special_tokens
        try:
            if isinstance(text, str):
                return {"input_ids": self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids}
            encodings = self._tokenizer.encode_batch(list(text), add_special_tokens=add_special_tokens)
            return {"input_ids": [e.ids for e in encodings]}
        finally:
            self._tokenizer.encode_special_tokens = False

    @property
    def eos_token_id(self) -> int | None:
        """As transformers' tokenizer has it: the end token's id (labels that begin one another end
        with it, aisql.engine.model.prompt_format.encode_labels — explain must count it too)."""
        eos = self.special_tokens.get("eos_token")
        return None if eos is None else self._tokenizer.token_to_id(eos)

    @property
    def added_tokens_decoder(self) -> dict:
        return self._tokenizer.get_added_tokens_decoder()

    def apply_chat_template(self, messages: list[dict], *, tokenize: bool = False, add_generation_prompt: bool = False, **kwargs: Any) -> str:
        if tokenize:
            raise ValueError("LightTokenizer renders chat templates to text only")
        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat template")
        if self._compiled is None:
            self._compiled = _environment().from_string(self.chat_template)
        return self._compiled.render(messages=messages, add_generation_prompt=add_generation_prompt, **self.special_tokens, **kwargs)


def _content(token: Any) -> str:
    return token.get("content", "") if isinstance(token, dict) else str(token)


def _environment():
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # Not jinja's own filter, which escapes HTML characters: templates expect plain JSON.
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env
