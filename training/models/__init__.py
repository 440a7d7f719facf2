"""Model kinds, one module each; :mod:`kvcast.training.registry` maps names to them."""
