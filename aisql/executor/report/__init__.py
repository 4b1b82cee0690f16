"""What a run reports: its counts, the quality signals, the summary line, progress events."""
