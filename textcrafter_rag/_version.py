"""The package version (one place, so low-level modules can read it without importing the package)."""

__version__ = "0.1.0"
