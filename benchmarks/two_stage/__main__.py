"""``python -m benchmarks.two_stage``."""

from .run import main

raise SystemExit(main())
