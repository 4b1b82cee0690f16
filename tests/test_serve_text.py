"""Incremental detokenization: deltas concatenate to the full decode, whatever the chunking
(multi-byte characters split across tokens included), and stop sequences cut the text."""

from __future__ import annotations

import random

from aisql.serve.text import TextStream


def stream(tokenizer, ids, stops=(), seed=0):
    rng = random.Random(seed)
    text = TextStream(tokenizer, list(stops))
    out, i = "", 0
    while i < len(ids):
        step = rng.randint(1, 4)
        out += text.add(ids[i : i + step])
        i += step
    return out + text.flush(), text


def test_deltas_equal_the_full_decode(tiny_engine):
    tokenizer = tiny_engine.tokenizer
    rng = random.Random(0)
    cases = [tokenizer.encode("héllo wörld — ünïcödé 日本語 🙂 " * 3)]
    cases += [[rng.randrange(len(tokenizer)) for _ in range(rng.randint(1, 80))] for _ in range(100)]
    for seed, ids in enumerate(cases):
        assert stream(tokenizer, ids, seed=seed)[0] == tokenizer.decode(ids, skip_special_tokens=True)


def test_stop_sequence_cuts_and_holds_back(tiny_engine):
    tokenizer = tiny_engine.tokenizer
    ids = tokenizer.encode("alpha beta STOP gamma delta")
    text, state = stream(tokenizer, ids, stops=["STOP"])
    assert text == "alpha beta " and state.stopped
    partial, state = stream(tokenizer, tokenizer.encode("alpha beta ST"), stops=["STOP"])
    assert partial == "alpha beta ST" and not state.stopped  # a partial stop at the end is just text
