"""PII attribute probe: does a (protected) embedding reveal that its sentence holds personal data?

Self-contained synthetic data: PII sentences fill templates with Faker values (names, emails,
phones, street addresses, card numbers, SSNs, IBANs, IPs, dates of birth); matched non-PII
sentences fill the *same* templates with generic, non-identifying phrases, so the probe must
detect the personal data rather than the template style. Plain corpus sentences are added as
further negatives. The probe is an independent scikit-learn MLP (not the policy's PII
logistic regression), trained on the attacker's protected embeddings; its score is ROC AUC.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

__all__ = ["PIIProbe", "non_pii_sentences", "pii_dataset", "pii_sentences"]

_TEMPLATES: tuple[str, ...] = (
    "Please forward the signed form to {who} at {contact}.",
    "The parcel was delivered to {who}, {place}.",
    "For questions about the refund, reach {who} via {contact}.",
    "The payment was made with {payment} by {who}.",
    "Records show that {who} moved to {place} last spring.",
    "Our notes say {who} can be contacted on {contact}.",
    "The reservation under {who} was paid using {payment}.",
    "Send a reminder to {who} about the meeting at {place}.",
    "The form lists {who} as the contact, reachable at {contact}.",
    "Yesterday {who} asked us to update the address to {place}.",
    "The account of {who} is linked to {payment}.",
    "According to the file, {who} was born on {dob}.",
)

_GENERIC = {
    "who": [
        "the customer",
        "the front desk",
        "our team",
        "the applicant",
        "the manager",
        "the office",
        "the support staff",
        "a colleague",
        "the committee",
        "the tenant",
    ],
    "contact": [
        "the usual channel",
        "the main office",
        "the help desk",
        "the shared inbox",
        "the hotline",
        "the website",
        "the reception",
        "the general line",
    ],
    "place": [
        "the new building",
        "the city centre",
        "the warehouse",
        "the main branch",
        "the north campus",
        "a larger office",
        "the regional depot",
    ],
    "payment": [
        "the company account",
        "a bank transfer",
        "the standard method",
        "a voucher",
        "the usual card",
        "the department budget",
    ],
    "dob": ["a public holiday", "a rainy day", "the same day as the opening", "an unknown date"],
}


def _pii_value(fake: object, slot: str, rng: random.Random) -> str:
    f = fake  # type: ignore[assignment]
    if slot == "who":
        return f.name()  # type: ignore[attr-defined]
    if slot == "contact":
        return rng.choice([f.email, f.phone_number])()  # type: ignore[attr-defined]
    if slot == "place":
        return f.address().replace("\n", ", ")  # type: ignore[attr-defined]
    if slot == "payment":
        return rng.choice(
            [
                lambda: f"card {f.credit_card_number()}",
                lambda: f"IBAN {f.iban()}",  # type: ignore
                lambda: f"SSN {f.ssn()}",
                lambda: f"IP {f.ipv4()}",
            ]
        )()  # type: ignore[attr-defined]
    return f.date_of_birth().isoformat()  # type: ignore[attr-defined]


def _fill(n: int, seed: int, pii: bool) -> list[str]:
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(seed)
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        tpl = rng.choice(_TEMPLATES)
        slots = {s: (_pii_value(fake, s, rng) if pii else rng.choice(_GENERIC[s])) for s in _GENERIC}
        out.append(tpl.format(**slots))
    return out


def pii_sentences(n: int, *, seed: int = 0) -> list[str]:
    """``n`` synthetic sentences with personal data."""
    return _fill(n, seed, True)


def non_pii_sentences(n: int, *, seed: int = 0) -> list[str]:
    """``n`` sentences from the same templates without personal data."""
    return _fill(n, seed + 7919, False)


def pii_dataset(n: int, plain: Sequence[str] = (), *, seed: int = 0) -> tuple[list[str], np.ndarray]:
    """A shuffled, balanced set of ``n`` sentences: half PII (label 1), half not (templated + ``plain``)."""
    rng = random.Random(seed)
    n_pos = n // 2
    n_plain = min(len(plain), (n - n_pos) // 2)
    neg = non_pii_sentences(n - n_pos - n_plain, seed=seed) + rng.sample(list(plain), n_plain)
    texts = pii_sentences(n_pos, seed=seed) + neg
    labels = np.asarray([1] * n_pos + [0] * len(neg))
    order = list(range(len(texts)))
    rng.shuffle(order)
    return [texts[i] for i in order], labels[order]


class PIIProbe:
    """An MLP probe ``embedding -> P(sentence contains PII)``.

    Args:
        hidden: Hidden layer width.
        seed: Random seed.
    """

    def __init__(self, *, hidden: int = 128, max_iter: int = 200, seed: int = 0) -> None:
        from sklearn.neural_network import MLPClassifier
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        self.model = make_pipeline(
            StandardScaler(),
            MLPClassifier(
                hidden_layer_sizes=(hidden,), max_iter=max_iter, early_stopping=True, random_state=seed, alpha=1e-3
            ),
        )

    def fit(self, embeddings: np.ndarray, labels: Sequence[int]) -> PIIProbe:
        """Train on protected embeddings and PII labels."""
        self.model.fit(np.asarray(embeddings, dtype=np.float32), np.asarray(labels))
        return self

    def predict_proba(self, embeddings: np.ndarray) -> np.ndarray:
        """P(PII) per embedding."""
        return self.model.predict_proba(np.asarray(embeddings, dtype=np.float32))[:, 1]

    def evaluate(self, embeddings: np.ndarray, labels: Sequence[int]) -> dict[str, float]:
        """``pii_auc`` (ROC AUC, 0-1; 0.5 = no information)."""
        from sklearn.metrics import roc_auc_score

        return {"pii_auc": float(roc_auc_score(np.asarray(labels), self.predict_proba(embeddings)))}
