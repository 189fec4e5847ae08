"""Embedding-inversion attacker: train the decoder of :mod:`.inverter_model` and decode text with it.

The decoder reuses the encoder's (MiniLM's) WordPiece tokenizer. Its output vocabulary is
restricted to the WordPieces seen in the attacker's training text (the rest map to ``[UNK]``),
which keeps the softmax cheap. Decoding (greedy, beam search) lives in :mod:`.inverter_decoding`.

Saving and loading (verified ``config.json`` + ``model.safetensors`` artifacts, no pickle) live in
:mod:`.inverter_io`.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ..embedding import texts_hash
from ..encoders import bundled_minilm
from ..errors import InvalidInputError
from .inverter_decoding import beam_decode, greedy_decode
from .inverter_io import CORRECTOR_KIND, INVERTER_KIND, load_inverter, save_inverter
from .inverter_model import InverterConfig, InverterModel, default_device, resolve_device, set_seed
from .training_state import TrainingState, clear_training_state, load_training_state, save_training_state

__all__ = [
    "CORRECTOR_KIND",
    "INVERTER_KIND",
    "Inverter",
    "InverterConfig",
    "InverterTrainingConfig",
    "default_device",
    "resolve_device",
    "set_seed",
]


@dataclass
class InverterTrainingConfig:
    """Optimisation settings.

    Training stops at whichever comes first: ``epochs`` passes, ``max_steps`` or ``time_budget_min``
    minutes; the cosine learning-rate schedule follows the same progress measure.
    """

    batch_size: int = 64
    lr: float = 5e-4
    weight_decay: float = 0.01
    warmup_steps: int = 30
    epochs: float = 20.0
    max_steps: int | None = None
    time_budget_min: float | None = 20.0
    grad_clip: float = 1.0
    bf16: bool = True
    seed: int = 0
    threads: int | None = None


def _tokenizer_from(encoder: Any) -> Any:
    model = getattr(encoder, "model", encoder)
    return model.tokenizer


class Inverter:
    """A trained inversion attacker (see the module docstring).

    Create with :meth:`train` or :meth:`load`; reconstruct text with :meth:`invert`.
    """

    #: The ``kind`` this class saves and loads (a corrector is not an inverter: it has its own).
    artifact_kind: ClassVar[str] = INVERTER_KIND

    def __init__(
        self,
        model: InverterModel,
        tokenizer: Any,
        vocab_ids: np.ndarray,
        *,
        meta: dict[str, Any] | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.vocab_ids = np.asarray(vocab_ids, dtype=np.int64)
        self.meta: dict[str, Any] = dict(meta or {})
        self.device = torch.device(device) if device is not None else default_device()
        self.model.to(self.device)
        self._to_local = {int(t): i for i, t in enumerate(self.vocab_ids)}
        self.unk = self._to_local[int(tokenizer.unk_token_id)]
        self.bos = self._to_local[int(tokenizer.cls_token_id)]
        self.eos = self._to_local[int(tokenizer.sep_token_id)]
        self.pad = self._to_local[int(tokenizer.pad_token_id)]

    @property
    def config(self) -> InverterConfig:
        """The architecture (the network's own config)."""
        return self.model.cfg

    # ---------------------------------------------------------------- data helpers

    @staticmethod
    def build_vocab(texts: Sequence[str], tokenizer: Any, *, max_vocab: int) -> np.ndarray:
        """Special tokens plus the ``max_vocab`` most frequent WordPieces of ``texts`` (BERT ids)."""
        counts: Counter[int] = Counter()
        enc = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        for ids in enc:
            counts.update(ids)
        special = [tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id]
        keep = [t for t, _ in counts.most_common() if t not in special][: max(0, max_vocab - len(special))]
        return np.asarray(special + sorted(keep), dtype=np.int64)

    def encode_texts(self, texts: Sequence[str]) -> list[list[int]]:
        """Local token ids (no specials), truncated to ``max_len`` WordPieces."""
        ids = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        cap = self.config.max_len
        return [[self._to_local.get(t, self.unk) for t in row[:cap]] for row in ids]

    def decode_ids(self, rows: Sequence[Sequence[int]]) -> list[str]:
        """Local ids -> text (specials and ``[UNK]`` dropped)."""
        drop = {self.unk, self.bos, self.eos, self.pad}
        out = []
        for row in rows:
            bert = [int(self.vocab_ids[i]) for i in row if i not in drop]
            text = self.tokenizer.decode(bert, skip_special_tokens=True, clean_up_tokenization_spaces=True)
            out.append(_detokenize(text))
        return out

    @staticmethod
    def token_lengths(texts: Sequence[str], tokenizer: Any) -> np.ndarray:
        """Number of WordPieces per text (no specials)."""
        return np.asarray([len(r) for r in tokenizer(list(texts), add_special_tokens=False)["input_ids"]])

    # ---------------------------------------------------------------- training

    @classmethod
    def create(
        cls,
        texts: Sequence[str],
        *,
        config: InverterConfig | None = None,
        encoder: Any = None,
        device: torch.device | str | None = None,
        seed: int = 0,
    ) -> Inverter:
        """An untrained inverter whose vocabulary and initial weights come from ``texts`` and ``encoder``."""
        if encoder is None:
            encoder = bundled_minilm()
        cfg = config or InverterConfig()
        set_seed(seed)
        tok = _tokenizer_from(encoder)
        vocab = cls.build_vocab(texts, tok, max_vocab=cfg.max_vocab)
        model = InverterModel(cfg, len(vocab))
        st_model = getattr(encoder, "model", None)
        if st_model is not None and hasattr(st_model, "__getitem__"):
            model.init_from_encoder(st_model, vocab)
        return cls(model, tok, vocab, device=device, meta={"encoder": getattr(encoder, "model_id", "unknown")})

    @classmethod
    def train(
        cls,
        embeddings: np.ndarray,
        texts: Sequence[str],
        *,
        config: InverterConfig | None = None,
        train_config: InverterTrainingConfig | None = None,
        encoder: Any = None,
        device: torch.device | str | None = None,
        progress: bool = True,
        checkpoint_dir: str | os.PathLike[str] | None = None,
    ) -> Inverter:
        """Train a fresh inverter on ``(embedding, text)`` pairs (teacher forcing).

        Args:
            embeddings: ``(n, D)`` embeddings of ``texts`` (clean, or protected for an adaptive attacker).
            texts: The ``n`` texts.
            config: Architecture (``emb_dim`` is set from ``embeddings``).
            train_config: Optimisation settings.
            encoder: The attacked encoder, for its tokenizer and initial weights (bundled MiniLM if ``None``).
            device: Torch device (CUDA automatically when present).
            progress: Show a tqdm bar.
            checkpoint_dir: Where training checkpoints itself and resumes from (see :meth:`fit`).
        """
        cfg = config or InverterConfig()
        cfg = InverterConfig(**{**asdict(cfg), "emb_dim": int(np.asarray(embeddings).shape[1])})
        tc = train_config or InverterTrainingConfig()
        inv = cls.create(texts, config=cfg, encoder=encoder, device=device, seed=tc.seed)
        inv.fit(embeddings, texts, train_config=tc, progress=progress, checkpoint_dir=checkpoint_dir)
        return inv

    def _batches(self, n: int, lengths: np.ndarray, bs: int, rng: np.random.Generator) -> list[np.ndarray]:
        order = rng.permutation(n)
        chunk = bs * 50
        batches = []
        for s in range(0, n, chunk):
            part = order[s : s + chunk]
            part = part[np.argsort(lengths[part], kind="stable")]
            batches.extend(part[i : i + bs] for i in range(0, len(part), bs))
        rng.shuffle(batches)
        return batches

    def _collate(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(inputs, targets)``: ``[CLS] + row`` and ``row + [SEP]``, padded to the longest row + 1 (targets -100)."""
        lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        n, t = len(rows), int(lens.max()) + 1
        inp = np.full((n, t), self.pad, dtype=np.int64)
        tgt = np.full((n, t), -100, dtype=np.int64)
        inp[:, 0] = self.bos
        flat = np.fromiter((tok for r in rows for tok in r), dtype=np.int64, count=int(lens.sum()))
        row = np.repeat(np.arange(n), lens)
        col = np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)
        inp[row, col + 1] = flat
        tgt[row, col] = flat
        tgt[np.arange(n), lens] = self.eos
        return torch.from_numpy(inp), torch.from_numpy(tgt)

    def cond_prefix(self, cond: torch.Tensor, extra: Any = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Prefix vectors (and an optional key mask) for a batch; correctors override this."""
        return self.model.prefix_embeds(cond), None

    def loss(self, cond: torch.Tensor, rows: list[list[int]], extra: Any = None) -> torch.Tensor:
        """Teacher-forced cross-entropy of ``rows`` given conditioning vectors ``cond``."""
        inp, tgt = self._collate(rows)
        return self.token_loss(cond, inp.to(self.device), tgt.to(self.device), extra)

    def token_loss(self, cond: torch.Tensor, inp: torch.Tensor, tgt: torch.Tensor, extra: Any = None) -> torch.Tensor:
        """:meth:`loss` of collated ``(inputs, targets)`` already on the device."""
        prefix, pmask = self.cond_prefix(cond, extra)
        p = prefix.shape[1]
        x = self.model.embed(prefix, inp, self.config.n_prefix)
        mask = None
        if pmask is not None:
            total = x.shape[1]
            causal = torch.ones(total, total, dtype=torch.bool, device=self.device).tril()
            keys = torch.cat([pmask, torch.ones(inp.shape, dtype=torch.bool, device=self.device)], dim=1)
            mask = (causal[None] & keys[:, None, :])[:, None]
        h, _ = self.model.run(x, mask)
        logits = self.model.logits(h[:, p:])
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100)

    def extra_batch(self, extra: Any, idx: np.ndarray) -> Any:
        """The rows ``idx`` of the extra conditioning input (none for an inverter; correctors override this)."""
        return None

    def fit(
        self,
        embeddings: np.ndarray,
        texts: Sequence[str],
        *,
        train_config: InverterTrainingConfig | None = None,
        extra: Any = None,
        progress: bool = True,
        desc: str = "train inverter",
        checkpoint_dir: str | os.PathLike[str] | None = None,
        checkpoint_every_min: float = 5.0,
    ) -> dict[str, Any]:
        """(Continue to) train on ``(embedding, text)`` pairs; returns a training summary (also in ``meta``).

        Args:
            checkpoint_dir: Save the training state there every ``checkpoint_every_min`` minutes and
                go on from it when it exists, so a run of an hour or more survives being stopped: the
                step count, the optimiser, the data order and the time budget (training time spent
                across all sessions) all continue where they were. Removed once training completes.
        """
        tc = train_config or InverterTrainingConfig()
        if tc.threads:
            torch.set_num_threads(tc.threads)
        set_seed(tc.seed)
        emb = torch.as_tensor(np.asarray(embeddings, dtype=np.float32))
        if emb.shape[0] != len(texts):
            raise InvalidInputError(f"{emb.shape[0]} embeddings for {len(texts)} texts")
        rows = self.encode_texts(texts)
        lengths = np.asarray([len(r) for r in rows])
        # every pair goes to the device once; a batch is an index into these tensors
        emb = emb.to(self.device)
        inp_all, tgt_all = (t.to(self.device) for t in self._collate(rows))
        steps_per_epoch = len(self._batches(len(rows), lengths, tc.batch_size, np.random.default_rng(tc.seed)))
        total = int(tc.epochs * steps_per_epoch)
        if tc.max_steps is not None:
            total = min(total, tc.max_steps)
        budget = tc.time_budget_min * 60 if tc.time_budget_min else None
        self.model.train()
        decay = [p for n, p in self.model.named_parameters() if p.ndim >= 2]
        no_decay = [p for n, p in self.model.named_parameters() if p.ndim < 2]
        opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=tc.lr,
            betas=(0.9, 0.98),
            **({"fused": True} if self.device.type == "cuda" else {}),
        )
        use_bf16 = tc.bf16 and (self.device.type == "cuda" or _cpu_bf16())
        run = {"texts": texts_hash(texts), "n": len(rows), "train_config": asdict(tc), "config": asdict(self.config)}
        resumed = None
        if checkpoint_dir is not None:
            resumed = load_training_state(checkpoint_dir, self.model, opt, run=run)
        step, spent = (resumed.step, resumed.seconds) if resumed else (0, 0.0)
        start = time.time() - spent
        last_save, ema = time.time(), None
        lazy_loss = self.device.type == "cuda"
        bar = tqdm(total=total, initial=step, desc=desc, disable=not progress, mininterval=5)
        done = False
        while not done:
            # each epoch's order depends only on (seed, epoch), so a resumed run skips exactly what it did
            epoch, offset = divmod(step, steps_per_epoch)
            order = self._batches(len(rows), lengths, tc.batch_size, np.random.default_rng([tc.seed, epoch]))
            for idx in order[offset:]:
                prog = step / max(total, 1)
                if budget:
                    prog = max(prog, (time.time() - start) / budget)
                if prog >= 1.0:
                    done = True
                    break
                lr = tc.lr * min(1.0, (step + 1) / max(tc.warmup_steps, 1)) * 0.5 * (1 + math.cos(math.pi * prog))
                for g in opt.param_groups:
                    g["lr"] = lr
                ix = torch.as_tensor(idx, device=self.device)
                t = int(lengths[idx].max()) + 1
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=use_bf16):
                    loss = self.token_loss(emb[ix], inp_all[ix, :t], tgt_all[ix, :t], self.extra_batch(extra, idx))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if tc.grad_clip:
                    nn.utils.clip_grad_norm_(self.model.parameters(), tc.grad_clip)
                opt.step()
                step += 1
                value = loss.detach() if lazy_loss else loss.item()  # a GPU is not synchronised every step
                ema = value if ema is None else 0.98 * ema + 0.02 * value
                bar.update(1)
                if step % 20 == 0:
                    bar.set_postfix(loss=f"{float(ema):.3f}", lr=f"{lr:.2e}")
                if checkpoint_dir is not None and time.time() - last_save >= checkpoint_every_min * 60:
                    state = TrainingState(step=step, seconds=time.time() - start, run=run)
                    save_training_state(checkpoint_dir, self.model, opt, state)
                    last_save = time.time()
        bar.close()
        self.model.eval()
        if checkpoint_dir is not None:
            clear_training_state(checkpoint_dir)
        summary = {
            "steps": step,
            "resumed_at_step": resumed.step if resumed else 0,
            "train_minutes": (time.time() - start) / 60,
            "final_loss": None if ema is None else float(ema),
            "n_train": len(rows),
            "epochs_done": step / max(steps_per_epoch, 1),
            "train_config": asdict(tc),
        }
        self.meta.setdefault("training", []).append(summary)
        return summary

    def generate(
        self,
        embeddings: np.ndarray,
        *,
        beam: int = 1,
        num_return: int = 1,
        batch_size: int = 64,
        length_penalty: float = 1.0,
        extra: Any = None,
        progress: bool = False,
    ) -> list[list[str]]:
        """Decode candidates for each embedding: ``num_return`` texts per row, best first."""
        self.model.eval()
        cond = torch.as_tensor(np.asarray(embeddings, dtype=np.float32))
        out: list[list[str]] = []
        for s in tqdm(range(0, cond.shape[0], batch_size), desc="invert", disable=not progress):
            c = cond[s : s + batch_size].to(self.device)
            ex = self.extra_batch(extra, np.arange(s, min(s + batch_size, cond.shape[0])))
            if beam <= 1:
                out.extend([t] for t in self.decode_ids(greedy_decode(self, c, ex)))
            else:
                for fin in beam_decode(self, c, ex, beam=beam, length_penalty=length_penalty):
                    texts = self.decode_ids([seq for _, seq in fin])
                    uniq = list(dict.fromkeys(texts))
                    out.append(uniq[:num_return])
        return out

    def invert(
        self, embeddings: np.ndarray, *, beam: int = 1, batch_size: int = 64, progress: bool = False
    ) -> list[str]:
        """Reconstruct one text per embedding (greedy when ``beam == 1``, else beam search)."""
        return [c[0] for c in self.generate(embeddings, beam=beam, batch_size=batch_size, progress=progress)]

    # ---------------------------------------------------------------- persistence

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write a verified artifact (:func:`~.inverter_io.save_inverter`) to ``directory``."""
        return save_inverter(self, directory)

    @classmethod
    def load(cls, directory: str | os.PathLike[str], *, device: torch.device | str | None = None) -> Inverter:
        """Load and verify an inverter written by :meth:`save` (:func:`~.inverter_io.load_inverter`).

        Raises:
            ArtifactError: Missing, truncated or edited files (weights, config or tokenizer), another
                kind of artifact (a policy, or a corrector loaded as an inverter) or an unknown format.
        """
        return load_inverter(directory, cls=cls, device=device)


_DETOK = [
    (re.compile(r"(?<=\w) ([-/@]) (?=\w)"), r"\1"),
    (re.compile(r"([(\[$]) "), r"\1"),
    (re.compile(r" ([)\]%])"), r"\1"),
]


def _detokenize(text: str) -> str:
    """Undo WordPiece spacing around intra-word hyphens, slashes and brackets ("west - ward" -> "west-ward")."""
    for pat, rep in _DETOK:
        text = pat.sub(rep, text)
    return text.strip()


def _cpu_bf16() -> bool:
    try:
        return bool(torch.backends.mkldnn.is_available()) and "bf16" in _cpu_flags()
    except Exception:  # pragma: no cover
        return False


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return line
    except OSError:  # pragma: no cover
        pass
    return ""
