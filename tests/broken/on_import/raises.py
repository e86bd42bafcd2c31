"""Raises while being imported, as an installed package whose native part cannot initialize."""
raise RuntimeError("CUDA driver initialization failed (simulated)")
