"""Synthetic PII sentences for the frontier benchmark: a victim set and the attacker's own in-domain set.

Both are generated independently of the policy's PII corpus (``textcrafter_rag.textcrafter.pii``:
Faker ``en_US``, seed 0) and of the sealed-store records (``textcrafter_rag.testing.pii_records``):
new templates written as support tickets, clinical notes, HR notes and bank messages, Faker
``en_GB`` with seeds of their own. The victim set is what the protected store holds; the attacker
set is what an attacker who knows the store holds such notes would fine-tune on. They share the
domain (the same four kinds of note, the same kinds of entity) but **no template and no entity
value**: every attacker sentence whose entity value (as matched by :func:`entity_tokens`) occurs
among the victims' is skipped. Single name tokens may recur (a first name such as "James" is
common in any population), full entity values do not.

Entity recovery (:func:`entity_recovery`) asks how much of each victim's personal data appears in
its reconstruction. Matching is case-insensitive and whole-token: an entity and a reconstruction are
both cut into ``[a-z0-9]+`` tokens (after lower-casing), and an entity token counts as recovered when
it is one of the reconstruction's tokens ("Ann" is not recovered by "Anna"). For an e-mail address
only the local part (before ``@``) counts: the domain is shared by many people and trivially guessed.
``pii_entity_recovery`` is the share of all entity tokens recovered (so a multi-token entity counts
token by token: "14 March 2021" with only "2021" recovered scores 1/3); ``pii_entity_exact`` is the
share of entities whose whole token sequence appears contiguously in the reconstruction.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date

from faker import Faker

__all__ = [
    "ATTACKER_TEMPLATES",
    "ENTITY_KINDS",
    "VICTIM_TEMPLATES",
    "PIISentence",
    "attacker_pii_sentences",
    "entity_recovery",
    "entity_tokens",
    "victim_pii_sentences",
]

#: The kinds of personal data the templates hold (the slots of the templates).
ENTITY_KINDS: tuple[str, ...] = ("name", "date", "number", "email", "account")
LOCALE = "en_GB"
VICTIM_SEED, ATTACKER_SEED = 1201, 5407

#: What the protected store holds: support tickets, clinical notes, HR notes, bank messages.
VICTIM_TEMPLATES: tuple[str, ...] = (
    "Ticket {number}: {name} cannot log in and asks for a reset link at {email}.",
    "Support note: {name} phoned on {date} about a duplicate charge on account {account}.",
    "Escalated ticket {number} from {email}, opened by {name} on {date}.",
    "Clinic note: {name}, seen on {date}, reference {number}, reports chest pain.",
    "Discharge summary for {name}: admitted {date}, bed {number}.",
    "Referral letter for {name} was mailed to {email} on {date}.",
    "HR record: {name} starts on {date} with staff number {number}.",
    "Payroll pays {name} into account {account} from {date}.",
    "Disciplinary meeting with {name} set for {date}; contact {email}.",
    "Bank alert: account {account} of {name} was debited £{number} on {date}.",
    "Dear {name}, your transfer of £{number} to account {account} is complete.",
    "Fraud check: {name} confirmed the card ending {number} by writing from {email}.",
)
#: The attacker's own in-domain sentences: the same kinds of note, other wording.
ATTACKER_TEMPLATES: tuple[str, ...] = (
    "Case {number} raised by {name}; reply to {email}.",
    "Customer {name} reported a failed payment on {date}.",
    "{name} ({email}) wants case {number} closed today.",
    "Patient {name}, born {date}, hospital number {number}.",
    "GP entry: {name} was prescribed antibiotics on {date}.",
    "Blood results for {name} went out to {email}.",
    "Employee {name}, payroll id {number}, joined us {date}.",
    "Leave request from {name} for {date} approved, copy to {email}.",
    "Salary of {name} goes to acct {account}.",
    "Statement for acct {account} held by {name}, dated {date}.",
    "Hello {name}, we received £{number} into acct {account}.",
    "Security notice for {name}: new device login on {date}.",
)

_TOKEN = re.compile(r"[a-z0-9]+")
_SLOT = re.compile(r"\{(\w+)\}")
_FIRST_DAY, _LAST_DAY = date(2012, 1, 1), date(2024, 12, 31)


@dataclass(frozen=True)
class PIISentence:
    """One synthetic sentence and the personal data in it.

    Attributes:
        text: The sentence.
        entities: ``(kind, value)`` per slot, in template order (``kind`` from :data:`ENTITY_KINDS`).
        template: Index of the template it was filled from.
    """

    text: str
    entities: tuple[tuple[str, str], ...]
    template: int


def entity_tokens(kind: str, value: str) -> tuple[str, ...]:
    """The tokens an entity is matched by: lower-cased ``[a-z0-9]+`` runs (an e-mail's local part only)."""
    if kind == "email":
        value = value.split("@", 1)[0]
    return tuple(_TOKEN.findall(value.lower()))


def _value(fake: Faker, kind: str) -> str:
    if kind == "name":
        return f"{fake.first_name()} {fake.last_name()}"
    if kind == "date":
        d = fake.date_between_dates(date_start=_FIRST_DAY, date_end=_LAST_DAY)
        return f"{d.day} {d:%B %Y}"
    if kind == "number":
        return str(fake.random_int(min=10_000, max=999_999))
    if kind == "email":
        return fake.email()
    if kind == "account":
        return fake.numerify("########")  # UK account numbers have 8 digits
    raise ValueError(f"unknown entity kind {kind!r}")


def _generate(
    n: int,
    templates: Sequence[str],
    *,
    seed: int,
    exclude: set[tuple[str, ...]],
    fits: Callable[[str], bool] | None,
) -> list[PIISentence]:
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    fake = Faker(LOCALE)
    fake.seed_instance(seed)
    rng = random.Random(seed)
    out: list[PIISentence] = []
    seen: set[str] = set()
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise RuntimeError(f"could not generate {n} distinct PII sentences that fit (got {len(out)})")
        t = rng.randrange(len(templates))
        slots = _SLOT.findall(templates[t])
        values = {k: _value(fake, k) for k in dict.fromkeys(slots)}
        if any(entity_tokens(k, v) in exclude for k, v in values.items()):
            continue
        text = templates[t].format(**values)
        if text in seen or (fits is not None and not fits(text)):
            continue
        seen.add(text)
        out.append(PIISentence(text=text, entities=tuple((k, values[k]) for k in slots), template=t))
    return out


def victim_pii_sentences(
    n: int, *, seed: int = VICTIM_SEED, fits: Callable[[str], bool] | None = None
) -> list[PIISentence]:
    """``n`` distinct victim sentences (deterministic for ``seed``); ``fits`` keeps only texts it accepts."""
    return _generate(n, VICTIM_TEMPLATES, seed=seed, exclude=set(), fits=fits)


def attacker_pii_sentences(
    n: int,
    *,
    victims: Iterable[PIISentence],
    seed: int = ATTACKER_SEED,
    fits: Callable[[str], bool] | None = None,
) -> list[PIISentence]:
    """``n`` attacker sentences from :data:`ATTACKER_TEMPLATES`, none holding an entity value of ``victims``."""
    exclude = {entity_tokens(k, v) for s in victims for k, v in s.entities}
    return _generate(n, ATTACKER_TEMPLATES, seed=seed, exclude=exclude, fits=fits)


def _contains(haystack: list[str], needle: tuple[str, ...]) -> bool:
    k = len(needle)
    return k > 0 and any(tuple(haystack[i : i + k]) == needle for i in range(len(haystack) - k + 1))


def entity_recovery(victims: Sequence[PIISentence], reconstructions: Sequence[str]) -> dict[str, float]:
    """How much of the victims' personal data their reconstructions contain (percent; see the module doc).

    Returns:
        ``pii_entity_recovery`` (share of entity tokens recovered), ``pii_entity_exact`` (share of whole
        entities), ``pii_recovery_<kind>`` per kind present, and ``pii_n_entities``.
    """
    if len(victims) != len(reconstructions):
        raise ValueError(f"{len(victims)} victims but {len(reconstructions)} reconstructions")
    hit: dict[str, int] = {}
    total: dict[str, int] = {}
    exact = n_entities = 0
    for victim, recon in zip(victims, reconstructions):
        seq = _TOKEN.findall(recon.lower())
        have = set(seq)
        for kind, value in victim.entities:
            toks = entity_tokens(kind, value)
            if not toks:
                continue
            n_entities += 1
            exact += _contains(seq, toks)
            hit[kind] = hit.get(kind, 0) + sum(t in have for t in toks)
            total[kind] = total.get(kind, 0) + len(toks)
    if not n_entities:
        raise ValueError("the victims hold no entity tokens")
    out = {
        "pii_entity_recovery": 100.0 * sum(hit.values()) / sum(total.values()),
        "pii_entity_exact": 100.0 * exact / n_entities,
        "pii_n_entities": float(n_entities),
    }
    out.update({f"pii_recovery_{k}": 100.0 * hit[k] / total[k] for k in ENTITY_KINDS if total.get(k)})
    return out
