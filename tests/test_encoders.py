"""The core's encoders load no plugin and leave the caller's environment as it found it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env)


def test_the_core_never_asks_installed_packages_for_entry_points() -> None:
    # the patch is in place before the core is imported, so a `from importlib.metadata import entry_points`
    # in the core would bind the patched function too
    code = """
        import importlib.metadata
        import sys

        original = importlib.metadata.entry_points

        def refuse(*args, **kwargs):  # other libraries (torch) may look up their own plugins
            if sys._getframe(1).f_globals.get("__name__", "").startswith("textcrafter_rag"):
                raise AssertionError(f"the core asked for entry points {args} {kwargs}")
            return original(*args, **kwargs)

        importlib.metadata.entry_points = refuse
        import numpy as np
        from textcrafter_rag import GaussianNoise, Protector, as_encoder

        fn = lambda texts: np.ones((len(texts), 4))
        as_encoder(fn).encode(["a"])
        Protector(base=fn, mechanism=GaussianNoise(s=0.1)).embed_documents(["a", "b"])
        """
    done = _run(code, dict(os.environ))
    assert done.returncode == 0, done.stderr[-2000:]


def test_loading_the_bundled_encoder_leaves_os_environ_unchanged() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    code = """
        import os
        import sentence_transformers  # a third-party import may set its own variables (torch's inductor cache)
        from textcrafter_rag import bundled_minilm

        before = dict(os.environ)

        assert bundled_minilm().encode(["a sentence"]).shape == (1, 384)
        changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
        assert not changed, changed
        """
    done = _run(code, env)
    assert done.returncode == 0, done.stderr[-2000:]
