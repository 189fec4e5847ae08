"""The ``textcrafter`` command line: fit, protect, rekey, keygen, rebuild-index, demo, attack, audit."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any, NoReturn

from .demo import run_demo
from .deprecation import add_renamed_flag
from .encoders import encoder_from_name
from .errors import InvalidInputError, MissingDependencyError, TextcrafterError
from .extras import is_installed, is_missing, missing_extra
from .keyed import TenantKey
from .options import ProtectionOptions, check_tenant
from .sealing import generate_key, key_like_runs, load_key
from .streaming import protect_file, rekey_file
from .textcrafter import CalibrationConfig, RewardWeights, fit_textcrafter

try:  # the research commands need torch; the runtime install (no extra) still has every other command
    from .attacks.cli import add_attack_command
    from .audit.cli import add_audit_command

    _RESEARCH_MISSING: ModuleNotFoundError | None = None
except ModuleNotFoundError as _exc:
    if not (is_missing(_exc, extra="fit") or is_missing(_exc, extra="audit")):
        raise
    _RESEARCH_MISSING = _exc

__all__ = ["main", "build_parser"]

_REDACTED = "<redacted>"
#: What a key looks like: 32 bytes in (URL-safe or standard) base64, 43 characters and an optional "="
#: (after an option's dashes or "=" too: ``--key=KEY``, or a key that starts with "-").
_KEY_LIKE = re.compile(r"(?<![A-Za-z0-9+/_])[A-Za-z0-9+/_-]{43}=?(?![A-Za-z0-9+/_=-])")


def _redact_keys(text: str) -> str:
    """``text`` with every key-looking run of characters replaced: nothing printed ever holds a key.

    Also a key inside a longer run or a path (``/run/secrets/<KEY>``, ``<KEY>.key``, ``secrets-<KEY>``):
    any run of 43 or more base64 characters mixing cases (:func:`~textcrafter_rag.sealing.key_like_runs`).
    """
    text = _KEY_LIKE.sub(_REDACTED, text)
    for run in sorted(set(key_like_runs(text)), key=len, reverse=True):
        text = text.replace(run, _REDACTED)
    return text


def _shown_arg(token: str) -> str:
    """A command-line token as an error may show it: option names only, never a value or a key."""
    if not token.startswith("-"):
        return _REDACTED  # a value
    option, eq, _ = token.partition("=")
    if _KEY_LIKE.search(option):  # a key that starts with "-", not an option
        return _REDACTED
    return option + eq + (_REDACTED if eq else "")


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors never print a value given on the command line.

    argparse echoes what it could not use: ``unrecognized arguments: --key=<the key>``, ``ambiguous
    option: --key=<the key> could match --key-file, --key-env``, ``invalid int value: '<the key>'``.
    A key typed by mistake would end up in the terminal, the shell's scrollback and CI logs. Errors
    here keep option names and replace values (anything after ``=``, every quoted or listed argument
    the user gave, and anything that looks like a key) with ``<redacted>``. Subcommand parsers are of
    this class too (``add_subparsers`` builds them with the parent's class).
    """

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        self._tc_argv = [str(a) for a in (sys.argv[1:] if args is None else args)]
        return super().parse_known_args(args, namespace)

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error("unrecognized arguments: " + " ".join(_shown_arg(a) for a in extras))
        return parsed

    def error(self, message: str) -> NoReturn:
        for token in sorted(set(getattr(self, "_tc_argv", ())), key=len, reverse=True):
            shown = _shown_arg(token)
            if shown == token:
                continue
            if shown == _REDACTED and token.startswith("-") and not token.startswith("--"):
                # a key that starts with "-" reads as a short option and its value: "-hKEY" is "-h" with the
                # explicit argument "KEY", which argparse echoes ("ignored explicit argument 'KEY'")
                message = message.replace(token[2:], _REDACTED)
            if token.startswith("-"):  # --opt=value, as in "ambiguous option: --key=... could match"
                message = re.sub(rf"(?<!\S){re.escape(token)}(?!\S)", shown, message)
            # argparse quotes values: "invalid int value: '...'", "invalid choice: '...'"
            message = message.replace(repr(token), repr(_REDACTED))
            value = token.partition("=")[2] if token.startswith("-") else ""
            if value:  # "ignored explicit argument '<value>'"
                message = message.replace(repr(value), repr(_REDACTED))
        super().error(_redact_keys(message))


