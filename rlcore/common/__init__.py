"""The leaf helpers every layer uses: errors and their one-line messages, atomic files, the strict base of
every params section, episode seeds, checkpoints and where each stage reads and writes.

May import: nothing in rlcore (the bottom layer)."""
