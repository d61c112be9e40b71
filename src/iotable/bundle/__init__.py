"""Bundles on disk: the format (:mod:`.manifest`), its JSON field checks (:mod:`.jsonfields`), file I/O
(:mod:`.files`), host modules (:mod:`.hosts`) and the :func:`save` / :func:`load` verbs (:mod:`.bundle`)."""

from .bundle import FORMAT_VERSION, load, save

__all__ = ["FORMAT_VERSION", "load", "save"]
