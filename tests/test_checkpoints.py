"""Checkpoints bounded by model time, progress once per checkpoint, and Ctrl-C keeping the work.

The time of a chunk is measured with a clock of *work done* (the engine's computed tokens), so
the tests say the same thing on an idle and a busy machine.
"""

from __future__ import annotations

import pytest
from conftest import EXAMPLES

from aisql.executor.store.answer_store import MemoryAnswerStore
from aisql.executor.answers.answering import Answering, RunOptions
from aisql.executor.options.checkpoints import FIRST_CHUNK_PROMPTS, ChunkSizer
from aisql.functions import by_name
from aisql.functions.base import Options

HOT_LEADS = (EXAMPLES / "hot_leads.sql").read_text()  # 190 distinct AI.IF prompts


class Recorder:
    def __init__(self, stop_after: int | None = None):
        self.advances: list[int] = []
        self.stop_after = stop_after

    def start(self, node, description, total, cached):
        pass

    def advance(self, node, prompts, tokens):
        self.advances.append(prompts)
        if self.stop_after is not None and len(self.advances) == self.stop_after:
            raise KeyboardInterrupt  # Ctrl-C, between two chunks' commits

    def finish(self, node):
        pass


def test_chunk_sizer_starts_small_then_fills_its_time():
    sizer = ChunkSizer(chunk_prompts=256, seconds=2.0)
    assert sizer.next_size([10] * 1000) == FIRST_CHUNK_PROMPTS  # nothing measured yet
    sizer.measured(tokens=80, seconds=1.0)  # 80 prompt tokens per second
    assert sizer.next_size([10] * 1000) == 16  # 2 s at 80 tok/s, 10 tokens a prompt
    assert sizer.next_size([100] * 5) == 1  # never empty, even when one prompt is over the time
    sizer.measured(tokens=10**6, seconds=1.0)
    assert sizer.next_size([10] * 1000) == 256  # and never over chunk_prompts


def test_every_chunk_holds_a_few_seconds_of_model_time_whatever_the_node_size(tiny_engine):
    """On a slow machine (here: 2 ms of model time per computed token) the first commit comes
    after FIRST_CHUNK_PROMPTS prompts and each later one after about `checkpoint_seconds`."""
    seconds_per_token = 0.002
    clock = lambda: tiny_engine.stats.computed_tokens * seconds_per_token  # noqa: E731
    recorder = Recorder()
    options = RunOptions.of(checkpoint_every=10_000, checkpoint_seconds=1.0, progress=recorder)
    answering = Answering(lambda: tiny_engine, MemoryAnswerStore(), options=options, clock=clock)
    task = by_name("IF").task(Options())
    texts = {f"Customer {i} writes: the parcel came {'late' if i % 3 else 'early'} and {i % 7} items broke.": 1 for i in range(300)}
    tokens_before = tiny_engine.stats.computed_tokens
    answers, counts = answering.answer_texts(texts, task, seen=set(), progress=("n1", "AI.IF"))
    assert len(answers) == 300 and counts.prompts_evaluated == 300
    assert recorder.advances[0] == FIRST_CHUNK_PROMPTS
    assert sum(recorder.advances) == 300
    model_seconds = (tiny_engine.stats.computed_tokens - tokens_before) * seconds_per_token
    assert model_seconds > 5  # the node is several checkpoints long...
    assert len(recorder.advances) >= model_seconds / 2  # ...and the bar moved at least every ~2 s of it


def test_the_bar_moves_before_a_node_smaller_than_checkpoint_every_ends(make_connection):
    recorder = Recorder()
    con = make_connection()
    con.add_file_search_path([EXAMPLES])
    con.run(HOT_LEADS, progress=recorder)  # default checkpoint_every (256) > the node's 190 prompts
    assert len(recorder.advances) >= 2 and recorder.advances[0] == FIRST_CHUNK_PROMPTS


def test_interrupted_run_keeps_its_chunks_and_the_rerun_asks_only_the_rest(tiny_engine, tmp_path):
    from aisql.api import Connection

    cache = tmp_path / "answers.sqlite"
    first = Connection(engine=tiny_engine, cache=str(cache))
    first.add_file_search_path([EXAMPLES])
    with pytest.raises(KeyboardInterrupt):
        first.run(HOT_LEADS, progress=Recorder(stop_after=1))  # Ctrl-C after the first commit
    kept = first.store.committed
    first.close()
    assert kept == FIRST_CHUNK_PROMPTS

    again = Connection(engine=tiny_engine, cache=str(cache))
    again.add_file_search_path([EXAMPLES])
    totals = again.run(HOT_LEADS).stats.totals()
    again.close()
    assert totals["prompts_cached"] == kept
    assert totals["prompts_evaluated"] == 190 - kept


def test_explain_prices_only_what_the_result_cache_lacks(tiny_engine, tmp_path):
    """explain used to estimate minutes for a fully cached query that reran in 0.6 s."""
    from aisql.api import Connection

    cache = str(tmp_path / "answers.sqlite")

    def planned_node(con):
        plan = con.explain(HOT_LEADS).to_dict()
        (node,) = plan["statements"][0]["ai_nodes"]
        return node, plan

    con = Connection(engine=tiny_engine, cache=cache)
    con.add_file_search_path([EXAMPLES])
    cold, _ = planned_node(con)
    assert cold["cached_share"] is None and cold["plan"]["prompts"] == 190
    with pytest.raises(KeyboardInterrupt):
        con.run(HOT_LEADS, progress=Recorder(stop_after=1))  # 8 answers kept
    partial, _ = planned_node(con)
    assert partial["cached_share"] == pytest.approx(FIRST_CHUNK_PROMPTS / 190) and partial["cached_share_exact"]
    assert partial["plan"]["prompts"] == 190 - FIRST_CHUNK_PROMPTS
    assert partial["naive"] == cold["naive"]  # naive execution never reads the cache
    con.run(HOT_LEADS)
    warm, plan = planned_node(con)
    assert warm["cached_share"] == 1.0 and warm["plan"]["prompts"] == 0 and warm["plan"]["time_s"] == 0
    assert "every answer is in the result cache" in plan["cache_note"]
    assert "all 190 answers cached" in str(con.explain(HOT_LEADS))
    con.close()
