"""``python -m benchmarks.sealed_search``."""

from .run import SCRIPT, main

__all__ = ["SCRIPT", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
