"""Templated patient notes and queries: the victims, the attacker's candidate texts and its insertions.

The attacker of the guessing attacks knows a victim's template and every field but one (the disease, the
city or the name) and tries each of the 20 possible values: it embeds each candidate text with the public
encoder and compares it with what the store holds. Values are invented (no real person); the templates are
written for this benchmark (the frontier's ``pii_sentences.py`` notes are not reused, so the two studies stay
independent).
"""

from __future__ import annotations

import datetime as _dt
import random
from dataclasses import dataclass, field, replace

__all__ = [
    "ATTRIBUTES",
    "CITIES",
    "DISEASES",
    "NAMES",
    "NOTE_TEMPLATES",
    "QUERY_TEMPLATES",
    "Note",
    "NoteSet",
    "make_note_set",
]

DISEASES = (
    "type 2 diabetes",
    "asthma",
    "hypertension",
    "tuberculosis",
    "hepatitis C",
    "Crohn's disease",
    "multiple sclerosis",
    "rheumatoid arthritis",
    "epilepsy",
    "Parkinson's disease",
    "celiac disease",
    "lupus",
    "pneumonia",
    "major depressive disorder",
    "bipolar disorder",
    "HIV infection",
    "chronic kidney disease",
    "breast cancer",
    "leukemia",
    "migraine",
)
CITIES = (
    "Leeds",
    "Porto",
    "Lyon",
    "Graz",
    "Utrecht",
    "Krakow",
    "Bilbao",
    "Aarhus",
    "Turin",
    "Ghent",
    "Brno",
    "Tampere",
    "Cork",
    "Bergen",
    "Seville",
    "Dresden",
    "Malmo",
    "Basel",
    "Nantes",
    "Split",
)
NAMES = (
    "Maria Keller",
    "James Okafor",
    "Chen Wei",
    "Fatima Haddad",
    "Lukas Novak",
    "Priya Raman",
    "Tomasz Zielinski",
    "Ana Ferreira",
    "David Cohen",
    "Ingrid Larsen",
    "Kwame Mensah",
    "Sofia Rossi",
    "Hiroshi Tanaka",
    "Elena Petrova",
    "Omar Farouk",
    "Grace Mwangi",
    "Pablo Ortega",
    "Nora Lindqvist",
    "Arjun Mehta",
    "Claire Dubois",
)
#: What a victim's note or query reveals, and the values each can take (20 each: chance is 1/20).
ATTRIBUTES: dict[str, tuple[str, ...]] = {"disease": DISEASES, "city": CITIES, "name": NAMES}

NOTE_TEMPLATES = (
    "Patient {name} from {city} was diagnosed with {disease} on {date}.",
    "{name}, a resident of {city}, was admitted on {date} and treated for {disease}.",
    "On {date}, {name} ({city}) received a diagnosis of {disease}.",
    "Clinic note: {name} of {city} reports symptoms consistent with {disease}; seen {date}.",
)
QUERY_TEMPLATES = (
    "What treatment did {name} from {city} receive for {disease}?",
    "Show the records of {name} in {city} about {disease}.",
    "Is {name} from {city} still being treated for {disease}?",
)


@dataclass(frozen=True)
class Note:
    """One templated text: its template and field values (``text`` renders them)."""

    template: str
    name: str
    city: str
    disease: str
    date: str

    @property
    def text(self) -> str:
        """The rendered note or query."""
        return self.template.format(name=self.name, city=self.city, disease=self.disease, date=self.date)

    def value(self, attribute: str) -> str:
        """The value of ``attribute`` (``disease``, ``city`` or ``name``)."""
        return str(getattr(self, attribute))

    def candidates(self, attribute: str) -> list[Note]:
        """This note with ``attribute`` set to each of its 20 values (the attacker's guesses, in value order)."""
        return [replace(self, **{attribute: v}) for v in ATTRIBUTES[attribute]]


@dataclass
class NoteSet:
    """Every templated text one battery run embeds.

    Attributes:
        members: Victim notes, stored (the guessing and membership targets).
        non_members: Notes of the same family, never stored (membership negatives).
        others: Background notes of other people, stored (some are the pair holders' known records).
        queries: Victim queries the store receives (query-side guessing and the access pattern).
        variants: Per attribute and value, notes with that value and other fields drawn at random
            (the 200-text inserter's extra insertions; shared by all victims).
        query_variants: The same for queries (disease only).
    """

    members: list[Note]
    non_members: list[Note]
    others: list[Note]
    queries: list[Note]
    variants: dict[str, list[list[Note]]] = field(default_factory=dict)
    query_variants: list[list[Note]] = field(default_factory=list)


def _date(rng: random.Random) -> str:
    day = _dt.date(2019, 1, 1) + _dt.timedelta(days=rng.randrange(6 * 365))
    return f"{day:%B} {day.day}, {day.year}"


def _note(rng: random.Random, templates: tuple[str, ...], **fixed: str) -> Note:
    fields = {a: rng.choice(vals) for a, vals in ATTRIBUTES.items()}
    fields.update(fixed)
    return Note(template=rng.choice(templates), date=_date(rng), **fields)


def make_note_set(*, n_members: int, n_others: int, n_queries: int, n_variants: int, seed: int) -> NoteSet:
    """A deterministic set of notes: ``n_members`` victims, as many non-members, background and queries.

    ``n_variants`` notes per attribute value (and per disease for queries) are the 200-text inserter's
    extra insertions beside the exact candidates (``1 + n_variants`` per value: 10 at the full size).
    """
    rng = random.Random(seed)
    members = [_note(rng, NOTE_TEMPLATES) for _ in range(n_members)]
    non_members = [_note(rng, NOTE_TEMPLATES) for _ in range(n_members)]
    others = [_note(rng, NOTE_TEMPLATES) for _ in range(n_others)]
    queries = [_note(rng, QUERY_TEMPLATES) for _ in range(n_queries)]
    variants = {
        a: [[_note(rng, NOTE_TEMPLATES, **{a: v}) for _ in range(n_variants)] for v in vals]
        for a, vals in ATTRIBUTES.items()
    }
    query_variants = [[_note(rng, QUERY_TEMPLATES, disease=v) for _ in range(n_variants)] for v in DISEASES]
    return NoteSet(members, non_members, others, queries, variants, query_variants)
