"""Real vector engines for the sealed-store tests: a loopback ``chroma run`` server and Milvus Lite.

Qdrant's local mode is a Python re-implementation, so the sealed-store tests also run against
engines that install from the package index. Both are started and stopped by the tests themselves
(CI has no services), and each helper can say whether anything of it is still running, so a test
can assert that nothing is left behind. The records and the retrieval checks both engine tests run
(``check_*``) are here too, so the two tests differ only where the engines do.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest
from langchain_core.documents import Document

from textcrafter_rag.sealed.records import canonical_record_id
from textcrafter_rag.testing import pii_records
from textcrafter_rag.testing.pii_records import PiiRecord

READY_TIMEOUT_S = 60.0  # a cold `chroma run` starts in ~1-4 s; the deadline only bounds a broken start
STOP_TIMEOUT_S = 15.0


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel just handed out on ``host`` (a start that loses the race is retried)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _chroma_command() -> list[str]:
    """The ``chroma`` console script of this interpreter's environment (else chromadb's CLI entry point)."""
    exe = Path(sys.executable).parent / "chroma"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "import sys; sys.argv[0] = 'chroma'; from chromadb.cli.cli import app; app()"]


class ChromaServer:
    """``chroma run --path DIR`` on a free loopback port, in its own process group.

    Readiness is polled on ``/api/v2/heartbeat`` (failing fast if the process exits); the server's
    output goes to a log file, never to an unread pipe that could fill up and block it. A private
    ``HOME`` and ``ANONYMIZED_TELEMETRY=False`` keep it off the network and out of the user's files.
    """

    def __init__(self, path: Path, *, host: str = "127.0.0.1", attempts: int = 3) -> None:
        self.path, self.host, self.attempts = Path(path), host, attempts
        self.port = 0
        self.pid: int | None = None
        self.log_path = self.path.parent / f"{self.path.name}.server.log"
        self._home = self.path.parent / f"{self.path.name}.home"
        self._proc: subprocess.Popen[bytes] | None = None

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.port}/api/v2/heartbeat", timeout=2) as r:
                return r.status == 200 and "nanosecond heartbeat" in json.loads(r.read())
        except (OSError, ValueError):
            return False

    def start(self) -> ChromaServer:
        """Start the server and wait until it answers; raise with its log if it never does."""
        self.path.mkdir(parents=True, exist_ok=True)
        self._home.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "ANONYMIZED_TELEMETRY": "False", "HOME": str(self._home), "NO_COLOR": "1"}
        env["XDG_CACHE_HOME"] = str(self._home / ".cache")
        reason = ""
        for _ in range(self.attempts):
            self.port = free_port(self.host)
            args = ["run", "--path", str(self.path), "--host", self.host, "--port", str(self.port)]
            with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
                self._proc = subprocess.Popen(
                    [*_chroma_command(), *args],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            self.pid = self._proc.pid
            deadline = time.monotonic() + READY_TIMEOUT_S
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    reason = f"chroma exited with {self._proc.returncode}"
                    break
                if self._ready():
                    return self
                time.sleep(0.1)
            else:
                reason = f"no heartbeat within {READY_TIMEOUT_S}s"
            self.stop()
        raise RuntimeError(f"Chroma server did not start: {reason}\n{self.log_path.read_text(errors='replace')}")

    def stop(self) -> None:
        """SIGTERM the server's process group, wait, SIGKILL it if it does not exit; idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_TIMEOUT_S)

    def leftovers(self) -> list[psutil.Process]:
        """Processes of this server's group still alive (the group id is the server's pid)."""
        if self.pid is None:
            return []
        alive = []
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error, ProcessLookupError):
                if os.getpgid(p.pid) == self.pid and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
        return alive


@contextlib.contextmanager
def no_chroma_default_embedding() -> Iterator[None]:
    """Make Chroma's default (ONNX, downloading) embedding function fail loudly if anything calls it.

    ``langchain_chroma`` hands Chroma our (protected) vectors; a call to Chroma's own model would
    mean texts were embedded by something else, and it would try to download a model.
    """
    from chromadb.utils import embedding_functions as ef

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("Chroma's default embedding function was called: texts must arrive embedded")

    with pytest.MonkeyPatch.context() as mp:
        for cls in (ef.DefaultEmbeddingFunction, ef.ONNXMiniLM_L6_V2):
            mp.setattr(cls, "__call__", refuse)
        yield


def milvus_port(uri: str) -> int | None:
    """The loopback port of the in-process Milvus Lite server for ``uri``, if one is running."""
    from milvus_lite.server_manager import server_manager_instance

    entry = server_manager_instance._servers.get(os.path.abspath(uri))
    return None if entry is None else int(entry[2])


