"""Epochal's harness: the library training code imports inside a trial (``harness.core``)."""
