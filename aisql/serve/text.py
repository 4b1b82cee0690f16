"""Token ids to text as they stream out: incremental decoding and stop sequences.

Decoding is incremental, as in vLLM: only a small window of tokens is decoded per step (the
tokens since the text last grew, with the tokens before them for context, since tokenizers merge
bytes and spaces across tokens), so a long answer costs linear, not quadratic, decoding time. New
text is held back while it ends in an incomplete UTF-8 character, and so is any tail that might be
the start of a stop sequence. Streamed deltas therefore concatenate to exactly the non-streamed text.
"""

from __future__ import annotations


class TextStream:
    def __init__(self, tokenizer, stops: list[str]) -> None:
        self.tokenizer = tokenizer
        self.stops = stops
        self.ids: list[int] = []
        self.text = ""  # decoded so far
        self.sent = ""  # text released so far (a prefix of `text`)
        self.stopped = False  # a stop sequence was found: nothing more is released
        self._prefix = 0  # ids[_prefix:_read] decoded to the end of `text`: the next window's context
        self._read = 0

    def add(self, token_ids: list[int]) -> str:
        """Add tokens; returns the newly releasable text."""
        if self.stopped:
            return ""
        self.ids.extend(token_ids)
        self.text += self._decode_new(final=False)
        return self._releasable(final=False)

    def flush(self) -> str:
        """At the end: whatever was held back (a partial stop sequence is just text)."""
        if self.stopped:
            return ""
        self.text += self._decode_new(final=True)
        return self._releasable(final=True)

    def _decode_new(self, final: bool) -> str:
        decode = self.tokenizer.decode
        before = decode(self.ids[self._prefix : self._read], skip_special_tokens=True)
        after = decode(self.ids[self._prefix :], skip_special_tokens=True)
        if len(after) <= len(before) or (after.endswith("\ufffd") and not final):
            return ""
        self._prefix, self._read = self._read, len(self.ids)
        return after[len(before) :]

    def _releasable(self, final: bool) -> str:
        text = self.text
        if self.stops:
            cut = self._first_stop(text)
            if cut is not None:
                self.stopped = True
                return self._release(text[:cut])
            if not final:
                text = text[: len(text) - self._possible_stop_start(text)]
        return self._release(text)

    def token_text(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id], skip_special_tokens=False)

    def _release(self, text: str) -> str:
        if not text.startswith(self.sent) or len(text) <= len(self.sent):
            return ""
        delta = text[len(self.sent) :]
        self.sent = text
        return delta

    def _first_stop(self, text: str) -> int | None:
        start = max(0, len(self.sent) - max(len(s) for s in self.stops))
        found = [i for i in (text.find(s, start) for s in self.stops) if i >= 0]
        return min(found) if found else None

    def _possible_stop_start(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a stop sequence."""
        longest = 0
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:size]):
                    longest = max(longest, size)
                    break
        return longest
