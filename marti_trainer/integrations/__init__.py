"""Adapters that let other training libraries drive marti envs.

- :mod:`marti_trainer.integrations.trl`: a marti env as TRL ``GRPOTrainer``'s
  ``rollout_func`` (one training row per agent turn; needs ``pip install trl``).

Importing this package imports nothing heavy; each adapter imports its library on use.
"""
