"""The pieces algorithms build their losses from: return and advantage estimators (GAE, V-trace, n-step),
reward scaling, the behavioural-cloning regularizer, and the schedules coefficients follow.

May import: ``rlcore.data``, ``rlcore.nets`` and below."""