def _cmd_fit(args: argparse.Namespace) -> int:
    base = encoder_from_name(args.encoder) if args.encoder else None
    t0 = time.perf_counter()
    tc = fit_textcrafter(
        base,
        eps=args.eps,
        quick=args.quick,
        seed=args.seed,
        calibration=CalibrationConfig(data_dir=args.data_dir),
        weights=RewardWeights(alpha=args.alpha, beta=args.beta, gamma=args.gamma),
        progress=not args.no_progress,
    )
    path = tc.save(args.out)
    print(f"Saved policy to {path} (fit took {time.perf_counter() - t0:.1f}s)")
    return 0


def _key(path: str | None, env: str | None, tenant: str) -> TenantKey | None:
    """The key named by ``--key-file`` / ``--key-env`` (never given on the command line itself)."""
    if path is None and env is None:
        return None
    return TenantKey(load_key(path, env=env), tenant)


def _cmd_protect(args: argparse.Namespace) -> int:
    keyed = args.key_file is not None or args.key_env is not None
    check_tenant(args.tenant or "", keyed, name="--tenant", needs="a key, --key-file or --key-env")
    options = ProtectionOptions(
        mechanism=args.mechanism,
        secure_mode=args.secure,
        chunk_size=args.chunk_size,
        key=load_key(args.key_file, env=args.key_env) if keyed else None,
        tenant=args.tenant or "",
    )
    report = protect_file(
        args.input,
        args.output,
        options=options,
        encoder=args.encoder,
        column=args.column,
        output_column=args.output_column,
        text_column=args.text_column,
        progress=not args.no_progress,
    )
    print(
        f"Protected {report.rows} vectors ({report.dim}-d) with {report.mechanism} -> {report.output} "
        f"in {report.seconds:.1f}s ({report.vectors_per_s:.0f} vectors/s)" + _stored_under(report.key_fingerprint)
    )
    return 0


def _stored_under(fingerprint: str | None) -> str:
    if fingerprint is None:
        return ""
    return f"\nKey fingerprint {fingerprint} (not secret): keep it with the store; rekey --expect-fingerprint checks it"


def _cmd_rekey(args: argparse.Namespace) -> int:
    tenant = args.tenant or ""
    old = _key(args.key_file, args.key_env, tenant)
    new_path, new_env = args.new_key_file, args.new_key_env
    if new_path is None and new_env is None:  # the same secret, another tenant
        new_path, new_env = args.key_file, args.key_env
    new = _key(new_path, new_env, tenant if args.new_tenant is None else args.new_tenant)
    if old is None or new is None:  # argparse requires one of the old key's flags; refuse plainly if not
        raise InvalidInputError("rekey needs the current key: --key-file or --key-env")
    report = rekey_file(
        args.input,
        args.output,
        key=old,
        new_key=new,
        column=args.column,
        chunk_size=args.chunk_size,
        progress=not args.no_progress,
        expected_fingerprint=args.expect_fingerprint,
    )
    print(
        f"Re-keyed {report.rows} vectors ({report.dim}-d) -> {report.output} in {report.seconds:.1f}s"
        + _stored_under(report.key_fingerprint)
    )
    return 0


def _add_key_flags(parser: argparse.ArgumentParser, *, new: bool = False, required: bool = False) -> None:
    prefix, what = ("--new-", "the new key") if new else ("--", "the key")
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument(
        f"{prefix}key-file", default=None, help=f"file holding {what} (what `textcrafter keygen` printed)"
    )
    group.add_argument(
        f"{prefix}key-env", default=None, help=f"environment variable holding {what}, e.g. TEXTCRAFTER_KEY"
    )
    parser.add_argument(
        f"{prefix}tenant",
        default=None,
        help=f"tenant id mixed into {what} (default: " + ("--tenant)" if new else "none)"),
    )


