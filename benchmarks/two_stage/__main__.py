"""``python -m benchmarks.two_stage``."""

from .run import main

if __name__ == "__main__":
    raise SystemExit(main())
