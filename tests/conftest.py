"""Shared test setup: fast CPU compiles (tests use small shapes, so optimisation passes cost more
than they save), and no global float64 (tests that need it use `jax.enable_x64(True)`)."""

import jax

import lion_jax  # noqa: F401  (sets lion-jax's XLA:CPU flags before any test starts a backend)

jax.config.update("jax_disable_most_optimizations", True)
