"""Fully equivalent graph rewrites of the TASO/Tensat kind, one theory per module."""
