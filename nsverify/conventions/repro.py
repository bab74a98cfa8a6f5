"""Reproduction scripts for release changes."""
from __future__ import annotations


def write_repros(rows, out):
    raise NotImplementedError
