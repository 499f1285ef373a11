"""Long Range Arena tasks, data loaders and training for lion-jax."""

# First, so that `python -m lra.<module>` sets lion-jax's XLA:CPU flags before JAX starts a backend.
import lion_jax  # noqa: F401  pylint: disable=unused-import
