"""Pictures of the benchmark results, written beside their JSON and linked from RESULTS.md.

    python benchmarks/plots.py [--results benchmarks/results] [--out benchmarks/results/plots]

- tokens.png — computed tokens per query, naive vs planned (run.py's Q1-Q4), with the prefix-tree minimum;
- ttft.png — time to first token per agent turn: aisql with and without prefix reuse, and vllm serve;
- serving.png — generated tokens/s and TTFT p50 under 16 concurrent clients: aisql with continuous
  batching, one request at a time, and vllm serve.
A picture whose results file is missing is skipped (and said so). Needs matplotlib (the `dev` extra).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUERIES = ("Q1_hot_leads", "Q2_reviews", "Q3_classify", "Q4_bio")


def _load(results: Path, name: str) -> dict | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _save(fig, plt, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def tokens_plot(results: Path, out: Path, plt) -> Path | None:
    runs = {q: _load(results, q) for q in QUERIES}
    runs = {q: r for q, r in runs.items() if r}
    if not runs:
        return None
    names = [q.split("_")[0] for q in runs]
    naive = [r["naive"]["computed_tokens"] for r in runs.values()]
    planned = [r["planned"]["computed_tokens"] for r in runs.values()]
    minimum = [r.get("prefix_tree_minimum", {}).get("tokens") if isinstance(r.get("prefix_tree_minimum"), dict) else r.get("prefix_tree_minimum") for r in runs.values()]
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], naive, width=0.4, label="naive (one prompt per row)", color="#b0b0b0")
    ax.bar([x + 0.2 for x in xs], planned, width=0.4, label="planned (aisql)", color="#2b6cb0")
    if all(isinstance(m, (int, float)) for m in minimum):
        ax.scatter([x + 0.2 for x in xs], minimum, marker="_", s=400, color="black", label="prefix-tree minimum", zorder=3)
    ax.set_yscale("log")
    ax.set_xticks(list(xs), names)
    ax.set_ylabel("tokens computed by the model (log)")
    ax.set_title("Work per query: naive vs planned (tiny-32k)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, fontsize=8, frameon=False)
    return _save(fig, plt, out / "tokens.png")


def ttft_plot(results: Path, out: Path, plt) -> Path | None:
    trace = _load(results, "agent_trace")
    if not trace:
        return None
    turns = trace["ttft"]["turns"]
    fig, ax = plt.subplots(figsize=(7, 4))
    context = [t["prompt_tokens"] for t in turns]
    ax.plot(context, [1000 * t["ttft_no_reuse_s"] for t in turns], "o-", color="#b0b0b0", label="aisql, no prefix reuse")
    ax.plot(context, [1000 * t["ttft_s"] for t in turns], "o-", color="#2b6cb0", label="aisql, radix prefix reuse")
    side = _load(results, "vs_vllm_serve")
    if side:  # the side-by-side run: aisql and vLLM measured one after the other
        for server, style, color, label in (("aisql", "^--", "#2b6cb0", "aisql, side-by-side run"), ("vllm", "s--", "#c05621", "vllm serve, prefix caching (same run)")):
            turns_ = side["servers"][server]["agent_turns"]
            ax.plot([t["prompt_tokens"] for t in turns_], [1000 * t["ttft_s"] for t in turns_], style, color=color, alpha=0.8, label=label)
    ax.set_xlabel("context tokens at the turn")
    ax.set_ylabel("time to first token (ms)")
    ax.set_title("Agent trace: TTFT per turn as the context grows")
    ax.legend()
    return _save(fig, plt, out / "ttft.png")


def serving_plot(results: Path, out: Path, plt) -> Path | None:
    load = _load(results, "load_test")
    if not load:
        return None
    modes = {
        "aisql, continuous batching": load["modes"]["continuous_batching"],
        "aisql, one at a time": load["modes"]["one_at_a_time"],
    }
    side = _load(results, "vs_vllm_serve")
    if side:  # the side-by-side run
        modes["aisql serve (side-by-side run)"] = side["servers"]["aisql"]["load"]
        modes["vllm serve (same run)"] = side["servers"]["vllm"]["load"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    names = list(modes)
    colors = ["#2b6cb0", "#b0b0b0", "#63b3ed", "#c05621"][: len(names)]
    left.barh(names, [m["tokens_per_s"] for m in modes.values()], color=colors)
    left.set_xlabel("generated tokens/s (16 clients)")
    right.barh(names, [m["ttft_p50_ms"] for m in modes.values()], color=colors)
    right.set_xlabel("TTFT p50 (ms, log)")
    right.set_xscale("log")
    right.set_yticks([])
    fig.suptitle("Serving under load (tiny-32k)")
    return _save(fig, plt, out / "serving.png")


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=HERE / "results")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "plots")
    args = parser.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args.out.mkdir(parents=True, exist_ok=True)
    written = []
    for plot in (tokens_plot, ttft_plot, serving_plot):
        path = plot(args.results, args.out, plt)
        print(f"{plot.__name__}: {path or 'skipped (no results file)'}")
        if path:
            written.append(path)
    return written


if __name__ == "__main__":
    main()
