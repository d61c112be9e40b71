"""The library's version, in one place: the package, the CLI and bundles read it from here."""

__version__ = "0.1.0"
