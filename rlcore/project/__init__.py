"""A project's own files: its ``dvc.yaml`` generated from its params files, and ``rlcore init``, which creates a
working project in a folder.

May import: stages (the params each stage reads), params, config, common. Runs git and dvc as commands, never
imports DVC."""
