"""``python -m benchmarks.two_stage``."""

from .run import SCRIPT, main

__all__ = ["SCRIPT", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
