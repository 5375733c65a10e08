"""Networks and policies: building blocks, observation encoders, the actor-critic policies, recurrent cores,
value transforms, and the device and precision networks train in.

May import: ``rlcore.config``, ``rlcore.envs``, ``rlcore.common``."""
