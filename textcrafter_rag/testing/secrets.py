"""Does a key show anywhere? The check behind "keys never appear in reprs, dumps, files or errors"."""

from __future__ import annotations

import base64

__all__ = ["assert_no_key", "key_forms"]


def key_forms(key: bytes) -> tuple[str, ...]:
    """The spellings a leaked 32-byte key would take: hex, both base64 alphabets, and ``repr``'s escapes."""
    return (key.hex(), base64.urlsafe_b64encode(key).decode(), base64.b64encode(key).decode(), repr(key)[2:-1])


def assert_no_key(key: bytes, *texts: str) -> None:
    """Fail if any of ``texts`` holds ``key`` in any of :func:`key_forms` (the message never shows it).

    Raises:
        AssertionError: The index of the first text that holds the key.
    """
    forms = key_forms(key)
    for i, text in enumerate(texts):
        if any(form in text for form in forms):
            raise AssertionError(f"the key leaked into text #{i} (a repr, dump, file or error)")
