"""What a run trains on: datasets (the training and validation blocks, memory-mapped or tokenized here)."""
