"""Algorithms, one module each (its config, loss and update), built on the families of ``base.py``.

The registry that maps ``algo.name`` to these classes is ``rlcore.registry``.
"""
