"""Algorithms, one module each (its config, loss and update), built on the families of ``base.py``, with the
parts only population methods use (``population_tasks``, ``noise_table``, ``es_optimizers``) and the members an
on-policy update and SAC's update train (``members``, ``sac_members``: one algorithm's networks, or N seeds stacked).

The registry that maps ``algo.name`` to these classes is ``rlcore.registry``. May import: ``rlcore.reward_signals``,
``rlcore.objectives``, ``rlcore.data``, ``rlcore.nets`` and below."""
