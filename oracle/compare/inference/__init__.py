"""Convention inference: which legitimate convention an undeclared optimizer follows
(infer; `python -m oracle.compare.inference.infer`)."""
