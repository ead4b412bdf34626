"""Where the bench scripts write by default: runs/bench/, a store git ignores
(.gitignore: /runs/, beside `chaoslog run`'s default runs/RUN_ID). Raw output
stays there; bench/results/ keeps only the small index of the numbers the docs
cite, each with its command (bench/results/README.md)."""
from pathlib import Path

RAW = Path(__file__).resolve().parents[1] / "runs" / "bench"
