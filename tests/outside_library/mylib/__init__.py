"""An outside library's optimizers."""
