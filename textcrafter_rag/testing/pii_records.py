"""Synthetic documents full of personal data, for sealed-store tests (seeded Faker: the same every run).

Each record's text holds a name, birth date, street address, e-mail, phone and card number, and
its metadata repeats the name and e-mail (the fields a test seals) beside plain fields a store
can filter on (``category``, ``n``). :attr:`PiiRecord.secrets` lists what must never be readable
in a sealed store: the text and the sealed metadata values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from faker import Faker

__all__ = ["CATEGORIES", "SEALED_FIELDS", "PiiRecord", "pii_records"]

#: Metadata fields holding personal data: what a test passes as ``sealed_metadata``.
SEALED_FIELDS: tuple[str, ...] = ("author", "email")
#: Values of the plain ``category`` field.
CATEGORIES: tuple[str, ...] = ("billing", "moves", "support")


@dataclass(frozen=True)
class PiiRecord:
    """One synthetic document: its text, its metadata, and a paraphrased question about it."""

    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    question: str = ""

    @property
    def secrets(self) -> list[str]:
        """The text and every sealed metadata value: none may appear in a sealed store's files."""
        return [self.text, *(str(self.metadata[f]) for f in SEALED_FIELDS)]


def pii_records(n: int = 30, *, seed: int = 20240613) -> list[PiiRecord]:
    """``n`` distinct documents with personal data (deterministic for a given ``seed``).

    Measured with the bundled MiniLM and the shipped eps 1.0 policy (40 independent protections of
    30 records, seed unchanged): the record's own text retrieves it at rank 1 every time, by dot
    product and by L2 (dot-score margin >= 0.10), and :attr:`PiiRecord.question` ("Where does NAME
    live ...?") within the top 3 for >= 28 of 30 (L2; 30 of 30 by dot product).
    """
    fake = Faker("en_US")
    fake.seed_instance(seed)
    out: list[PiiRecord] = []
    names: set[str] = set()
    while len(out) < n:
        name = fake.name()
        if name in names:
            continue
        names.add(name)
        email = fake.email()
        text = (
            f"{name}, a {fake.job().lower()} born on {fake.date_of_birth(minimum_age=20, maximum_age=80).isoformat()}, "
            f"lives at {fake.street_address()}, {fake.city()}. Reach {name.split()[0]} at {email} or "
            f"{fake.phone_number()}. Card {fake.credit_card_number()}. Note: {fake.catch_phrase().lower()} to "
            f"{fake.bs()}."
        )
        i = len(out)
        metadata = {"author": name, "email": email, "category": CATEGORIES[i % len(CATEGORIES)], "n": i}
        out.append(
            PiiRecord(text=text, metadata=metadata, question=f"Where does {name} live and how can I contact them?")
        )
    return out
