"""Algorithms, one module each (its config, loss and update), built on the families of ``base.py``, with the
parts only population methods use (``population_tasks``, ``noise_table``, ``es_optimizers``) and the updates of N
seeds as one batched program (``ppo_seeds``, ``a2c_seeds``, ``sac_seeds``; what the first two share in
``seeds_batch``).

The registry that maps ``algo.name`` to these classes is ``rlcore.registry``. May import: ``rlcore.reward_signals``,
``rlcore.objectives``, ``rlcore.data``, ``rlcore.nets`` and below."""
