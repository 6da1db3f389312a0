"""Oracles of the copy family: data movement only, so the expected result is the input
(or its transpose), bit for bit, in the input's dtype."""

from __future__ import annotations


def copy(a):
    return a.clone()


def transpose(a):
    return a.transpose(0, 1).contiguous()
