"""A run told in words: the summary line every surface shows (the CLI and the shell on stderr,
`QueryResult.summary()` and its repr in Python), from one place."""

from __future__ import annotations


def summary_line(result, output: str | None = None) -> str:
    """The run in one line: rows, prompts, tokens, time, the model and how it ran."""
    totals = result.stats.totals()
    rows = "no rows" if result.table is None else f"{result.table.num_rows:,} row{'' if result.table.num_rows == 1 else 's'}"
    where = f" written to {output}" if output and result.table is not None else ""
    parts = [f"{rows}{where}"]
    if result.stats.nodes:
        parts.append(
            f"AI: {totals['prompts_total']:,} prompt{'' if totals['prompts_total'] == 1 else 's'}, {totals['prompts_unique']:,} unique, "
            f"{totals['prompts_evaluated']:,} evaluated"
            + (f", {totals['prompts_cached']:,} from the result cache" if totals["prompts_cached"] else "")
        )
        parts.append(f"tokens computed {totals['computed_tokens']:,} of {totals['logical_tokens']:,} logical")
        if totals["kv_hit_tokens"]:
            parts.append(f"{totals['kv_hit_tokens']:,} from the prefix cache")
        if totals["draft_tokens"]:
            parts.append(
                f"speculation accepted {totals['draft_accepted_tokens']:,}/{totals['draft_tokens']:,} drafted tokens"
            )
    parts.append(f"{result.stats.wall_s:.2f} s")
    if result.model:
        if result.model.device:
            threads = result.model.threads and f"{result.model.threads} thread{'s' if result.model.threads != 1 else ''}"
            how = [part for part in (result.model.numerics, result.model.kernels, threads) if part]
            where = f"on {result.model.device}" + (f" ({', '.join(how)})" if how else "")
        elif any(n.prompts_total for n in result.stats.nodes if n.model_kind == "llm"):
            numerics = f", computed in {result.model.numerics}" if result.model.numerics else ""
            proxied = any(n.approximate and n.approximate.get("proxy_answered") for n in result.stats.nodes)
            # in approximate mode the oracle may be left unloaded because its proxy answered
            where = "(not loaded: its proxy and the result cache answered every prompt)" if proxied else f"(not loaded: all answers cached{numerics})"
        else:
            where = "(not loaded: no prompt to answer)"
        parts.append(f"model {result.model.name} {where}")
    if result.stats.embed_model:
        parts.append(f"embed model {result.stats.embed_model}")
    return " · ".join(parts)


def summary_text(result) -> str:
    """summary_line, then what the answers say about themselves (aisql.executor.report.signals):
    what `QueryResult.summary()` returns, and the CLI prints on stderr."""
    from aisql.executor.report.signals import quality_lines

    lines = [summary_line(result)]
    lines += [("warning: " if line.warning else "") + line.text for line in quality_lines(result.stats)]
    return "\n".join(lines)
