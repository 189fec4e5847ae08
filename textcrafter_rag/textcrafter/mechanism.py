"""TextCrafter: the trained policy as a mechanism, with saving and loading (fitting is in :mod:`.fitting`).

Protection runs in NumPy (:mod:`.numpy_policy`): a policy loads and protects on the runtime install,
without torch. The torch side -- the policy as a torch module (:attr:`TextCrafter.policy`), Algorithm 1's
refinement (``refine_steps``), training -- comes with the ``fit`` extra; both sides share one set of weights.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..artifacts import load_artifact, save_artifact
from ..encoders import as_encoder, verify_fingerprint
from ..errors import ArtifactError, FingerprintMismatch, InvalidInputError, MissingPolicyError
from ..extras import is_missing, missing_extra
from ..mechanisms.base import Mechanism
from ..numerics import plain_torch
from ..policies import BUNDLED_MODEL_ID, DEFAULT_SHIPPED_EPS, SHIPPED, shipped_policy_path
from ..validation import check_positive
from .configs import PolicyConfig, RewardWeights
from .numpy_policy import BLOCK, NumpyPolicy, PolicyArrays, release
from .pii import PIIClassifier
from .priors import ClusterPrior


def _torch_side(purpose: str) -> tuple[Any, Any]:
    """``(TextCrafterPolicy, refine_batch)``, imported on first use (``fit`` extra).

    Why not at import: protection runs in NumPy, and importing torch costs a process about a second and
    hundreds of MiB even where it is installed.
    """
    try:
        from .policy import TextCrafterPolicy
        from .rollout import refine_batch
    except ModuleNotFoundError as exc:
        if not is_missing(exc, extra="fit"):
            raise
        raise missing_extra(str(exc.name), extra="fit", purpose=purpose) from exc
    return TextCrafterPolicy, refine_batch


__all__ = ["TextCrafter"]

_KIND = "textcrafter-policy"


class TextCrafter(Mechanism):
    """Optimization-calibrated noise: a learned policy picks a random perturbation of norm exactly ``eps``.

    For each embedding ``f0`` the policy gives ``mu``, ``sigma`` and a unit direction ``v``; the
    release is ``f_adv = f0 + eps * P(delta)`` with ``delta ~ N(mu, sigma^2 I)`` drawn fresh per call
    and ``P`` the projection orthogonal to ``v``, normalised. Guarantees for every input:
    ``||f_adv - f0|| = eps`` and ``<f_adv - f0, v> = 0``. TextCrafter has no formal DP guarantee.

    Build one with :func:`~textcrafter_rag.textcrafter.fitting.fit_textcrafter` (for any encoder) or
    :meth:`load`; policies for the bundled all-MiniLM-L6-v2 ship with the package at eps 1.0 and 2.5
    (:meth:`load_shipped`).

    Args:
        policy: The trained policy: a :class:`~.numpy_policy.NumpyPolicy`, or the torch
            :class:`~.policy.TextCrafterPolicy` (its weights are shared, not copied: training it changes
            this mechanism's releases).
        eps: Perturbation norm.
        pii: The reward's PII classifier.
        prior: The reward's cluster prior.
        weights: The reward weights.
        refine_steps: If > 0, run Algorithm 1's per-batch refinement with this many steps
            (slower; keeps each row's best release by reward; needs the ``fit`` extra).
        norm_scale: The encoder's median embedding norm (1 for unit-norm encoders): ``eps`` is
            relative to it, so every release moves by ``eps * norm_scale`` (:attr:`radius`).
        metadata: Fingerprint, provenance and reports, as stored in ``config.json``.
        probes: The encoder's probe embeddings (fingerprint), if known.
        seed: Reproducible noise (warns). secure_mode: CSPRNG noise.
    """

    name: ClassVar[str] = "textcrafter"
    deterministic_norm: ClassVar[bool] = True

    def __init__(
        self,
        *,
        policy: Any,
        eps: float,
        pii: PIIClassifier,
        prior: ClusterPrior,
        weights: RewardWeights | None = None,
        refine_steps: int = 0,
        norm_scale: float = 1.0,
        metadata: dict[str, Any] | None = None,
        probes: np.ndarray | None = None,
        seed: int | None = None,
        secure_mode: bool = False,
    ) -> None:
        self.eps = check_positive(eps, name="eps")
        if refine_steps < 0:
            raise InvalidInputError("refine_steps must be >= 0")
        if refine_steps:
            _torch_side("TextCrafter's refinement (refine_steps)")
        super().__init__(seed=seed, secure_mode=secure_mode)
        self._torch_policy: Any = None
        self._torch_lock = threading.Lock()
        if isinstance(policy, NumpyPolicy):
            self._net = policy
        else:
            self._use_torch_policy(policy)
        self.pii = pii
        self.prior = prior
        self.weights = weights or RewardWeights()
        self.refine_steps = int(refine_steps)
        self.norm_scale = check_positive(norm_scale, name="norm_scale")
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.probes = probes
        self.path: Path | None = None

    def _use_torch_policy(self, module: Any) -> None:
        """Protect with ``module``'s weights from now on: NumPy views of its parameters (float32, on the CPU)."""
        module = module.float().eval()
        state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
        self._net = NumpyPolicy(module.config, state)  # not folded: training may still change the weights
        self._torch_policy = module

    @property
    def policy(self) -> Any:
        """The policy as a torch :class:`~.policy.TextCrafterPolicy` (``fit`` extra), sharing this mechanism's weights.

        Built on first use for a loaded policy; from then on protection reads the module's parameters, so
        changing them (training, tests) changes the releases.
        """
        if self._torch_policy is None:
            policy_class, _ = _torch_side("the TextCrafter policy as a torch module")
            with self._torch_lock:
                if self._torch_policy is None:
                    import torch

                    module = policy_class(self._net.config).float()
                    module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in self._net.state.items()})
                    self._use_torch_policy(module)
        return self._torch_policy

    # ------------------------------------------------------------------ protection
    @property
    def dim(self) -> int:
        return self._net.config.dim

    def policy_outputs(self, x: np.ndarray) -> PolicyArrays:
        """``(mu, sigma, v)`` as float32 arrays for a validated batch (inference path, dropout off)."""
        return self._net(np.asarray(x, dtype=np.float32))

    def release_with_noise(self, x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Release with given standard-normal noise ``z``: returns ``(f_adv, v)``. For tests and audits.

        Runs in NumPy, float32 (the projection in float64); no torch state can change it.
        """
        f0 = np.asarray(x, dtype=np.float32)
        z = np.asarray(z, dtype=np.float32)
        f_adv, v = np.empty_like(f0), np.empty_like(f0)
        for start in range(0, f0.shape[0], BLOCK):  # block by block: each block's arrays stay in cache
            rows = slice(start, start + BLOCK)
            out = self._net(f0[rows])
            delta = out.sigma * z[rows]
            delta += out.mu
            f_adv[rows], v[rows] = release(f0[rows], delta, out.v, self.radius), out.v
        return f_adv, v

    def _protect(self, x: np.ndarray) -> np.ndarray:
        if self.refine_steps:
            import torch

            _, refine_batch = _torch_side("TextCrafter's refinement (refine_steps)")
            with self._torch_lock, plain_torch(grad=True):  # refinement trains a copy of the policy
                f_adv = refine_batch(
                    self.policy,
                    torch.as_tensor(x, dtype=torch.float32),
                    self._noise,
                    eps=self.radius,
                    pii=self.pii,
                    prior=self.prior,
                    weights=self.weights,
                    steps=self.refine_steps,
                )
            return f_adv.detach().numpy()
        return self.release_with_noise(x, self._noise.normal(x.shape))[0]

    @property
    def aware_reward(self) -> dict[str, Any] | None:
        """The retrieval/adversary terms it was trained with (``config["reward"]``), or ``None`` (paper reward)."""
        reward = self.metadata.get("reward")
        return dict(reward) if isinstance(reward, dict) else None

    @property
    def label(self) -> str:
        """``textcrafter-aware`` for a policy trained with the aware reward, else ``textcrafter``."""
        return "textcrafter-aware" if self.aware_reward else "textcrafter"

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"eps": self.eps}
        reward = self.aware_reward
        if reward:
            p.update(retrieval=reward.get("retrieval_weight"), adversary=reward.get("adversary_weight"))
        return p

    def spec(self) -> str:
        """``textcrafter:DIR`` once saved or loaded; before that ``textcrafter`` or ``textcrafter-aware:...``."""
        if self.path:
            return f"textcrafter:{self.path}"
        if self.aware_reward:
            return "textcrafter-aware:" + ",".join(f"{k}={v}" for k, v in self.params().items())
        return "textcrafter"

    @property
    def radius(self) -> float:
        """The perturbation norm of every release: ``eps * norm_scale``."""
        return self.eps * self.norm_scale

    def expected_norm(self, dim: int) -> float:
        return self.radius

    def __getstate__(self) -> dict[str, Any]:
        """A copy (a worker of a pool) carries the weights in NumPy; it rebuilds its torch module if it needs one."""
        state = super().__getstate__()
        if state.get("_torch_policy") is not None:
            state["_net"] = NumpyPolicy(self._net.config, {k: np.array(v) for k, v in self._net.state.items()})
            state["_torch_policy"] = None
        return state

    # ------------------------------------------------------------------ persistence
    def get_config_dict(self) -> dict[str, Any]:
        """The JSON-serialisable configuration stored in ``config.json``."""
        return {
            **self.metadata,
            "eps": self.eps,
            "norm_scale": self.norm_scale,
            "dim": self.dim,
            "policy": self._net.config.to_dict(),
            "reward_weights": self.weights.to_dict(),
            "pii_classifier": dict(self.pii.metrics),
        }

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Save as ``config.json`` + ``model.safetensors`` (policy, PII classifier, centroids, probes)."""
        tensors = {f"policy.{k}": np.ascontiguousarray(v) for k, v in self._net.state.items()}
        tensors.update(self.pii.tensors())
        tensors.update(self.prior.tensors())
        if self.probes is not None:
            tensors["encoder.probes"] = np.asarray(self.probes, dtype=np.float32)
        self.path = save_artifact(path, kind=_KIND, tensors=tensors, config=self.get_config_dict())
        return self.path

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        encoder: Any = None,
        seed: int | None = None,
        secure_mode: bool = False,
        refine_steps: int = 0,
    ) -> TextCrafter:
        """Load a saved policy (NumPy only); with ``encoder``, refuse one fitted for a different encoder.

        Raises:
            ArtifactError: Missing, corrupted, edited or unknown-format files.
            FingerprintMismatch: ``encoder`` differs from the one the policy was fitted for.
        """
        config, tensors = load_artifact(path, kind=_KIND, arrays=True)
        try:
            eps = check_positive(config["eps"], name="eps")
            dim = int(config["dim"])
            pcfg = PolicyConfig(**config["policy"])
            if pcfg.dim != dim:
                raise InvalidInputError(f"policy dimension {pcfg.dim} != recorded dimension {dim}")
            weights = RewardWeights(**config["reward_weights"])
            state = {k[len("policy.") :]: v for k, v in tensors.items() if k.startswith("policy.")}
            net = NumpyPolicy(pcfg, state, fold=True)  # nothing else holds these weights: fold them
            pii = PIIClassifier.from_tensors(tensors, config.get("pii_classifier"))
            prior = ClusterPrior.from_tensors(tensors)
            if pii.weight.shape != (dim,) or prior.centroids.shape[1] != dim:
                raise InvalidInputError("PII classifier or centroids do not match the policy dimension")
        except (KeyError, TypeError, ValueError) as exc:
            raise ArtifactError(f"{path} holds an invalid TextCrafter policy: {exc}") from None
        probes = tensors.get("encoder.probes")
        if encoder is not None:
            enc = as_encoder(encoder)
            if enc.dimension != dim:
                raise FingerprintMismatch(
                    f"the policy at {path} was fitted for {dim}-d embeddings from "
                    f"{config.get('encoder', {}).get('model_id')!r}, but the encoder produces {enc.dimension}-d "
                    "ones; fit a policy for this encoder with fit_textcrafter(...) or `textcrafter fit`"
                )
            if probes is not None:
                verify_fingerprint(enc, probes)
        reserved = {"eps", "norm_scale", "dim", "policy", "reward_weights", "pii_classifier"}
        meta = {k: v for k, v in config.items() if k not in reserved}
        tc = cls(
            policy=net,
            eps=eps,
            pii=pii,
            prior=prior,
            weights=weights,
            metadata=meta,
            norm_scale=float(config.get("norm_scale", 1.0)),
            probes=probes,
            seed=seed,
            secure_mode=secure_mode,
            refine_steps=refine_steps,
        )
        tc.path = Path(path)
        return tc

    @classmethod
    def load_shipped(
        cls, *, eps: float | None = None, seed: int | None = None, secure_mode: bool = False
    ) -> TextCrafter:
        """A policy shipped for the bundled all-MiniLM-L6-v2: ``eps`` 1.0 (default) or 2.5 (the paper's)."""
        eps = DEFAULT_SHIPPED_EPS if eps is None else eps
        path = shipped_policy_path(BUNDLED_MODEL_ID, eps=eps)
        if path is None:
            shipped = ", ".join(str(e) for e in sorted(SHIPPED[BUNDLED_MODEL_ID]))
            raise MissingPolicyError(
                f"no policy for all-MiniLM-L6-v2 at eps={eps} ships with this installation (shipped: {shipped}); "
                "fit one with `textcrafter fit --eps EPS --out DIR`"
            )
        return cls.load(path, seed=seed, secure_mode=secure_mode)
