"""What a command writes and finds again: ownership (the folder a command holds: its lock, its record, the
entries that are not its own) and checkpoints (find, check, publish, rotate; and whether a run may write into its
output folder, given what --resume continues there).
"""