def _add_rekey_command(sub: argparse._SubParsersAction) -> None:
    rekey = sub.add_parser(
        "rekey",
        help="move stored vectors from one key or tenant to another without re-embedding, streamed",
        description="Rewrite a .npy, .parquet or .jsonl file of keyed releases as if they had been released under "
        "another key (--new-key-file / --new-key-env) or tenant (--new-tenant), chunk by chunk. The un-keyed vectors "
        "are never formed and no noise is added. Keys are read from files or environment variables, never "
        "from the command line.",
    )
    rekey.add_argument("input", help=".npy, .parquet or .jsonl file of vectors stored under the old key")
    rekey.add_argument("output", help=".npy, .parquet or .jsonl file to write")
    _add_key_flags(rekey, required=True)
    _add_key_flags(rekey, new=True)
    rekey.add_argument(
        "--expect-fingerprint",
        default=None,
        help="the key fingerprint `protect` printed for this store: a wrong key or tenant is refused before "
        "anything is read (without it, a wrong key silently garbles the output)",
    )
    rekey.add_argument("--column", default="embedding", help="embedding column/field (default: embedding)")
    rekey.add_argument("--chunk-size", type=int, default=4096, help="rows per step (default 4096)")
    rekey.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    rekey.set_defaults(func=_cmd_rekey)


#: The program that rebuilds a store-held index: langchain-textcrafter's (the core imports no integration).
REBUILD_MODULE = "langchain_textcrafter.rebuild"


def _cmd_rebuild_index(args: argparse.Namespace) -> int:
    """Run langchain-textcrafter's rebuild program (the core imports no integration), relaying its output."""
    if not is_installed("langchain_textcrafter"):
        raise MissingDependencyError("rebuild-index runs langchain-textcrafter's sealed store: pip install it")
    return subprocess.call([sys.executable, "-m", REBUILD_MODULE, *args.rest])


def _cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(n_docs=args.docs, queries=args.query or None, refit=args.refit, eps=args.eps)