def listening_ports() -> set[int]:
    """TCP ports this process listens on (Milvus Lite serves gRPC from a thread of this process)."""
    return {c.laddr.port for c in psutil.Process().net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}


def release_milvus(uri: str) -> None:
    """Stop the in-process Milvus Lite server for ``uri``: memtables flushed to Parquet, WAL closed, LOCK dropped."""
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(uri)


def parquet_strings(root: Path) -> list[str]:
    """Every string value in every Parquet file under ``root``, decoded (Milvus compresses them with SNAPPY)."""
    import pyarrow.parquet as pq

    out: list[str] = []
    for path in sorted(root.rglob("*.parquet")):
        for row in pq.read_table(path).to_pylist():
            for value in row.values():
                if isinstance(value, bytes):
                    value = value.decode("utf-8", errors="replace")
                elif isinstance(value, dict):  # dynamic fields ($meta)
                    value = json.dumps(value, ensure_ascii=False)
                if isinstance(value, str):
                    out.append(value)
    return out


# -- the records and how a hit is checked (shared by the Chroma and Milvus tests) ------------------

RECORDS = pii_records(30)
SECRETS = [s for r in RECORDS for s in r.secrets]


def documents(records: Sequence[PiiRecord] = RECORDS) -> list[Document]:
    """The records as fresh ``Document`` objects (the stores must not share mutable metadata)."""
    return [Document(page_content=r.text, metadata=dict(r.metadata)) for r in records]


def assert_opened(hit: Document, ids: Sequence[Any]) -> int:
    """The hit is a record exactly as it went in (sealed fields decrypted), under its own id; its index."""
    n = int(hit.metadata["n"])
    expected = RECORDS[n]
    assert hit.page_content == expected.text
    assert {k: hit.metadata[k] for k in expected.metadata} == expected.metadata
    assert "_tc_id" not in hit.metadata
    assert hit.id == canonical_record_id(ids[n])
    return n


def clean_query_vectors(minilm: Any) -> dict[str, Any]:
    """Clean MiniLM vectors of every text and question: exactly what ``embed_query`` returns."""
    return {"text": minilm.encode([r.text for r in RECORDS]), "question": minilm.encode([r.question for r in RECORDS])}


def check_each_text_finds_itself(store: Any, ids: Sequence[Any], vectors: Any) -> list[list[Document]]:
    """Each record's own clean vector ranks it first, and every hit opens; returns the hits for engine checks."""
    all_hits = []
    for i, vector in enumerate(vectors):
        hits = store.similarity_search_by_vector(vector.tolist(), k=3)
        ranked = [assert_opened(h, ids) for h in hits]  # every hit opened
        assert ranked[0] == i
        all_hits.append(hits)
    return all_hits


def check_paraphrases_find_their_record(store: Any, ids: Sequence[Any], vectors: Any) -> None:
    """At least 27 of the 30 paraphrased questions find their record in the top 3 (measured >= 28 by L2)."""
    found = 0
    for i, vector in enumerate(vectors):
        found += i in [assert_opened(h, ids) for h in store.similarity_search_by_vector(vector.tolist(), k=3)]
    assert found >= 27, found


def check_scores_retriever_and_mmr(store: Any, ids: Sequence[Any]) -> None:
    """Scored search, relevance scores, the retriever and MMR all return opened records, best first."""
    record = RECORDS[4]
    scored = store.similarity_search_with_score(record.text, k=2)
    assert assert_opened(scored[0][0], ids) == 4 and scored[0][1] < scored[1][1]
    assert assert_opened(store.similarity_search_with_relevance_scores(record.text, k=2)[0][0], ids) == 4
    retrieved = [assert_opened(d, ids) for d in store.as_retriever(search_kwargs={"k": 2}).invoke(record.text)]
    assert retrieved[0] == 4 and len(retrieved) == 2
    mmr = store.as_retriever(search_type="mmr", search_kwargs={"k": 3, "fetch_k": 10}).invoke(record.text)
    assert len(mmr) == 3 and assert_opened(mmr[0], ids) == 4


def check_plain_filter_and_sealed_refusal(store: Any, ids: Sequence[Any], **plain_filter: Any) -> None:
    """A filter on a plain field works (engine syntax in ``plain_filter``); one on a sealed field is refused."""
    hits = store.similarity_search(RECORDS[0].question, k=5, **plain_filter)
    assert len(hits) == 5 and all(assert_opened(h, ids) >= 0 and h.metadata["category"] == "moves" for h in hits)
    with pytest.raises(ValueError, match="cannot filter on sealed"):
        store.similarity_search("x", k=5, filter={"author": RECORDS[0].metadata["author"]})
