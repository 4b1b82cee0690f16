"""Token ids to text as they stream out: incremental decoding and stop sequences.

Text is decoded from all of a choice's tokens so far (tokenizers merge bytes across tokens); a
delta is released only when it cannot change any more: not while the text ends in an incomplete
UTF-8 character, and never the tail that might be the start of a stop sequence. Streamed deltas
therefore concatenate to exactly the non-streamed text.
"""

from __future__ import annotations


class TextStream:
    def __init__(self, tokenizer, stops: list[str]) -> None:
        self.tokenizer = tokenizer
        self.stops = stops
        self.ids: list[int] = []
        self.sent = ""  # text released so far
        self.stopped = False  # a stop sequence was found: nothing more is released

    def add(self, token_ids: list[int]) -> str:
        """Add tokens; returns the newly releasable text."""
        if self.stopped:
            return ""
        self.ids.extend(token_ids)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if self.stops:
            cut = self._first_stop(text)
            if cut is not None:
                self.stopped = True
                return self._release(text[:cut])
            text = text[: len(text) - self._possible_stop_start(text)]
        if text.endswith("\ufffd"):
            return ""
        return self._release(text)

    def flush(self) -> str:
        """At the end: whatever was held back (a partial stop sequence is just text)."""
        if self.stopped:
            return ""
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
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
