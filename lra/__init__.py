"""Long Range Arena tasks, data loaders and training for lion-jax."""
