"""A project's own files: its ``dvc.yaml`` generated from its params files, ``rlcore init``, which creates a
working project in a folder, and ``rlcore compare``, which draws its DVC experiments' curves together.

May import: stages (the params each stage reads), params, config, evaluation (the figures), common. Runs git and
dvc as commands, never imports DVC."""
