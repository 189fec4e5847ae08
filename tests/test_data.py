from __future__ import annotations

import pytest

from textcrafter_rag.data import (
    DatasetNotFoundError,
    bbc_news,
    bbc_sentences,
    find_data_dir,
    load_classification,
    resolve_data_dir,
    split_sentences,
)


def test_missing_data_dir_gives_a_clear_message(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TEXTCRAFTER_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(DatasetNotFoundError, match="--data-dir"):
        resolve_data_dir()
    with pytest.raises(DatasetNotFoundError, match="missing dataset file"):
        load_classification("sst2", "train", data_dir=tmp_path)
    with pytest.raises(ValueError, match="unknown dataset"):
        load_classification("imdb", "train", data_dir=tmp_path)


def test_env_var_wins_over_the_default(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TEXTCRAFTER_DATA", str(tmp_path))
    assert find_data_dir() == tmp_path
    assert find_data_dir(tmp_path / "x") == tmp_path / "x"


def test_bbc_corpus_ships_offline() -> None:
    texts, labels = bbc_news()
    assert len(texts) == 2225 and sorted(set(labels)) == ["business", "entertainment", "politics", "sports", "tech"]
    sents = bbc_sentences()
    assert len(sents) > 10000 and len(set(sents)) == len(sents)


def test_sentence_splitter() -> None:
    assert split_sentences("It rained. Then it stopped! Did it? yes.") == [
        "It rained.",
        "Then it stopped!",
        "Did it? yes.",
    ]
