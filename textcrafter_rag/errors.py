"""One error hierarchy for the whole package.

Every error this library raises on purpose derives from :class:`TextcrafterError`, so an
application can catch them all in one place. Each class also derives from the built-in type
it was before (``ValueError``), so existing ``except ValueError`` handlers keep working.
Messages name the problem and where it is (file, row, line), never the values: raw vectors
and texts must not leak into logs or tracebacks.
"""

from __future__ import annotations

__all__ = [
    "TextcrafterError",
    "InvalidInputError",
    "InvalidTypeError",
    "ProtectionError",
    "NotPicklableError",
    "MissingDependencyError",
    "ArtifactError",
    "MissingPolicyError",
    "FingerprintMismatch",
    "VectorFileError",
    "MissingColumnError",
    "MissingPathError",
    "NotFittedError",
    "NotSupportedError",
]


class TextcrafterError(Exception):
    """Base class of every error raised on purpose by textcrafter-rag."""


class InvalidInputError(TextcrafterError, ValueError):
    """An argument or input has the right type but a value this library refuses.

    Wrong shape or dimension, NaN/Inf, an empty batch, an out-of-range option, an unknown spec.
    """


class InvalidTypeError(TextcrafterError, TypeError):
    """An argument or input has a type this library refuses (a bare string for a list, integer vectors...)."""


class ProtectionError(TextcrafterError, ValueError):
    """A mechanism could not protect a row (its magnitude is beyond float32 arithmetic); nothing was released."""


class NotPicklableError(TextcrafterError, TypeError):
    """An object holding a secret key refuses to be pickled (copies would carry the key, or lose it silently)."""


class MissingDependencyError(TextcrafterError, ImportError):
    """An optional package or model this feature needs is not installed (the message says what to install)."""


class ArtifactError(TextcrafterError, ValueError):
    """A saved artifact (policy, inverter) is missing, corrupted, edited or of an unknown format."""


class MissingPolicyError(TextcrafterError, ValueError):
    """No policy was given and none could be found, loaded or fitted for this encoder."""


class FingerprintMismatch(TextcrafterError, ValueError):
    """A saved policy was loaded with a different encoder than it was fitted for."""


class VectorFileError(TextcrafterError, ValueError):
    """A vector file could not be read or written. The message names the file and the chunk, row or line."""


class MissingColumnError(TextcrafterError, KeyError):
    """A batch or file has no column of the name given (a ``KeyError``, as a missing key of a mapping is)."""

    __str__ = Exception.__str__  # the message as written, not quoted as KeyError quotes a key


class MissingPathError(TextcrafterError, FileNotFoundError):
    """A file or folder a call needs does not exist."""


class NotFittedError(TextcrafterError, RuntimeError):
    """A model was used before it was fitted."""


class NotSupportedError(TextcrafterError, NotImplementedError):
    """An operation this object deliberately does not offer (the message says what to use instead)."""
