"""Park, Chun and Lee (ICLR 2024): when AD returns a Clarke subderivative. See docs/conditions.md for the
module map."""
