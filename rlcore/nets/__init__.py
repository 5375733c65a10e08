"""Networks and policies: building blocks, observation encoders, the actor-critic policies, recurrent cores,
value transforms, the device and precision networks train in, and N seeds' copies of a network stacked into one
batched program (``stacked``; the actor-critic's batched forward pass: ``stacked_actor_critic``).

May import: ``rlcore.config``, ``rlcore.envs``, ``rlcore.common``."""
