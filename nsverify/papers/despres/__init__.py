"""Despres: associated gradients of max and maxpool programs (:mod:`.associated`)."""
