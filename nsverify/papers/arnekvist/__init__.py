"""Arnekvist et al.: target normalization, momentum and dying ReLUs (:mod:`.dying_relu`; the report's claims:
:mod:`.repro`)."""