def _cmd_keygen(args: argparse.Namespace) -> int:
    print(generate_key())
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``textcrafter`` command."""
    parser = _Parser(prog="textcrafter", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    fit = sub.add_parser("fit", help="fit a TextCrafter policy for an encoder and save it")
    fit.add_argument("--out", required=True, help="directory to save the policy to")
    fit.add_argument(
        "--eps",
        type=float,
        default=1.0,
        help="perturbation norm (default 1.0, the retrieval benchmark's recommendation; the paper uses 2.5)",
    )
    fit.add_argument(
        "--encoder", default=None, help="sentence-transformers model name or path (default: bundled MiniLM)"
    )
    fit.add_argument("--alpha", type=float, default=1.0)
    fit.add_argument("--beta", type=float, default=1.0)
    fit.add_argument("--gamma", type=float, default=1.0)
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--data-dir", default=None, help="datasets folder (WikiText-2 is used when present)")
    fit.add_argument("--quick", action="store_true", help="small, fast fit (for trying things out)")
    fit.add_argument("--no-progress", action="store_true")
    fit.set_defaults(func=_cmd_fit)

    prot = sub.add_parser(
        "protect",
        help="protect vectors or texts in a .npy, .parquet or .jsonl file, streamed in bounded memory",
        description="Stream a file through a mechanism chunk by chunk (peak memory set by --chunk-size, not the file "
        "size). The output format follows its suffix: the input's format (other columns kept), or .npy "
        "(the protected vectors only); .npy input can also go to .parquet or .jsonl. The output "
        "appears only once every chunk succeeded.",
    )
    which = prot.add_mutually_exclusive_group()
    which.add_argument(
        "--mechanism",
        default=None,
        help="mechanism spec (e.g. gaussian:s=0.01, textcrafter:eps=2.5) or TextCrafter policy directory "
        "(default: the shipped eps=1.0 policy for the bundled MiniLM)",
    )
    add_renamed_flag(which, "--policy", "--mechanism", dest="mechanism")
    prot.add_argument(
        "--input",
        required=True,
        help=".npy of vectors (n, D), or .parquet / .jsonl with an embedding column or a text column",
    )
    prot.add_argument("--output", required=True, help=".npy, .parquet or .jsonl file to write")
    prot.add_argument(
        "--column",
        default="embedding",
        help="embedding column (.parquet) or field (.jsonl) to protect (default: embedding)",
    )
    prot.add_argument(
        "--output-column",
        default=None,
        help="column/field for the protected vectors (default: --column; if it differs, the clean column is dropped)",
    )
    prot.add_argument(
        "--text-column",
        default="text",
        help="text column/field embedded when there is no embedding column (default: text)",
    )
    prot.add_argument(
        "--encoder", default=None, help="for text inputs: 'bundled' (default) or a sentence-transformers model"
    )
    prot.add_argument("--chunk-size", type=int, default=4096, help="rows per step; bounds peak memory (default 4096)")
    prot.add_argument("--secure", action="store_true", help="draw noise from the OS CSPRNG")
    _add_key_flags(prot)
    prot.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    prot.set_defaults(func=_cmd_protect)

    keygen = sub.add_parser(
        "keygen",
        help="print a new random 32-byte key (URL-safe base64) for sealed stores and keyed protection",
        description="Print a new key from the OS CSPRNG. Keep it in a secret manager or an environment variable; "
        "whoever holds it can read sealed texts. Sealing and the keyed rotation use separate subkeys "
        "derived from it.",
    )
    keygen.set_defaults(func=_cmd_keygen)
    _add_rekey_command(sub)

    rebuild = sub.add_parser(
        "rebuild-index",
        help="index every sealed record of a Chroma or Qdrant collection from the store (the store-held index)",
        add_help=False,
    )
    rebuild.set_defaults(func=_cmd_rebuild_index, rest=[])  # its options: textcrafter rebuild-index --help
    demo = sub.add_parser("demo", help="the quickstart: protect a BBC News index and compare retrieval")
    demo.add_argument("--docs", type=int, default=500, help="number of BBC News articles to index")
    demo.add_argument("--query", action="append", help="a query to run (repeatable)")
    demo.add_argument(
        "--eps",
        type=float,
        default=1.0,
        help="perturbation norm: 1.0 (default) and 2.5 ship; other values fit a quick policy",
    )
    demo.add_argument("--refit", action="store_true", help="fit a fresh quick policy instead of the shipped one")
    demo.set_defaults(func=_cmd_demo)

    if _RESEARCH_MISSING is None:
        add_attack_command(sub)
        add_audit_command(sub)
    else:
        for name, what in (("attack", "measure an inversion attack"), ("audit", "audit a vector store")):
            stub = sub.add_parser(name, help=f"{what} (needs: pip install 'textcrafter-rag[audit]')")
            stub.set_defaults(func=_research_missing)
    return parser


def _research_missing(args: argparse.Namespace) -> int:
    """``attack`` and ``audit`` on an install without their extra: say which one, do nothing."""
    package = (_RESEARCH_MISSING.name if _RESEARCH_MISSING is not None else None) or "torch"
    raise missing_extra(package, extra="audit", purpose="the attacks and the store audit") from None


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``textcrafter`` command."""
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if getattr(args, "func", None) is _cmd_rebuild_index:  # the child program parses its own arguments
        args.rest = rest
    elif rest and getattr(args, "func", None) is not _research_missing:  # a stub takes any argument: its extra is named
        parser.parse_args(argv)  # the usual error (values redacted)
    try:
        return int(args.func(args) or 0)
    except (TextcrafterError, ValueError, FileNotFoundError) as exc:  # messages never hold a key or a data value
        print(f"error: {_redact_keys(str(exc))}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
